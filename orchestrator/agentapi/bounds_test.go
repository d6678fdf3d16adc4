package agentapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// TestConnectBounds serves the AgentService the way the gateway mounts it
// (through Late) and checks that an oversized message is refused before it
// is decoded and that a panic in a handler reaches only its caller, as
// Internal with nothing of the panic in it.
func TestConnectBounds(t *testing.T) {
	t.Parallel()
	var late agentapi.Late
	late.Set(&agentapi.Service{
		Auth: func(_ context.Context, h http.Header) (agentapi.Caller, error) {
			if h.Get("Authorization") == "Bearer boom" {
				panic("secret internals")
			}
			return agentapi.Caller{Subject: "ana", Scopes: []string{agentapi.ScopeRead}}, nil
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	srv := httptest.NewServer(&late)
	t.Cleanup(srv.Close)

	big := strings.Repeat("x", 5<<20)
	tests := []struct {
		name     string
		token    string
		req      *toolfleetv1.StartRunRequest
		want     connect.Code
		mustLack string
	}{
		{"oversized request", "ana", &toolfleetv1.StartRunRequest{Model: "scripted:demo", Messages: []*toolfleetv1.Message{llm.User(big)}}, connect.CodeResourceExhausted, ""},
		{"panicking handler", "boom", &toolfleetv1.StartRunRequest{Model: "scripted:demo", Messages: []*toolfleetv1.Message{llm.User("hi")}}, connect.CodeInternal, "secret internals"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := toolfleetv1connect.NewAgentServiceClient(srv.Client(), srv.URL, as(tt.token))
			_, err := c.StartRun(t.Context(), connect.NewRequest(tt.req))
			if connect.CodeOf(err) != tt.want {
				t.Fatalf("StartRun: %v, want %s", err, tt.want)
			}
			if tt.mustLack != "" && strings.Contains(err.Error(), tt.mustLack) {
				t.Fatalf("the error leaks the panic: %v", err)
			}
		})
	}
	// The server is still up for the next caller.
	c := toolfleetv1connect.NewAgentServiceClient(srv.Client(), srv.URL, as("ana"))
	if _, err := c.GetRun(t.Context(), connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: "../x"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("GetRun after a panic: %v, want InvalidArgument", err)
	}
}
