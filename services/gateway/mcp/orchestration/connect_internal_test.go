package orchestration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

// starter is a ConnectionService that numbers the connects it starts and
// records whose they were.
type starter struct{ callers []string }

func (s *starter) StartConnection(_ context.Context, req *connect.Request[toolfleetv1.StartConnectionRequest]) (*connect.Response[toolfleetv1.StartConnectionResponse], error) {
	s.callers = append(s.callers, req.Header().Get("Authorization"))
	return connect.NewResponse(&toolfleetv1.StartConnectionResponse{
		AuthorizationUrl: fmt.Sprintf("http://127.0.0.1:8080/connections/start?state=%d", len(s.callers))}), nil
}

// A connect link is made as the MCP caller, shown again to the same caller
// for the same provider and scopes while it is fresh, and never to another
// caller; without connections there is none.
func TestConnectLinks(t *testing.T) {
	t.Parallel()
	conns := &starter{}
	b := New(Services{Connections: conns})
	now := time.Now()
	b.links.now = func() time.Time { return now }
	alice := mcp.WithAuthorization(t.Context(), "Bearer alice")
	link := func(ctx context.Context, scopes ...string) string {
		t.Helper()
		url, err := b.ConnectLink(ctx, "acme", scopes)
		if err != nil {
			t.Fatal(err)
		}
		return url
	}
	first := link(alice, "profile")
	if again := link(alice, "profile"); again != first || len(conns.callers) != 1 || conns.callers[0] != "Bearer alice" {
		t.Fatalf("polled again: %s (first %s), connects started %q", again, first, conns.callers)
	}
	if other := link(mcp.WithAuthorization(t.Context(), "Bearer bob"), "profile"); other == first {
		t.Fatal("bob was shown alice's link")
	}
	if wider := link(alice, "profile", "repo"); wider == first {
		t.Fatal("a link for other scopes was reused")
	}
	now = now.Add(linkReuse)
	if later := link(alice, "profile"); later == first {
		t.Fatal("a link was shown past its reuse")
	}
	// Bounded: a flood of callers keeps at most maxLinks.
	for i := range maxLinks + 10 {
		link(mcp.WithAuthorization(t.Context(), fmt.Sprintf("Bearer u%d", i)), "profile")
	}
	if n := len(b.links.links); n > maxLinks {
		t.Fatalf("%d links kept, want at most %d", n, maxLinks)
	}
	if _, err := New(Services{}).ConnectLink(alice, "acme", nil); err == nil {
		t.Fatal("a link without connections")
	}
}
