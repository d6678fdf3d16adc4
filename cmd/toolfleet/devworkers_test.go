package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/scaffold"
	"github.com/toolfleet/toolfleet/internal/syncbuf"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

// TestDevWorkerFromSource is the loop: a toolkit scaffolded in its
// own module, `toolfleet dev --worker DIR` builds and runs it, its tools are
// called through the dev gateway, an edit is served without restarting dev,
// and stopping dev stops the worker process.
func TestDevWorkerFromSource(t *testing.T) {
	if testing.Short() {
		t.Skip("runs toolfleet dev and builds a module")
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tickets")
	if _, err := (scaffold.Toolkit{Name: "tickets", Replace: root, Template: scaffold.TemplateRich}).Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := (scaffold.Generator{}).Generate(t.Context(), dir); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr syncbuf.Buffer
	devCmd := newRootCommand()
	devCmd.SetOut(&stdout)
	devCmd.SetErr(&stderr)
	devCmd.SetArgs([]string{"dev", "--data-dir", t.TempDir(), "--nats-port", "0", "--temporal-port", "0", "--temporal-ui-port", "0",
		"--gateway-port", "0", "--log-level", "info", "--worker", dir, "--dev-file", ""})
	done := make(chan error, 1)
	go func() { done <- devCmd.ExecuteContext(ctx) }()

	var gw string
	deadline := time.Now().Add(2 * time.Minute)
	for gw == "" {
		if m := regexp.MustCompile(`Gateway\s+(\S+)`).FindStringSubmatch(stdout.String()); m != nil && strings.Contains(stdout.String(), "Your worker  "+dir) {
			gw = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("dev stopped: %v\n%s\n%s", err, stdout.String(), stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev not up:\n%s\n%s", stdout.String(), stderr.String())
		}
	}
	client := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(t, gw))
	getMissing := func() string {
		in, _ := structpb.NewStruct(map[string]any{"id": "T-99"})
		res, err := client.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Tickets.Get", Input: in})
		if err != nil {
			return "error: " + err.Error()
		}
		return res.GetError().GetMessage()
	}
	waitAnswer := func(want string) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			got := getMissing()
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Tickets.Get T-99 = %q, want %q\nstderr:\n%s", got, want, stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	start := time.Now()
	waitAnswer("no ticket T-99")
	t.Logf("dev up to the worker's first answer: %s", time.Since(start).Round(100*time.Millisecond))

	// An edit is built and served without restarting dev.
	svc := filepath.Join(dir, "tickets", "service.go")
	src, err := os.ReadFile(svc)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(src), `"no ticket "+req.GetId()`, `"there is no ticket "+req.GetId()`, 1)
	if edited == string(src) {
		t.Fatal("the scaffold's service.go changed: update this test's edit")
	}
	// A caller loop runs through the rebuild: every call is answered, by the
	// old worker or the new one (no NotFound, no draining in between).
	callerDone := make(chan []string)
	stopCaller := make(chan struct{})
	go func() {
		var bad []string
		for calls := 0; ; calls++ {
			select {
			case <-stopCaller:
				callerDone <- bad
				return
			default:
			}
			if got := getMissing(); got != "no ticket T-99" && got != "there is no ticket T-99" {
				bad = append(bad, got)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if err := os.WriteFile(svc, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waitAnswer("there is no ticket T-99")
	t.Logf("edit to served: %s", time.Since(start).Round(100*time.Millisecond))
	// The old worker is stopped once the new one is ready; keep calling past that.
	for !strings.Contains(stderr.String(), "worker stopped") {
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("the old worker was not stopped:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	close(stopCaller)
	if bad := <-callerDone; len(bad) > 0 {
		t.Errorf("%d calls failed during the rebuild, first %q\nstderr:\n%s", len(bad), bad[0], stderr.String())
	}
	for _, want := range []string{"building…", "ready (pid"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("no %q line on stderr:\n%s", want, stderr.String())
		}
	}

	// A broken edit keeps the running worker answering and prints the compiler's error.
	if err := os.WriteFile(svc, []byte(edited+"\nfunc broken() { undefinedThing() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(stderr.String(), "build failed; the running worker") {
		if time.Since(start) > 4*time.Minute {
			t.Fatalf("no build failure reported:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "undefined: undefinedThing") {
		t.Errorf("the compiler's error is not shown:\n%s", stderr.String())
	}
	if got := getMissing(); got != "there is no ticket T-99" {
		t.Errorf("after a broken edit Tickets.Get T-99 = %q, want the running worker's answer", got)
	}

	pids := regexp.MustCompile(`worker started.* pid=(\d+)`).FindAllStringSubmatch(stderr.String(), -1)
	if len(pids) < 2 {
		t.Fatalf("want two worker starts in the log:\n%s", stderr.String())
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("dev did not stop")
	}
	for _, m := range pids {
		pid, _ := strconv.Atoi(m[1])
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("worker pid %d outlived dev", pid)
		}
	}
	if !strings.Contains(stderr.String(), "worker stopped") {
		t.Errorf("no polite stop in the log:\n%s", stderr.String())
	}
}
