// The layering rule of docs/architecture.md, checked on every package of the module.
package toolfleet_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/toolfleet/toolfleet/"

// layerRules maps a package prefix to the prefixes it must not import.
var layerRules = []struct {
	from      string
	forbidden []string
}{
	{"sdk/", []string{"services/", "orchestrator/", "workers/", "cmd/", "internal/devstack"}},
	{"gen/", []string{"sdk/", "services/", "orchestrator/", "workers/", "cmd/", "internal/"}},
	{"internal/", []string{"services/", "orchestrator/", "workers/", "cmd/"}},
	{"services/", []string{"cmd/"}},
	{"orchestrator/", []string{"cmd/"}},
	{"workers/", []string{"cmd/", "services/", "orchestrator/"}},
}

// violations lists "pkg imports dep" for every broken rule.
func violations(imports map[string][]string) []string {
	var out []string
	for pkg, deps := range imports {
		rel, ok := strings.CutPrefix(pkg, module)
		if !ok {
			continue
		}
		for _, rule := range layerRules {
			if !strings.HasPrefix(rel, rule.from) {
				continue
			}
			for _, dep := range deps {
				drel, ok := strings.CutPrefix(dep, module)
				if !ok {
					continue
				}
				for _, bad := range rule.forbidden {
					if strings.HasPrefix(drel, bad) {
						out = append(out, pkg+" imports "+dep)
					}
				}
			}
		}
	}
	return out
}

func TestLayeringRules(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", "./...")
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(outb)))
	for dec.More() {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		imports[p.ImportPath] = append(append(p.Imports, p.TestImports...), p.XTestImports...)
	}
	if len(imports) < 3 {
		t.Fatalf("go list found only %d packages; is the test running at the module root?", len(imports))
	}
	for _, v := range violations(imports) {
		t.Errorf("layering rule broken (docs/architecture.md): %s", v)
	}
}

// The checker itself must catch a violation, or the test above could never fail.
func TestLayeringRulesCatchViolations(t *testing.T) {
	t.Parallel()
	got := violations(map[string][]string{
		module + "sdk/tool":           {module + "internal/devstack", module + "gen/toolfleet/v1"},
		module + "workers/calculator": {module + "sdk/tool", module + "services/gateway"},
		module + "cmd/toolfleet":      {module + "internal/devstack"},
	})
	if len(got) != 2 {
		t.Fatalf("violations = %v, want the sdk→devstack and workers→services imports", got)
	}
}
