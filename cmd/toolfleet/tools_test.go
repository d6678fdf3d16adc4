package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/e2e"
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/conformance/conformance"
)

// runCLI runs toolfleet with args and stdin; it returns stdout and the exit code.
func runCLI(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	out, _, code := runCLIStderr(t, stdin, args...)
	return out, code
}

// runCLIStderr is runCLI that returns stderr too.
func runCLIStderr(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), errOut.String(), exitCode(err)
}

func TestToolsCommands(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	input := filepath.Join(t.TempDir(), "input.json")
	if err := os.WriteFile(input, []byte(`{"a": 6, "b": 7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := []string{"--gateway", fleet.Addr}
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantCode int
		check    func(t *testing.T, out string)
	}{
		{"list as JSON when piped", []string{"tools", "list"}, "", exitOK, func(t *testing.T, out string) {
			var defs []struct{ ID, ModelName string }
			mustJSON(t, out, &defs)
			if !containsID(defs, "Calculator.Add@1.0.0") {
				t.Fatalf("no Calculator.Add@1.0.0 in %s", out)
			}
		}},
		{"list as text", []string{"tools", "list", "-o", "text", "--toolkit", "Calculator"}, "", exitOK, func(t *testing.T, out string) {
			if !strings.HasPrefix(out, "ID") || !strings.Contains(out, "Calculator.Add@1.0.0") || strings.Contains(out, "SchemaTest") {
				t.Fatalf("text list:\n%s", out)
			}
		}},
		{"list for OpenAI", []string{"tools", "list", "--format", "openai", "--filter", "Calculator.Add"}, "", exitOK, func(t *testing.T, out string) {
			var tools []struct{ Function struct{ Name string } }
			mustJSON(t, out, &tools)
			if len(tools) != 1 || tools[0].Function.Name != "Calculator_Add" {
				t.Fatalf("openai tools: %s", out)
			}
		}},
		{"list for Gemini", []string{"tools", "list", "--format", "gemini"}, "", exitOK, func(t *testing.T, out string) {
			if !strings.Contains(out, "Calculator_Add") {
				t.Fatalf("gemini tools: %s", out)
			}
		}},
		{"list for MCP", []string{"tools", "list", "--format", "mcp"}, "", exitOK, func(t *testing.T, out string) {
			var list struct{ Tools []struct{ Name string } }
			mustJSON(t, out, &list)
			if len(list.Tools) < 9 {
				t.Fatalf("mcp tools/list: %s", out)
			}
		}},
		{"list in an unknown format", []string{"tools", "list", "--format", "smoke-signals"}, "", exitOther, nil},
		{"describe", []string{"tools", "describe", "Calculator_Divide"}, "", exitOK, func(t *testing.T, out string) {
			var d struct{ ID string }
			mustJSON(t, out, &d)
			if d.ID != "Calculator.Divide@1.0.0" {
				t.Fatalf("describe: %s", out)
			}
		}},
		{"describe as text", []string{"tools", "describe", "SchemaTest.Types", "-o", "text"}, "", exitOK, func(t *testing.T, out string) {
			for _, want := range []string{"SchemaTest.Types@0.3.1", "hints: read_only=true", "scopes: schematest:read", "input schema:"} {
				if !strings.Contains(out, want) {
					t.Fatalf("describe text lacks %q:\n%s", want, out)
				}
			}
		}},
		{"describe an unknown tool", []string{"tools", "describe", "Nope.Nope"}, "", exitServer, nil},
		{"search", []string{"tools", "search", "divide", "two", "numbers", "--limit", "1"}, "", exitOK, func(t *testing.T, out string) {
			if !strings.Contains(out, "Calculator.Divide@1.0.0") {
				t.Fatalf("search: %s", out)
			}
		}},
		{"call", []string{"tools", "call", "Calculator.Add", `{"a": 2, "b": 3}`}, "", exitOK, func(t *testing.T, out string) {
			var r struct {
				Success bool
				Value   struct{ Result float64 }
			}
			mustJSON(t, out, &r)
			if !r.Success || r.Value.Result != 5 {
				t.Fatalf("call: %s", out)
			}
		}},
		{"call as text", []string{"tools", "call", "Calculator.Add", `{"a": 2, "b": 3}`, "-o", "text"}, "", exitOK, func(t *testing.T, out string) {
			if strings.TrimSpace(out) != "{\n  \"result\": 5\n}" {
				t.Fatalf("call text: %q", out)
			}
		}},
		{"call that needs an approval", []string{"tools", "call", "SchemaTest.Types", `{"s": "hi"}`}, "", exitServer, nil},
		{"call with an approval", []string{"tools", "call", "SchemaTest.Types", `{"s": "hi"}`, "--approver", "ana"}, "", exitOK, func(t *testing.T, out string) {
			if !strings.Contains(out, `"success": true`) {
				t.Fatalf("call: %s", out)
			}
		}},
		{"call with stdin", []string{"tools", "call", "Calculator_Multiply", "-"}, `{"a": 4, "b": 5}`, exitOK, func(t *testing.T, out string) {
			if !strings.Contains(out, `"result": 20`) {
				t.Fatalf("call: %s", out)
			}
		}},
		{"call with a file", []string{"tools", "call", "Calculator.Multiply", "@" + input}, "", exitOK, func(t *testing.T, out string) {
			if !strings.Contains(out, `"result": 42`) {
				t.Fatalf("call: %s", out)
			}
		}},
		{"validation error", []string{"tools", "call", "Calculator.Evaluate", `{"expression": ""}`}, "", exitValidation, func(t *testing.T, out string) {
			var r struct {
				Error struct {
					Kind            string            `json:"kind"`
					ParameterErrors map[string]string `json:"parameterErrors"`
				}
			}
			mustJSON(t, out, &r)
			// One JSON style: protojson's lowerCamelCase, as the call's result.
			if r.Error.Kind != "validation" || r.Error.ParameterErrors["expression"] == "" || !strings.Contains(out, `"callId"`) ||
				strings.Contains(out, `"call_id"`) || strings.Contains(out, `"parameter_errors"`) {
				t.Fatalf("validation: %s", out)
			}
		}},
		{"validation error as text", []string{"tools", "call", "Calculator.Evaluate", `{"expression": ""}`, "-o", "text"}, "", exitValidation, func(t *testing.T, out string) {
			if !strings.Contains(out, "invalid input") || !strings.Contains(out, "  expression: ") {
				t.Fatalf("validation text: %s", out)
			}
		}},
		{"execution error", []string{"tools", "call", "Calculator.Divide", `{"a": 1, "b": 0}`}, "", exitExecution, func(t *testing.T, out string) {
			var r struct {
				Success bool
				Error   struct{ Message string }
			}
			mustJSON(t, out, &r)
			if r.Success || r.Error.Message != "cannot divide by zero" {
				t.Fatalf("execution: %s", out)
			}
		}},
		{"server error", []string{"tools", "call", "Calculator.Nope"}, "", exitServer, func(t *testing.T, out string) {
			var r struct{ Error struct{ Kind, Code string } }
			mustJSON(t, out, &r)
			if r.Error.Kind != "server" || r.Error.Code != "NotFound" {
				t.Fatalf("server: %s", out)
			}
		}},
		{"input that is not JSON", []string{"tools", "call", "Calculator.Add", `{a:`}, "", exitOther, nil},
		{"too many arguments", []string{"tools", "call", "Calculator.Add", "{}", "{}"}, "", exitOther, nil},
		{"over Connect", []string{"tools", "call", "Calculator.Subtract", `{"a": 2, "b": 3}`, "--connect"}, "", exitOK, func(t *testing.T, out string) {
			if !strings.Contains(out, `"result": -1`) {
				t.Fatalf("call: %s", out)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, code := runCLI(t, tt.stdin, append(tt.args, gw...)...)
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d; stdout:\n%s", code, tt.wantCode, out)
			}
			if tt.check != nil {
				tt.check(t, out)
			}
		})
	}
}

// TestToolsStderr checks what a person sees on stderr: the reason of a failure
// that printed nothing on stdout, and nothing more for one that did.
func TestToolsStderr(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"describe an unknown tool", []string{"tools", "describe", "Nope.Nope"}, exitServer, "unknown tool"},
		{"call an unknown tool", []string{"tools", "call", "Nope.Nope"}, exitServer, ""},
		{"execution error", []string{"tools", "call", "Calculator.Divide", `{"a": 1, "b": 0}`}, exitExecution, ""},
		{"bad input", []string{"tools", "call", "Calculator.Add", "[]"}, exitOther, "JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := newRootCommand()
			var out, errOut bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&errOut)
			root.SetArgs(append(tt.args, "--gateway", fleet.Addr))
			err := root.ExecuteContext(t.Context())
			if code := exitCode(err); code != tt.wantCode {
				t.Fatalf("exit %d, want %d", code, tt.wantCode)
			}
			// main prints errors that are not errReported.
			stderr := errOut.String()
			if err != nil && !errors.Is(err, errReported) {
				stderr += "toolfleet: " + err.Error()
			}
			if tt.wantStderr == "" && (strings.Contains(stderr, "toolfleet:") || strings.Contains(stderr, "Error:")) {
				t.Fatalf("stderr %q, want nothing: stdout already says it", stderr)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Fatalf("stderr %q, want %q", stderr, tt.wantStderr)
			}
		})
	}
}

func TestToolsCallAuth(t *testing.T) {
	fleet := e2e.Start(t, e2e.Options{Auth: true})
	args := []string{"tools", "call", "Calculator.Add", `{"a": 1, "b": 2}`, "--gateway", fleet.Addr}
	if _, code := runCLI(t, "", args...); code != exitServer {
		t.Fatalf("without a token: exit %d, want %d", code, exitServer)
	}
	if _, code := runCLI(t, "", append(args, "--token", fleet.Token(t, "tools:call"))...); code != exitOK {
		t.Fatalf("with --token: exit %d, want 0", code)
	}
	t.Setenv("TOOLFLEET_TOKEN", fleet.Token(t, "tools:call"))
	if _, code := runCLI(t, "", args...); code != exitOK {
		t.Fatalf("with TOOLFLEET_TOKEN: exit %d, want 0", code)
	}
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("not JSON (%v):\n%s", err, s)
	}
}

func containsID(defs []struct{ ID, ModelName string }, id string) bool {
	for _, d := range defs {
		if d.ID == id {
			return true
		}
	}
	return false
}

// TestToolsFetchResult: call --allow-result-handle prints a handle for a result
// over the tool's limit, and fetch-result writes the result to stdout.
func TestToolsFetchResult(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	big := strings.Repeat("handles ", 2000) // over SchemaTest.Types' 4096 bytes
	input, err := json.Marshal(map[string]any{"s": big})
	if err != nil {
		t.Fatal(err)
	}
	gw := []string{"--gateway", fleet.Addr}
	out, code := runCLI(t, "", append([]string{"tools", "call", "SchemaTest.Types", string(input), "--approver", "ana", "--allow-result-handle", "-o", "json"}, gw...)...)
	var resp struct {
		Success      bool
		ResultHandle struct{ ID string }
	}
	mustJSON(t, out, &resp)
	if code != exitOK || !resp.Success || len(resp.ResultHandle.ID) != 32 {
		t.Fatalf("call: exit %d, %s", code, out)
	}
	out, code = runCLI(t, "", append([]string{"tools", "fetch-result", resp.ResultHandle.ID}, gw...)...)
	var result struct{ Echo struct{ S string } }
	mustJSON(t, out, &result)
	if code != exitOK || result.Echo.S != big {
		t.Fatalf("fetch-result: exit %d, %d bytes", code, len(out))
	}
	text, code := runCLI(t, "", append([]string{"tools", "call", "SchemaTest.Types", string(input), "--approver", "ana", "--allow-result-handle", "-o", "text"}, gw...)...)
	if code != exitOK || !strings.Contains(text, "toolfleet tools fetch-result ") {
		t.Fatalf("call as text: exit %d, %s", code, text)
	}
	_, stderr, code := runCLIStderr(t, "", append([]string{"tools", "fetch-result", strings.Repeat("0", 32)}, gw...)...)
	if code != exitServer || !strings.Contains(stderr, "no result") {
		t.Fatalf("unknown id: exit %d, stderr %q", code, stderr)
	}
}

// TestToolsCallPrintsToolLogs: the lines a tool logs for its caller go to
// stderr as "level: message", the result alone to stdout; with -o json they
// are in the response.
func TestToolsCallPrintsToolLogs(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true})
	fleet.AddWorker(t, func(w *tool.Worker) { conformancev1.RegisterConformanceServiceServer(w, conformance.New()) })
	fleet.WaitTool(t, "Conformance.WithLogging")
	out, stderr, code := runCLIStderr(t, "", "tools", "call", "Conformance.WithLogging", "{}", "-o", "text", "--gateway", fleet.Addr)
	want := "info: Tool execution started\ninfo: Tool processing data\ninfo: Tool execution completed\n"
	if code != exitOK || stderr != want || strings.Contains(out, "Tool execution started") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the three lines on stderr only", code, out, stderr)
	}
	out, _, code = runCLIStderr(t, "", "tools", "call", "Conformance.WithLogging", "{}", "-o", "json", "--gateway", fleet.Addr)
	var resp struct {
		Logs []struct{ Level, Message string } `json:"logs"`
	}
	mustJSON(t, out, &resp)
	if code != exitOK || len(resp.Logs) != 3 || resp.Logs[2].Message != "Tool execution completed" || resp.Logs[2].Level != "TOOL_LOG_LEVEL_INFO" {
		t.Fatalf("exit %d, JSON %s", code, out)
	}
}
