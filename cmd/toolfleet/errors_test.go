package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/e2e"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
)

// TestNoGateway: every verb that talks to a gateway, pointed at an address
// where nothing listens, fails with one line saying so and how to start one
// (not gRPC's or Connect's dial error), over gRPC and Connect alike.
func TestNoGateway(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	want := "no gateway at " + addr + ": start one with `toolfleet dev` (or set --gateway)"
	for _, args := range [][]string{
		{"tools", "list"},
		{"tools", "list", "--connect"},
		{"tools", "describe", "Calculator.Add"},
		{"tools", "call", "Calculator.Add", `{"a": 1, "b": 2}`},
		{"tools", "call", "Calculator.Add", `{"a": 1, "b": 2}`, "--connect"},
		{"agent", "list"},
		{"agent", "get", "r1"},
		{"agent", "run", "hi"},
		{"agent", "approve", "r1/1/0"},
		{"program", "list"},
		{"program", "get", "p1"},
		{"program", "stubs", "Calculator.*"},
		{"approvals", "list"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			root := newRootCommand()
			var out, errOut bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&errOut)
			args := append(args, "--gateway", addr)
			if args[0] != "agent" { // agent's calls have no --timeout
				args = append(args, "--timeout", "5s")
			}
			root.SetArgs(args)
			err := root.ExecuteContext(t.Context())
			if err == nil {
				t.Fatalf("succeeded:\n%s", out.String())
			}
			// Printed by the command (tools: exit 2) or by main (the error).
			said := errOut.String()
			if exitCode(err) == exitOther {
				said = err.Error()
			}
			if strings.TrimSpace(strings.TrimPrefix(said, "toolfleet: ")) != want {
				t.Fatalf("said %q (exit %d), want %q", said, exitCode(err), want)
			}
		})
	}
}

// TestDevSaysWhyItCannotStart: a port dev needs that another program holds
// (named: which program, when the system says),
// and another dev running in this folder, stop `toolfleet dev` at once with
// what to pass or do (not after NATS's 10 s wait for its port).
func TestDevSaysWhyItCannotStart(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	others := []string{"--nats-port", "0", "--temporal-port", "0", "--temporal-ui-port", "0", "--data-dir", t.TempDir()}

	out, err := runInProcess(t.Context(), append([]string{"dev", "--gateway-port", strconv.Itoa(port), "--dev-file", ""}, others...)...)
	// The holder is this test process; Linux says so.
	holder := "another program"
	if runtime.GOOS == "linux" {
		comm, err := os.ReadFile("/proc/self/comm")
		if err != nil {
			t.Fatal(err)
		}
		holder = fmt.Sprintf("%s (pid %d)", strings.TrimSpace(string(comm)), os.Getpid())
	}
	want := fmt.Sprintf("port %d (the gateway) is taken by %s: pass --gateway-port N, or --gateway-port 0 for any free port", port, holder)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("dev on a taken port: %v, want %q\n%s", err, want, out)
	}

	// Another dev: its process lives (a sleeping child here) and its
	// gateway answers (the listener).
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	devFile := filepath.Join(t.TempDir(), "dev.json")
	if _, err := writeDevFile(devFile, devAddresses{PID: other.Process.Pid, Gateway: ln.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	out, err = runInProcess(t.Context(), append([]string{"dev", "--gateway-port", "0", "--dev-file", devFile}, others...)...)
	want = fmt.Sprintf("another toolfleet dev is running in this folder (pid %d, gateway %s)", other.Process.Pid, ln.Addr())
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("a second dev: %v, want %q\n%s", err, want, out)
	}
}

// TestMalformedJSONInCallerTerms: input that is not valid JSON is refused
// with the line, the column and what was expected there — on the CLI, over
// Connect and over OXP HTTP alike — never with protobuf's internals.
func TestMalformedJSONInCallerTerms(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	// want is the refusal of body, whose stray comma is followed by '}'.
	wantFor := func(body string) string {
		return fmt.Sprintf("line 1, column %d: unexpected '}': a key in double quotes was expected", strings.Index(body, ",}")+2)
	}
	check := func(surface, body, said string) {
		t.Helper()
		want := wantFor(body)
		if !strings.Contains(said, want) || strings.Contains(said, "proto:") || strings.Contains(said, "syntax error") {
			t.Errorf("%s said %q, want %q and no decoder internals", surface, said, want)
		}
	}

	root := newRootCommand()
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"tools", "call", "Calculator.Add", `{"a": 1,}`, "--gateway", fleet.Addr})
	err := root.ExecuteContext(t.Context())
	if err == nil {
		t.Fatal("the CLI sent malformed input")
	}
	check("the CLI", `{"a": 1,}`, err.Error())

	post := func(path, contentType, body string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+fleet.Addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 4 {
			t.Errorf("%s: HTTP %d, want a 4xx: %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	// The body's own line and column: the input is inside it.
	connectBody := `{"toolId": "Calculator.Add", "input": {"a": 1,}}`
	check("Connect", connectBody, post("/toolfleet.v1.ToolGatewayService/CallTool", "application/json", connectBody))
	oxpBody := `{"request": {"tool_id": "Calculator.Add", "input": {"a": 1,}}}`
	check("OXP", oxpBody, post("/tools/call", "application/json", oxpBody))
	// MCP: a JSON-RPC parse error (-32700) in the same words.
	mcpBody := `{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "Calculator_Add", "arguments": {"a": 1,}}}`
	var rpc struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if said := post("/mcp", "application/json", mcpBody); json.Unmarshal([]byte(said), &rpc) != nil || rpc.Error.Code != -32700 {
		t.Errorf("MCP answered %s, want a JSON-RPC parse error (-32700)", said)
	}
	check("MCP", mcpBody, rpc.Error.Message)
}

// TestOnePrefixPerError: a fleet whose gateway cannot listen says so with one
// "gateway: " prefix, not one per layer that passed the error on.
func TestOnePrefixPerError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stack := devstacktest.Start(t)
	_, err = startFleet(t.Context(), fleetConfig{Host: "127.0.0.1", GatewayPort: ln.Addr().(*net.TCPAddr).Port, NATSURL: stack.NATS.URL(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		t.Fatal("the gateway started on a taken port")
	}
	if n := strings.Count(err.Error(), "gateway: "); n != 1 || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %q: %d gateway prefixes, want 1 and the cause", err, n)
	}
}

// TestRunSpecErrorsInYAMLTerms: a mistake in `agent run -f spec.yaml` is
// reported at its line and column in the YAML, with the field, before any
// gateway is asked.
func TestRunSpecErrorsInYAMLTerms(t *testing.T) {
	t.Parallel()
	spec := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(spec, []byte("model: scripted:demo\ntools: ['Calculator.*']\nbudget:\n  max_turns: 3\n  max_turnz: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := cliError(t, "agent", "run", "-f", spec, "hello", "--gateway", "127.0.0.1:1")
	want := spec + `: line 5, column 3: unknown field "max_turnz"`
	if err == nil || err.Error() != want {
		t.Fatalf("agent run -f with a misspelled field: %v, want %q", err, want)
	}
}
