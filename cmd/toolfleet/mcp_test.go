package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/e2e"
)

// TestMCPBridge runs `toolfleet mcp` in process on pipes and drives it with the
// official Go SDK client, as an MCP client launching the command would.
func TestMCPBridge(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{Auth: true})
	clientIn, bridgeOut := io.Pipe()
	bridgeIn, clientOut := io.Pipe()

	root := newRootCommand()
	var stderr strings.Builder
	root.SetIn(bridgeIn)
	root.SetOut(bridgeOut)
	root.SetErr(&stderr)
	root.SetArgs([]string{"mcp", "--gateway", fleet.Addr, "--token", fleet.Token(t, "tools:call")})
	done := make(chan error, 1)
	go func() {
		done <- root.ExecuteContext(context.Background())
		_ = bridgeOut.Close()
	}()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bridge-test", Version: "1"}, nil).
		Connect(ctx, &sdk.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tl := range list.Tools {
		found = found || (tl.Name == "Calculator_Add" && tl.Title == "Calculator.Add@1.0.0")
	}
	if !found {
		t.Fatalf("Calculator_Add (Calculator.Add@1.0.0) not listed: %d tools", len(list.Tools))
	}
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "Calculator_Add", Arguments: map[string]any{"a": 40, "b": 2}})
	if err != nil || r.IsError || r.StructuredContent.(map[string]any)["result"] != float64(42) {
		t.Fatalf("call: %+v, %v", r, err)
	}
	r, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "Calculator_Evaluate", Arguments: map[string]any{"expression": ""}})
	if err != nil || !r.IsError || !strings.Contains(r.Content[0].(*sdk.TextContent).Text, "- expression: ") {
		t.Fatalf("validation: %+v, %v", r, err)
	}
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "Calculator_Nope", Arguments: map[string]any{}})
	var je *jsonrpc.Error
	if !errors.As(err, &je) {
		t.Fatalf("unknown tool: %v, want a JSON-RPC error", err)
	}

	_ = cs.Close()
	_ = clientOut.Close() // the client hangs up: the bridge exits cleanly
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("toolfleet mcp: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("toolfleet mcp did not exit when stdin closed")
	}
	if strings.Contains(stderr.String(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", stderr.String())
	}
}
