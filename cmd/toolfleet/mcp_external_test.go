package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/e2e"
)

// externalClient is a Node ESM script on the official TypeScript SDK client
// (@modelcontextprotocol/sdk). It connects over streamable HTTP
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
// TypeScript SDK client, installed with npm into a temporary folder.
func TestExternalMCPClient(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (npm install, go build): runs without -short")
	}
	npm, errNPM := exec.LookPath("npm")
	node, errNode := exec.LookPath("node")
	if errNPM != nil || errNode != nil {
		const why = "npm and node are not on PATH: the external MCP client test (official TypeScript SDK) needs them (.ci/run installs them)"
		if os.Getenv("CI") == "true" {
			t.Fatal(why) // in CI a missing client is a failure: this test must never silently not run
		}
		t.Skip(why)
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name": "toolfleet-mcp-external-test", "private": true, "type": "module"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), []byte(externalClient), 0o600); err != nil {
		t.Fatal(err)
	}
	run(ctx, t, dir, nil, npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "@modelcontextprotocol/sdk@1")
	bin := filepath.Join(dir, "toolfleet")
	run(ctx, t, "", nil, "go", "build", "-o", bin, ".")

	fleet := e2e.Start(t, e2e.Options{Auth: true})
	// schematest:read: SchemaTest.Types requires it, and listings show only what the token may call.
	env := []string{"MCP_TEST_TOKEN=" + fleet.Token(t, "tools:call", "schematest:read")}
	tests := []struct {
		name string
		args []string
	}{
		{"streamable HTTP on the gateway", []string{"client.mjs", "http", "http://" + fleet.Addr + "/mcp"}},
		{"stdio bridge", []string{"client.mjs", "stdio", bin, "mcp", "--gateway", fleet.Addr}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res externalResult
			out := run(ctx, t, dir, env, node, tt.args...)
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
