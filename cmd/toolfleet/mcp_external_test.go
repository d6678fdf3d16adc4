package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/e2e"
)

// externalClient is a Node ESM script on the official TypeScript SDK client
// (@modelcontextprotocol/sdk 1.x). It connects over streamable HTTP
// (argv: http URL) or launches a command over stdio (argv: stdio CMD ARGS...),
// with the bearer token from MCP_TEST_TOKEN (HTTP header, or TOOLFLEET_TOKEN in
// the launched command's environment), and prints what it saw as JSON.
const externalClient = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";

const [mode, target, ...rest] = process.argv.slice(2);
const token = process.env.MCP_TEST_TOKEN;
const transport = mode === "http"
  ? new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: { Authorization: "Bearer " + token } } })
  : new StdioClientTransport({ command: target, args: rest, env: { ...getDefaultEnvironment(), TOOLFLEET_TOKEN: token }, stderr: "inherit" });
const client = new Client({ name: "toolfleet-external-test", version: "1.0.0" });
await client.connect(transport);

const out = { server: client.getServerVersion(), tools: [], pages: 0 };
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : {});
  out.pages++;
  out.tools.push(...page.tools.map(t => ({ name: t.name, title: t.title, annotations: t.annotations, hasOutputSchema: !!t.outputSchema })));
  cursor = page.nextCursor;
} while (cursor);

const text = r => (r.content || []).filter(c => c.type === "text").map(c => c.text).join("");
const call = async (name, args) => {
  try {
    const r = await client.callTool({ name, arguments: args });
    return { isError: !!r.isError, text: text(r), structuredContent: r.structuredContent ?? null };
  } catch (e) {
    return { rpcError: { code: e.code ?? null, message: String(e.message) } };
  }
};
out.success = await call("Calculator_Add", { a: 2, b: 3 });
out.execution = await call("Calculator_Divide", { a: 1, b: 0 });
out.validation = await call("Calculator_Evaluate", { expression: "" });
out.unknown = await call("Calculator_Nope", {});
await client.close();
console.log(JSON.stringify(out));
`

type externalResult struct {
	Server struct{ Name string }
	Tools  []struct {
		Name, Title     string
		Annotations     map[string]any
		HasOutputSchema bool
	}
	Pages                                   int
	Success, Execution, Validation, Unknown struct {
		IsError           bool
		Text              string
		StructuredContent map[string]any
		RPCError          *struct {
			Code    int
			Message string
		} `json:"rpcError"`
	}
}

// TestExternalMCPClient drives /mcp and `toolfleet mcp` with the official
// TypeScript SDK client of the 1.x line (@modelcontextprotocol/sdk, pinned in
// nodePackages), with auth on.
func TestExternalMCPClient(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (npm install, go build): runs without -short")
	}
	tools := nodeTools(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	dir := t.TempDir()
	// ESM resolves imports from the script's folder: put it beside node_modules.
	script := filepath.Join(tools.dir, fmt.Sprintf("toolfleet-external-client-%d.mjs", os.Getpid()))
	if err := os.WriteFile(script, []byte(externalClient), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(script) })
	bin := filepath.Join(dir, "toolfleet")
	run(ctx, t, "", nil, "go", "build", "-o", bin, ".")

	fleet := e2e.Start(t, e2e.Options{Auth: true})
	// schematest:read: SchemaTest.Types requires it, and listings show only what the token may call.
	env := []string{"MCP_TEST_TOKEN=" + fleet.Token(t, "tools:call", "schematest:read")}
	tests := []struct {
		name string
		args []string
	}{
		{"streamable HTTP on the gateway", []string{script, "http", "http://" + fleet.Addr + "/mcp"}},
		{"stdio bridge", []string{script, "stdio", bin, "mcp", "--gateway", fleet.Addr}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res externalResult
			out := run(ctx, t, tools.dir, env, tools.node, tt.args...)
			t.Logf("client saw: %s", out)
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("client output is not JSON (%v):\n%s", err, out)
			}
			checkExternal(t, res)
		})
	}
}

func checkExternal(t *testing.T, res externalResult) {
	t.Helper()
	var add, types bool
	for _, tl := range res.Tools {
		switch tl.Name {
		case "Calculator_Add":
			add = tl.Title == "Calculator.Add@1.0.0" && tl.HasOutputSchema
		case "SchemaTest_Types":
			types = tl.Annotations["readOnlyHint"] == true
		}
	}
	if !add || !types || res.Pages < 1 || !strings.HasPrefix(res.Server.Name, "toolfleet") {
		t.Errorf("tools/list: %+v", res)
	}
	if s := res.Success; s.IsError || s.RPCError != nil || s.Text != `{"result":5}` || s.StructuredContent["result"] != float64(5) {
		t.Errorf("successful call: %+v", s)
	}
	if e := res.Execution; !e.IsError || !strings.HasPrefix(e.Text, "cannot divide by zero") {
		t.Errorf("execution error: %+v, want isError with the tool's message", e)
	}
	if v := res.Validation; !v.IsError || !strings.Contains(v.Text, "- expression: ") {
		t.Errorf("validation error: %+v, want isError with the field message", v)
	}
	if u := res.Unknown; u.RPCError == nil || u.RPCError.Code != -32602 {
		t.Errorf("unknown tool: %+v, want a JSON-RPC error -32602", u)
	}
}

// run runs a command in dir, failing the test with its output on error.
func run(ctx context.Context, t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}
