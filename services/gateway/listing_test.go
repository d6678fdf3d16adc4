package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/metadata"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// TestListingByScope: a token limited to tools:call:calculator.* lists only
// calculator tools on every surface (gRPC ListTools and SearchTools, Connect,
// OXP GET /tools, MCP tools/list); tools:call lists every tool whose
// required scopes the token holds; a delegate lists everything, and a call
// on behalf of a subject lists what that subject may call.
func TestListingByScope(t *testing.T) {
	t.Parallel()
	_, calc, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{Workers: []string{calc, schemaTestWorker(t, "")}})
	waitTool(t, g, "Calculator.Add")
	waitTool(t, g, "SchemaTest.Types")
	every, err := g.ListTools(&toolfleetv1.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var all, calcOnly, withoutTypes []string // Types requires the scope schematest:read
	for _, d := range every.GetTools() {
		id := d.GetToolkit() + "." + d.GetName()
		all = append(all, id)
		if d.GetToolkit() == "Calculator" {
			calcOnly = append(calcOnly, id)
		}
		if len(d.GetRequirements().GetScopes()) == 0 {
			withoutTypes = append(withoutTypes, id)
		}
	}
	if len(calcOnly) == 0 || len(withoutTypes) == len(all) || !slices.Contains(all, "SchemaTest.Types") {
		t.Fatalf("the fixture changed: %v", all)
	}
	tests := []struct {
		name   string
		scopes []string
		header map[string]string
		want   []string
	}{
		{"calculator.*", []string{"tools:call:calculator.*"}, nil, calcOnly},
		{"tools:call without schematest:read", []string{"tools:call"}, nil, withoutTypes},
		{"tools:call and schematest:read", []string{"tools:call", "schematest:read"}, nil, all},
		{"no call scope", []string{"tools:approve"}, nil, nil},
		{"delegate", []string{"tools:delegate"}, nil, all},
		{"delegate for a calculator user", []string{"tools:delegate"},
			map[string]string{gateway.HeaderOnBehalfOf: "ana", gateway.HeaderOnBehalfScopes: "tools:call:calculator.*"}, calcOnly},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok := token(t, tt.scopes...)
			for surface, got := range listings(t, g.Addr(), tok, tt.header) {
				slices.Sort(got)
				if surface == "gRPC SearchTools" { // ranked hits: a subset, never empty when something is callable
					for _, id := range got {
						if !slices.Contains(tt.want, id) {
							t.Errorf("%s finds %s, which the token may not call", surface, id)
						}
					}
					if (len(got) == 0) != (len(tt.want) == 0) {
						t.Errorf("%s finds %v, want hits among %v", surface, got, tt.want)
					}
					continue
				}
				if !slices.Equal(got, tt.want) {
					t.Errorf("%s lists %v, want %v", surface, got, tt.want)
				}
			}
		})
	}
}

// listings returns the tool ids each surface lists for a token (plus headers).
func listings(t *testing.T, addr, tok string, extra map[string]string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	ids := func(defs []*toolfleetv1.ToolDefinition) []string {
		var s []string
		for _, d := range defs {
			s = append(s, strings.SplitN(d.GetId(), "@", 2)[0])
		}
		return s
	}
	md := metadata.Pairs("authorization", "Bearer "+tok)
	for k, v := range extra {
		md.Append(k, v)
	}
	ctx := metadata.NewOutgoingContext(t.Context(), md)
	gc := grpcClient(t, addr)
	lr, err := gc.ListTools(ctx, &toolfleetv1.ListToolsRequest{})
	if err != nil {
		t.Fatalf("gRPC ListTools: %v", err)
	}
	out["gRPC ListTools"] = ids(lr.GetTools())
	sr, err := gc.SearchTools(ctx, &toolfleetv1.SearchToolsRequest{Query: "add two numbers, sleep, echo every type", Limit: 50})
	if err != nil {
		t.Fatalf("gRPC SearchTools: %v", err)
	}
	var found []*toolfleetv1.ToolDefinition
	for _, r := range sr.GetResults() {
		found = append(found, r.GetTool())
	}
	out["gRPC SearchTools"] = ids(found)

	creq := connect.NewRequest(&toolfleetv1.ListToolsRequest{})
	creq.Header().Set("Authorization", "Bearer "+tok)
	for k, v := range extra {
		creq.Header().Set(k, v)
	}
	cr, err := connectClient(addr).ListTools(t.Context(), creq)
	if err != nil {
		t.Fatalf("Connect ListTools: %v", err)
	}
	out["Connect ListTools"] = ids(cr.Msg.GetTools())

	body := httpGet(t, "http://"+addr+"/tools", tok, extra)
	var oxp struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &oxp); err != nil {
		t.Fatalf("OXP GET /tools: %v: %s", err, body)
	}
	for _, x := range oxp.Items {
		out["OXP GET /tools"] = append(out["OXP GET /tools"], strings.SplitN(x.ID, "@", 2)[0])
	}

	out["MCP tools/list"] = mcpList(t, addr, tok, extra)
	return out
}

func httpGet(t *testing.T, url, tok string, extra map[string]string) []byte {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	return b
}

// mcpList lists MCP tools at 2026-07-28 (no session) and returns their
// toolfleet ids without version.
func mcpList(t *testing.T, addr, tok string, extra map[string]string) []string {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/list")
	req.Header.Set("Authorization", "Bearer "+tok)
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if i := bytes.Index(b, []byte("data: ")); i >= 0 { // an SSE answer
		b = b[i+len("data: "):]
		if j := bytes.IndexByte(b, '\n'); j >= 0 {
			b = b[:j]
		}
	}
	var msg struct {
		Result struct {
			Tools []struct {
				Meta map[string]any `json:"_meta"`
			} `json:"tools"`
			CacheScope string `json:"cacheScope"`
		} `json:"result"`
		Error any `json:"error"`
	}
	if err := json.Unmarshal(b, &msg); err != nil || msg.Error != nil {
		t.Fatalf("MCP tools/list: %v %v: %s", err, msg.Error, b)
	}
	if msg.Result.CacheScope != "private" {
		t.Errorf("MCP tools/list with a token: cacheScope %q, want private", msg.Result.CacheScope)
	}
	var ids []string
	for _, tl := range msg.Result.Tools {
		id, _ := tl.Meta["toolfleet/id"].(string)
		ids = append(ids, strings.SplitN(id, "@", 2)[0])
	}
	return ids
}

// TestProtectedResourceMetadata: RFC 9728 metadata names the issuer; a 401 of
// /mcp points at it; a gateway with auth off has none.
func TestProtectedResourceMetadata(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gateway.Config{Auth: gateway.AuthConfig{HS256Secret: []byte(testSecret), Issuer: "https://login.example.com/"}})
	base := "http://" + g.Addr()
	for path, resource := range map[string]string{
		"/.well-known/oauth-protected-resource":     base,
		"/.well-known/oauth-protected-resource/mcp": base + "/mcp",
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		err = json.NewDecoder(resp.Body).Decode(&doc)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %v", path, resp.Status, err)
		}
		if doc["resource"] != resource {
			t.Errorf("GET %s: resource %v, want %s", path, doc["resource"], resource)
		}
		if as, _ := doc["authorization_servers"].([]any); len(as) != 1 || as[0] != "https://login.example.com/" {
			t.Errorf("GET %s: authorization_servers %v, want the issuer", path, doc["authorization_servers"])
		}
	}
	if resp, err := http.Get(base + "/.well-known/oauth-protected-resource/other"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another path: %v %v, want 404", resp, err)
	}

	resp, err := http.Post(base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	want := `resource_metadata="` + base + `/.well-known/oauth-protected-resource/mcp"`
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), want) {
		t.Fatalf("/mcp without a token: %s, WWW-Authenticate %q, want 401 with %s", resp.Status, resp.Header.Get("WWW-Authenticate"), want)
	}

	off := startGateway(t, gateway.Config{Auth: gateway.AuthConfig{Disabled: true}})
	if resp, err := http.Get("http://" + off.Addr() + "/.well-known/oauth-protected-resource"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("auth off: %v %v, want 404", resp, err)
	}
}
