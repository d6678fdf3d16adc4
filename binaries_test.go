// Production binaries never link the embedded servers (docs/operations.md,
// ARCHITECTURE §10): only `toolfleet dev` starts NATS and Temporal in-process.
package toolfleet_test

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// embeddedServers are the module paths of the servers `toolfleet dev` embeds.
var embeddedServers = []string{"go.temporal.io/server", "github.com/nats-io/nats-server"}

// productionMains are the package patterns of every production binary; a
// pattern that matches nothing (cmd/orchestrator before it lands) is skipped.
var productionMains = []string{"./cmd/gateway", "./cmd/orchestrator", "./workers/*"}

// linkedServers lists the embedded-server packages a main package links.
func linkedServers(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var linked []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		for _, srv := range embeddedServers {
			if dep := sc.Text(); dep == srv || strings.HasPrefix(dep, srv+"/") {
				linked = append(linked, dep)
			}
		}
	}
	return linked
}

func TestProductionBinariesLinkNoEmbeddedServer(t *testing.T) {
	t.Parallel()
	var mains []string
	for _, pattern := range productionMains {
		dirs, err := filepath.Glob(strings.TrimPrefix(pattern, "./"))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dirs {
			if m, _ := filepath.Glob(filepath.Join(d, "main.go")); len(m) == 1 {
				mains = append(mains, "./"+d)
			}
		}
	}
	if len(mains) < 6 { // the gateway and the five bundled workers at least
		t.Fatalf("found only the production binaries %v; is the test running at the module root?", mains)
	}
	for _, m := range mains {
		t.Run(m, func(t *testing.T) {
			t.Parallel()
			if linked := linkedServers(t, m); len(linked) > 0 {
				t.Errorf("%s links the embedded servers (%d packages, e.g. %s): production binaries talk to external NATS and Temporal; only cmd/toolfleet may import internal/devstack or natsx's embedded server",
					m, len(linked), linked[0])
			}
		})
	}
}

// The check must see a link where there is one, or the test above could never fail.
func TestLinkedServersSeesToolfleetDev(t *testing.T) {
	t.Parallel()
	linked := strings.Join(linkedServers(t, "./cmd/toolfleet"), " ")
	for _, srv := range embeddedServers {
		if !strings.Contains(linked, srv) {
			t.Errorf("cmd/toolfleet embeds %s, but go list -deps does not show it", srv)
		}
	}
}
