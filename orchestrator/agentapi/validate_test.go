package agentapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// validating serves an AgentService with no backend: what it answers, it
// answered from the request alone, before asking Temporal anything.
func validating(t *testing.T) toolfleetv1connect.AgentServiceClient {
	t.Helper()
	svc := &agentapi.Service{
		Auth: func(_ context.Context, h http.Header) (agentapi.Caller, error) {
			return agentapi.Caller{Subject: "ana", Scopes: []string{agentapi.ScopeStart, agentapi.ScopeRead}}, nil
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	_, h := svc.Handler()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return toolfleetv1connect.NewAgentServiceClient(srv.Client(), srv.URL)
}

// TestStartRunRefusesImpossibleBudgets is issue 32 §8: a negative budget
// field and a deadline past the maximum (10,000 years) are refused at start
// with INVALID_ARGUMENT naming the field.
func TestStartRunRefusesImpossibleBudgets(t *testing.T) {
	t.Parallel()
	c := validating(t)
	tenKYears := durationpb.New(0)
	tenKYears.Seconds = 10_000 * 365 * 24 * 3600
	tests := []struct {
		field  string
		budget *toolfleetv1.Budget
	}{
		{"budget.max_turns", &toolfleetv1.Budget{MaxTurns: -1}},
		{"budget.max_tool_calls", &toolfleetv1.Budget{MaxToolCalls: -5}},
		{"budget.max_input_tokens", &toolfleetv1.Budget{MaxInputTokens: -1}},
		{"budget.max_output_tokens", &toolfleetv1.Budget{MaxOutputTokens: -1}},
		{"budget.deadline", &toolfleetv1.Budget{Deadline: durationpb.New(-time.Minute)}},
		{"budget.deadline", &toolfleetv1.Budget{Deadline: tenKYears}},
		{"budget.deadline", &toolfleetv1.Budget{Deadline: durationpb.New(31 * 24 * time.Hour)}},
	}
	for _, tt := range tests {
		_, err := c.StartRun(t.Context(), connect.NewRequest(&toolfleetv1.StartRunRequest{Model: "scripted:demo",
			Messages: []*toolfleetv1.Message{llm.User("hi")}, Budget: tt.budget}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("StartRun with %v: %v, want InvalidArgument naming %s", tt.budget, err, tt.field)
		}
	}
	_, err := c.StartRun(t.Context(), connect.NewRequest(&toolfleetv1.StartRunRequest{Model: "scripted:demo",
		Messages: []*toolfleetv1.Message{llm.User("hi")}, Approval: &toolfleetv1.ApprovalPolicy{Timeout: durationpb.New(-time.Second)}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "approval.timeout") {
		t.Errorf("StartRun with a negative approval timeout: %v, want InvalidArgument naming approval.timeout", err)
	}
}

// TestListRunsRefusesMadeUpPageTokens is issue 32 §7: a page token the
// service did not issue is the caller's mistake, answered at once, before
// Temporal is asked (this service has none to ask).
func TestListRunsRefusesMadeUpPageTokens(t *testing.T) {
	t.Parallel()
	c := validating(t)
	for _, tok := range [][]byte{[]byte("made up"), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, []byte(strings.Repeat("x", 300))} {
		start := time.Now()
		_, err := c.ListRuns(t.Context(), connect.NewRequest(&toolfleetv1.ListRunsRequest{PageToken: tok}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "start again without it") ||
			time.Since(start) > 2*time.Second {
			t.Errorf("ListRuns with page token %q: %v after %s, want InvalidArgument at once", tok, err, time.Since(start))
		}
	}
}
