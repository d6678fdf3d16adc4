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
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
)

// TestScriptFileRuns drives agent runs with --model scripted:FILE.yaml, as
// `toolfleet dev --script-dir` wires it: a run whose second call uses the
// first call's result, a run in code mode, and a bad file whose error names
// its line.
func TestScriptFileRuns(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("turns.yaml", `turns:
  - text: Adding first.
    calls:
      - tool: Calculator.Add
        id: sum
        args: {a: 2, b: 3}
  - calls:
      - tool: Calculator_Multiply
        args: {a: "${sum.result}", b: 10}
  - text: The sum is ${sum.result} and ten times it is ${last.result}.
`)
	write("ci/code.yaml", `turns:
  - calls:
      - tool: run_program
        id: prog
        args:
          source: |
            r = Calculator_Add(a=args["a"], b=args["b"])
            result = {"total": r.value["result"]}
          args: {a: 40, b: 2}
  - text: "The program says ${prog.total}."
`)
	write("bad.yaml", "turns:\n  - text: fine\n  - calls:\n      - tool: Calculator.Add\n        argz: {a: 1}\n")

	dev := devConfig{ScriptDir: dir, ModelEndpoints: nil}
	models, err := devModels(dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	agents := &agentMount{}
	f, o := startWith(ctx, t, stack, models, false, metrics.New(), agents.mount())
	agents.serve(o, f.Gateway)

	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand()
		root.SetArgs(append(args, "--gateway", f.Gateway.Addr()))
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	out, err := run("agent", "run", "--model", "scripted:turns.yaml", "--tools", "Calculator.*", "add 2 and 3, then times ten", "--watch")
	if err != nil {
		t.Fatalf("agent run: %v\n%s", err, out)
	}
	for _, want := range []string{"→ Calculator.Add", "→ Calculator.Multiply", `{"result":50}`, "✓ The sum is 5 and ten times it is 50. (3 turns, 2 tool calls"} {
		if !strings.Contains(out, want) {
			t.Errorf("scripted run output lacks %q:\n%s", want, out)
		}
	}

	out, err = run("agent", "run", "--model", "scripted:ci/code.yaml", "--code-mode", "--tools", "Calculator.*", "add 40 and 2 in a program", "--watch")
	if err != nil {
		t.Fatalf("code-mode run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "✓ The program says 42.") {
		t.Errorf("code-mode run output lacks the program's total:\n%s", out)
	}

	out, err = run("agent", "run", "--model", "scripted:bad.yaml", "--tools", "Calculator.*", "go", "--watch")
	if err == nil || !strings.Contains(out+err.Error(), "bad.yaml:5: turn 2, call 1: unknown key (want tool, id or args)") {
		t.Errorf("a bad script file: %v\n%s", err, out)
	}
	out, err = run("agent", "run", "--model", "scripted:../escape.yaml", "--tools", "Calculator.*", "go", "--watch")
	if err == nil {
		t.Errorf("a script outside the folder ran:\n%s", out)
	}
}
