package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
)

// TestProgramCLI runs the gateway with the ProgramService mounted (as
// `toolfleet dev` wires it) and the orchestrator, then runs a program with the
// CLI, with and without --watch, and one that hits a limit.
func TestProgramCLI(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	programs := &programMount{}
	f, o := startOrchestrated(ctx, t, stack, nil, programs.mount())
	programs.serve(o, f.Gateway)

	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sum := write("sum.star", `total = 0
for n in args["numbers"]:
    total = Calculator_Add(a=total, b=n).value["result"]
r = Calculator_Divide(a=total, b=0)
print("divided:", r.ok)
result = {"total": total, "divided": r.ok}
`)
	loop := write("loop.star", "x = 0\nwhile True:\n    x += 1\n")
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand()
		root.SetArgs(append(args, "--gateway", f.Gateway.Addr()))
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	tests := []struct {
		name    string
		args    []string
		want    []string
		wantErr bool
	}{
		{"wait for the result", []string{"program", "run", sum, "--arg", "numbers=[1,2,3]"}, []string{`"total": 6`, `"divided": false`}, false},
		{"watch", []string{"program", "run", sum, "--arg", "numbers=[4,5]", "--watch", "--id", "cli-watch"},
			[]string{"started", "tool_call Calculator.Add@1.0.0 [cli-watch/1]", "print: divided: False", "completed", `"total": 9`}, false},
		{"a limit names itself and the line", []string{"program", "run", loop}, []string{"limit max_steps", "loop.star:", "x += 1"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { // sequential: they share ctx and the fleet
			out, err := run(tt.args...)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v\n%s", err, tt.wantErr, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
