package agentapi_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// TestListRunsFilters lists runs by status, model, tool, starter and time
// from Temporal visibility: a listed status is GetRun's (an answered run is
// COMPLETED, not its workflow's Running), a hostile filter value is refused,
// and mallory finds none of alice's runs whatever she filters on.
func TestListRunsFilters(t *testing.T) {
	t.Parallel()
	models := agent.NewResolver()
	models.Register("idle", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{llmtest.SayText("ok")}})
	models.Register("calc", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("", llm.CallPart("m", "Calculator_Multiply", map[string]any{"a": 2, "b": 3})), llmtest.SayText("6")}})
	tn := startTenants(t, "list-filters-test", models)
	ctx := t.Context()
	before := time.Now().Add(-time.Second)
	start := func(c toolfleetv1connect.AgentServiceClient, id, model string, tools ...string) {
		t.Helper()
		if _, err := c.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{RunId: id, Model: model,
			Messages: []*toolfleetv1.Message{llm.User("hi")}, Tools: tools})); err != nil {
			t.Fatal(err)
		}
	}
	start(tn.aliceRuns, "alice-idle", "scripted:idle")
	start(tn.aliceRuns, "alice-calc", "scripted:calc", "Calculator.Multiply")
	start(tn.malloryRuns, "mallory-calc", "scripted:calc", "Calculator.Multiply")

	list := func(c toolfleetv1connect.AgentServiceClient, req *toolfleetv1.ListRunsRequest) []string {
		t.Helper()
		res, err := c.ListRuns(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatalf("ListRuns(%v): %v", req, err)
		}
		var ids []string
		for _, r := range res.Msg.GetRuns() {
			ids = append(ids, r.GetRunId())
		}
		slices.Sort(ids)
		return ids
	}
	// Wait until both of alice's runs answered and visibility shows the tool.
	completed := &toolfleetv1.ListRunsRequest{Status: toolfleetv1.RunStatus_RUN_STATUS_COMPLETED}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) { // generous: a loaded machine
		if got := list(tn.aliceRuns, &toolfleetv1.ListRunsRequest{Tool: "Calculator.Multiply", Status: toolfleetv1.RunStatus_RUN_STATUS_COMPLETED}); slices.Equal(got, []string{"alice-calc"}) &&
			slices.Equal(list(tn.aliceRuns, completed), []string{"alice-calc", "alice-idle"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's runs never listed as completed with their tool: %v", list(tn.aliceRuns, completed))
		}
	}
	res, err := tn.aliceRuns.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Msg.GetRuns() {
		got, err := tn.aliceRuns.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: r.GetRunId()}))
		if err != nil {
			t.Fatal(err)
		}
		if r.GetStatus() != got.Msg.GetStatus() || r.GetStartedBy() != "alice" || r.GetModel() != "scripted:idle" && r.GetModel() != "scripted:calc" {
			t.Errorf("listed %v, GetRun says %s", r, got.Msg.GetStatus())
		}
	}

	// A run's detail: its model, budget and each call with arguments, outcome and attempts.
	det, err := tn.aliceRuns.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: "alice-calc", Detail: true}))
	if err != nil {
		t.Fatal(err)
	}
	d := det.Msg.GetDetail()
	if d.GetModel() != "scripted:calc" || d.GetWorkflowId() != "alice-calc" || d.GetWorkflowRunId() == "" || len(d.GetCalls()) != 1 {
		t.Fatalf("detail: %v", d)
	}
	// Calculator.Multiply is read-only: a local activity, whose history names no call.
	if c := d.GetCalls()[0]; !c.GetReadOnlyLocal() || c.GetKind() != "ok" || c.GetAttempts() != 1 || c.GetEndedAt() == nil || !strings.Contains(c.GetPreview(), "6") {
		t.Errorf("the call: %v", c)
	}
	if _, err := tn.malloryRuns.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: "alice-calc", Detail: true})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("mallory's GetRun detail of alice's run: %v, want NotFound", err)
	}

	cases := []struct {
		name string
		c    toolfleetv1connect.AgentServiceClient
		req  *toolfleetv1.ListRunsRequest
		want []string
	}{
		{"model", tn.aliceRuns, &toolfleetv1.ListRunsRequest{Model: "scripted:idle"}, []string{"alice-idle"}},
		{"tool", tn.aliceRuns, &toolfleetv1.ListRunsRequest{Tool: "Calculator.Multiply"}, []string{"alice-calc"}},
		{"started by", tn.aliceRuns, &toolfleetv1.ListRunsRequest{StartedBy: "alice"}, []string{"alice-calc", "alice-idle"}},
		{"running", tn.aliceRuns, &toolfleetv1.ListRunsRequest{Status: toolfleetv1.RunStatus_RUN_STATUS_RUNNING}, nil},
		{"time range", tn.aliceRuns, &toolfleetv1.ListRunsRequest{StartedAfter: timestamppb.New(before), StartedBefore: timestamppb.New(time.Now().Add(time.Minute))}, []string{"alice-calc", "alice-idle"}},
		{"started later", tn.aliceRuns, &toolfleetv1.ListRunsRequest{StartedAfter: timestamppb.New(time.Now().Add(time.Minute))}, nil},
		{"another's runs by starter", tn.malloryRuns, &toolfleetv1.ListRunsRequest{StartedBy: "alice"}, nil},
		{"another's runs by model", tn.malloryRuns, &toolfleetv1.ListRunsRequest{Model: "scripted:idle"}, nil},
		{"own runs", tn.malloryRuns, &toolfleetv1.ListRunsRequest{Tool: "Calculator.Multiply"}, []string{"mallory-calc"}},
	}
	for _, tc := range cases {
		if got := list(tc.c, tc.req); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}

	// A filter value is hostile: one that could change the query is refused.
	for _, req := range []*toolfleetv1.ListRunsRequest{
		{StartedBy: "alice' OR ToolfleetPrincipal != 'x"},
		{Model: `scripted:idle\`},
		{Tool: "Calculator.Multiply\x00"},
		{Model: string(make([]byte, 300))},
		{Status: toolfleetv1.RunStatus(99)},
		{Status: toolfleetv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED},
		{StartedAfter: timestamppb.New(time.Now()), StartedBefore: timestamppb.New(time.Now().Add(-time.Hour))},
		{StartedAfter: &timestamppb.Timestamp{Nanos: -1}},
	} {
		if _, err := tn.malloryRuns.ListRuns(ctx, connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("ListRuns(%v): %v, want InvalidArgument", req, err)
		}
	}
	// A page token is tied to its filters.
	page, err := tn.aliceRuns.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 1, StartedBy: "alice"}))
	if err != nil || len(page.Msg.GetNextPageToken()) == 0 {
		t.Fatalf("first page: %v %v", page, err)
	}
	if _, err := tn.aliceRuns.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 1, PageToken: page.Msg.GetNextPageToken()})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a page token with other filters: %v, want InvalidArgument", err)
	}
	next, err := tn.aliceRuns.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 1, StartedBy: "alice", PageToken: page.Msg.GetNextPageToken()}))
	if err != nil || len(next.Msg.GetRuns()) != 1 || next.Msg.GetRuns()[0].GetRunId() == page.Msg.GetRuns()[0].GetRunId() {
		t.Errorf("second page: %v %v", next, err)
	}
}
