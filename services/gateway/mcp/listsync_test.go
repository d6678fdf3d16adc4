package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

// manyTools is a backend serving n tools, and nothing until open is closed
// (the tools appear at once, as a worker's toolkit does in the registry).
type manyTools struct {
	n    int
	open chan struct{}
}

func (b *manyTools) ListTools(context.Context, *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	select {
	case <-b.open:
	default:
		return &toolfleetv1.ListToolsResponse{}, nil
	}
	in, _ := structpb.NewStruct(map[string]any{"type": "object"})
	var defs []*toolfleetv1.ToolDefinition
	for i := range b.n {
		name := fmt.Sprintf("T%04d", i)
		defs = append(defs, &toolfleetv1.ToolDefinition{Id: "Many." + name + "@1.0.0", Toolkit: "Many", Name: name,
			ModelName: "Many_" + name, Description: "tool " + name, InputSchema: in})
	}
	return &toolfleetv1.ListToolsResponse{Tools: defs}, nil
}

func (*manyTools) CallTool(context.Context, *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	return nil, fmt.Errorf("not called in this test")
}

// TestListNeverHalfSynced: tools/list requests arriving while the list is
// being re-read each see every tool — never part of a toolkit. (A request
// that found the list fresh once read the SDK's half-added set while another
// request's sync was still adding it.)
func TestListNeverHalfSynced(t *testing.T) {
	t.Parallel()
	const n = 400
	b := &manyTools{n: n, open: make(chan struct{})}
	s := mcp.New(b, mcp.Options{Logger: quiet(), PageSize: 2 * n, MaxStaleness: 20 * time.Millisecond})
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	if got := post(t, addr, "tools/list", "", nil, nil); got.Error != nil {
		t.Fatalf("tools/list before the tools appear: %v", got.Error)
	}
	close(b.open)
	time.Sleep(30 * time.Millisecond) // the empty list is stale now
	var wg sync.WaitGroup
	counts := make(chan int, 32)
	for i := range 32 { // spread over the sync that the first one starts
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * time.Millisecond / 2)
			r := post(t, addr, "tools/list", "", nil, nil)
			tools, _ := r.Result["tools"].([]any)
			counts <- len(tools)
		}()
	}
	wg.Wait()
	close(counts)
	for c := range counts {
		if c != n {
			t.Errorf("a tools/list answered %d tools, want all %d", c, n)
		}
	}
}
