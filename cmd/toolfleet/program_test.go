package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/e2e"
)

func TestProgramCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		src     string
		wantOut []string
		wantErr string
	}{
		{"lists the tools", "r = call('Calculator.Divide', a=1, b=2)\nresult = Calculator_Add(a=1, b=2)\n",
			[]string{"compiles", "Calculator.Divide", "Calculator.Add"}, ""},
		{"no result", "x = len([1])\n", []string{"calls no tools", "no top-level `result`"}, ""},
		{"syntax error with position and line", "x = 1\ny = (1 +* 2)\n", nil, "p.star:2:9: got '*', want primary expression\n\ty = (1 +* 2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "p.star")
			if err := os.WriteFile(path, []byte(tt.src), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := newRootCommand()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs([]string{"program", "check", path})
			err := cmd.ExecuteContext(t.Context())
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Fatalf("output %q lacks %q", out.String(), w)
				}
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	s, err := parseArgs([]string{"n=3", "name=bob", "list=[1,2]", "eq=a=b"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.MarshalJSON()
	if want := `{"eq":"a=b","list":[1,2],"n":3,"name":"bob"}`; strings.ReplaceAll(string(b), " ", "") != want {
		t.Fatalf("args %s, want %s", b, want)
	}
	if _, err := parseArgs([]string{"novalue"}); err == nil {
		t.Fatal("an arg without = was accepted")
	}
}

// TestProgramCheckGateway: with a gateway, check looks every tool up there;
// a misspelled tool is an error naming the closest served tools, and a
// gateway that does not answer says what to do.
func TestProgramCheckGateway(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.star", "r = call('Calculator.Divide', a=1, b=2)\nresult = Calculator_Add(a=1, b=2)\n")
	typo := write("typo.star", "result = Calculator_Ad(a=1, b=2)\ncall('KV.Gte', key='k')\n")
	badArgs := write("args.star", "x = Calculator_Add(a=1, c=2)\ny = Calculator_Add(a='one', b=2)\n"+
		"z = call('Calculator.Divide', a=1)\nw = Calculator_Add(a=args['a'], b=[2])\nv = Calculator_Add(**args)\n")
	tests := []struct {
		name    string
		args    []string
		wantOut []string
		wantErr []string
	}{
		{"served tools resolve to their versions", []string{good, "--gateway", fleet.Addr},
			[]string{"good.star compiles.", "serves each", "  Calculator.Divide@", "  Calculator.Add@"}, nil},
		{"a misspelled tool names the closest", []string{typo, "--gateway", fleet.Addr}, nil,
			[]string{"typo.star calls 2 tool(s) the gateway at " + fleet.Addr + " does not serve", `"Calculator.Ad"`, "closest tools: Calculator.Add", `"KV.Gte"`}},
		{"arguments are checked against the tools' schemas", []string{badArgs, "--gateway", fleet.Addr}, nil,
			[]string{"args.star compiles, but 5 of its calls do not fit their tools' inputs",
				`args.star:1:5: Calculator.Add has no parameter "c" (its parameters: a, b)`,
				`args.star:1:5: Calculator.Add needs "b"`,
				"args.star:2:5: Calculator.Add: argument a: got string, want number",
				`args.star:3:5: Calculator.Divide needs "b"`,
				"args.star:4:5: Calculator.Add: argument b: got array, want number"}},
		{"a gateway that does not answer", []string{typo, "--gateway", "127.0.0.1:1", "--timeout", "5s"}, nil,
			[]string{"typo.star compiles, but its tools cannot be checked: no gateway at 127.0.0.1:1: start one with `toolfleet dev`", "--offline"}},
		{"--offline only compiles", []string{typo, "--gateway", "127.0.0.1:1", "--offline"}, []string{"typo.star compiles.", "not looked up", "Calculator.Ad"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := newRootCommand()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append([]string{"program", "check"}, tt.args...))
			err := cmd.ExecuteContext(t.Context())
			if tt.wantErr != nil {
				for _, w := range tt.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Fatalf("error %v, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Fatalf("output %q lacks %q", out.String(), w)
				}
			}
		})
	}
}

func TestProgramStubs(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"stubs", []string{"Calculator.Add"}, []string{"Calculator_Add(a: number, b: number)\n    Add two numbers"}},
		{"prompt section", []string{"--prompt", "Calculator.*"}, []string{"only result comes back", "Calculator_Multiply(", "Calculator_Divide("}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := newRootCommand()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append([]string{"program", "stubs", "--gateway", fleet.Addr}, tt.args...))
			if err := cmd.ExecuteContext(t.Context()); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Fatalf("output %q lacks %q", out.String(), w)
				}
			}
		})
	}
}
