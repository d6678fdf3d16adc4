package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tsClient is a Node ESM script on the official TypeScript SDK client
// (@modelcontextprotocol/client 2.x, pinned in nodePackages). argv: URL and
// "legacy" (the 2025 initialize handshake) or a revision to pin
// ("2026-07-28", negotiated through server/discover). It lists every tool,
// makes four calls and prints what it saw as JSON.
const tsClient = `
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const [url, era] = process.argv.slice(2);
const opts = era === "legacy" ? {} : { versionNegotiation: { mode: { pin: era } } };
const client = new Client({ name: "toolfleet-ts-client-test", version: "1.0.0" }, opts);
await client.connect(new StreamableHTTPClientTransport(new URL(url)));

const out = { version: client.getNegotiatedProtocolVersion(), era: client.getProtocolEra(), tools: [], pages: 0 };
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : {});
  out.pages++;
  out.tools.push(...page.tools.map(t => t.name));
  cursor = page.nextCursor;
} while (cursor && out.pages < 20);

const call = async (name, args) => {
  try {
    const r = await client.callTool({ name, arguments: args });
    return { isError: !!r.isError, content: r.content, structuredContent: r.structuredContent ?? null };
  } catch (e) {
    return { rpcError: { code: e.code ?? null, message: String(e.message) } };
  }
};
out.add = await call("Calculator_Add", { a: 2, b: 3 });
out.divide = await call("Calculator_Divide", { a: 1, b: 0 });
out.image = await call("test_image_content", {});
out.unknown = await call("Calculator_Nope", {});
await client.close();
console.log(JSON.stringify(out));
`

type tsContent struct {
	Type, Text, Data, MimeType string
}

type tsCall struct {
	IsError           bool
	Content           []tsContent
	StructuredContent map[string]any
	RPCError          *struct {
		Code    int
		Message string
	} `json:"rpcError"`
}

type tsResult struct {
	Version, Era                string
	Tools                       []string
	Pages                       int
	Add, Divide, Image, Unknown tsCall
}

// TestTypeScriptSDKClient drives the fleet of `toolfleet dev --conformance`
// with the official TypeScript SDK client at both revisions: 2025-11-25
// (initialize) and 2026-07-28 (server/discover, pinned). It lists the tools
// (the Conformance toolkit's under their explicit MCP names) and calls a tool
// with a value, one that fails, one with an image result and an unknown one.
func TestTypeScriptSDKClient(t *testing.T) {
	tools := nodeTools(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	addr := devFleet(ctx, t, false)
	// ESM resolves imports from the script's folder: put it beside node_modules.
	script := filepath.Join(tools.dir, fmt.Sprintf("toolfleet-ts-client-%d.mjs", os.Getpid()))
	if err := os.WriteFile(script, []byte(tsClient), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(script) })

	for _, tc := range []struct{ era, version string }{{"legacy", "2025-11-25"}, {"2026-07-28", "2026-07-28"}} {
		t.Run(tc.version, func(t *testing.T) {
			out := run(ctx, t, tools.dir, nil, tools.node, script, "http://"+addr+"/mcp", tc.era)
			var res tsResult
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("client output is not JSON (%v):\n%s", err, out)
			}
			if res.Version != tc.version {
				t.Errorf("negotiated %q (%s), want %s", res.Version, res.Era, tc.version)
			}
			for _, want := range []string{"Calculator_Add", "Clock_Now", "test_simple_text", "test_image_content", "test_tool_with_progress"} {
				if !slices.Contains(res.Tools, want) {
					t.Errorf("tools/list (%d pages) lacks %s: %v", res.Pages, want, res.Tools)
				}
			}
			if slices.Contains(res.Tools, "Conformance_SimpleText") {
				t.Errorf("tools/list shows Conformance_SimpleText besides its MCP name test_simple_text")
			}
			if a := res.Add; a.IsError || a.RPCError != nil || a.StructuredContent["result"] != float64(5) || len(a.Content) != 1 || a.Content[0].Text != `{"result":5}` {
				t.Errorf("Calculator_Add: %+v", a)
			}
			if d := res.Divide; !d.IsError || len(d.Content) == 0 || !strings.HasPrefix(d.Content[0].Text, "cannot divide by zero") {
				t.Errorf("Calculator_Divide by zero: %+v, want isError with the tool's message", d)
			}
			checkPNG(t, res.Image)
			if u := res.Unknown; u.RPCError == nil || u.RPCError.Code != -32602 {
				t.Errorf("unknown tool: %+v, want a JSON-RPC error -32602", u)
			}
		})
	}
}

// checkPNG checks a test_image_content result: one image block, a PNG.
func checkPNG(t *testing.T, c tsCall) {
	t.Helper()
	if c.IsError || c.RPCError != nil || len(c.Content) != 1 || c.Content[0].Type != "image" || c.Content[0].MimeType != "image/png" || c.StructuredContent != nil {
		t.Errorf("test_image_content: %+v, want one image/png block and no structuredContent", c)
		return
	}
	png, err := base64.StdEncoding.DecodeString(c.Content[0].Data)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("test_image_content data is not a base64 PNG (%v): %q", err, c.Content[0].Data)
	}
}

// TestMCPInspectorCLI drives the fleet of `toolfleet dev --conformance` with
// the MCP Inspector's CLI mode (@modelcontextprotocol/inspector --cli,
// pinned) at both protocol eras: tools/list, and tools/call of a tool with
// arguments and of one with an image result.
func TestMCPInspectorCLI(t *testing.T) {
	tools := nodeTools(t)
	t.Parallel()
	// One Inspector run takes seconds (a large bundle to load); a loaded CI
	// machine makes it tens of seconds.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	addr := devFleet(ctx, t, false)
	inspector := filepath.Join(tools.dir, "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")
	// The Inspector keeps a server catalog; keep it out of the home folder.
	env := []string{"MCP_CATALOG_PATH=" + filepath.Join(t.TempDir(), "mcp.json")}
	for _, era := range []string{"legacy", "modern"} {
		t.Run(era, func(t *testing.T) {
			cli := func(args ...string) map[string]any {
				t.Helper()
				args = append([]string{inspector, "--cli", "http://" + addr + "/mcp", "--transport", "http",
					"--protocol-era", era, "--format", "json", "--quiet"}, args...)
				out := run(ctx, t, t.TempDir(), env, tools.node, args...)
				// --format json: {"result": <the MCP result>} or {"error": ...}.
				var v struct {
					Result map[string]any `json:"result"`
				}
				if err := json.Unmarshal(out, &v); err != nil || v.Result == nil {
					t.Fatalf("inspector %v: output is not a JSON result (%v):\n%s", args[1:], err, out)
				}
				return v.Result
			}
			list := cli("--method", "tools/list")
			var names []string
			listed, _ := list["tools"].([]any)
			for _, tl := range listed {
				if m, ok := tl.(map[string]any); ok {
					names = append(names, m["name"].(string))
				}
			}
			if !slices.Contains(names, "Calculator_Add") || !slices.Contains(names, "test_simple_text") {
				t.Errorf("tools/list: %v", names)
			}
			add := cli("--method", "tools/call", "--tool-name", "Calculator_Add", "--tool-args-json", `{"a": 2, "b": 3}`)
			if sc, _ := add["structuredContent"].(map[string]any); add["isError"] == true || sc["result"] != float64(5) {
				t.Errorf("tools/call Calculator_Add: %v", add)
			}
			text := cli("--method", "tools/call", "--tool-name", "test_simple_text")
			if c, _ := text["content"].([]any); len(c) != 1 || c[0].(map[string]any)["text"] != "This is a simple text response for testing." {
				t.Errorf("tools/call test_simple_text: %v", text)
			}
		})
	}
}
