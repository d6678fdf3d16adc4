package programapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolfleet/toolfleet/e2e"
	"github.com/toolfleet/toolfleet/e2e/programstack"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
)

// TestListProgramsFilters: ListPrograms filters on status, tool, starter
// and time through the visibility query builder; a hostile value is
// refused, not quoted into the query; a namespace without the search
// attributes refuses attribute filters; a caller never sees another's
// programs whatever started_by says.
func TestListProgramsFilters(t *testing.T) {
	t.Parallel()
	s := programstack.Start(t, e2e.Options{}, program.Config{})
	plain, svc := programstack.Serve(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// Without the search attributes only the time range filters.
	if _, err := plain.ListPrograms(ctx, programstack.As("alice", &toolfleetv1.ListProgramsRequest{Tool: "Calculator.Add"})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a tool filter without search attributes: %v, want FailedPrecondition", err)
	}
	if _, err := plain.ListPrograms(ctx, programstack.As("alice", &toolfleetv1.ListProgramsRequest{StartedAfter: timestamppb.New(time.Now().Add(-time.Hour))})); err != nil {
		t.Errorf("a time filter without search attributes: %v", err)
	}

	if err := visibility.Ensure(ctx, s.Temporal, s.Namespace); err != nil {
		t.Fatal(err)
	}
	indexed := *svc
	indexed.Programs = &program.Programs{Temporal: s.Temporal, TaskQueue: s.Queue, Config: s.Config,
		Visibility: &visibility.Checker{Client: s.Temporal, Namespace: s.Namespace}}
	mux := http.NewServeMux()
	mux.Handle(indexed.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := toolfleetv1connect.NewProgramServiceClient(srv.Client(), srv.URL)

	start := time.Now().Add(-time.Second)
	for id, p := range map[string]struct{ who, source string }{
		"flt-add":  {"alice", "result = Calculator_Add(a=1, b=2).value['result']\n"},
		"flt-mul":  {"alice", "result = Calculator_Multiply(a=2, b=3).value['result']\n"},
		"flt-fail": {"alice", "fail('no')\n"},
		"flt-bob":  {"bob", "result = Calculator_Add(a=5, b=5).value['result']\n"},
	} {
		if _, err := c.RunProgram(ctx, programstack.As(p.who, &toolfleetv1.RunProgramRequest{ProgramId: id, Wait: true,
			Tools: []string{"Calculator.*"}, Source: p.source})); err != nil {
			t.Fatalf("RunProgram %s: %v", id, err)
		}
	}
	list := func(who string, req *toolfleetv1.ListProgramsRequest) []string {
		t.Helper()
		got, err := c.ListPrograms(ctx, programstack.As(who, req))
		if err != nil {
			t.Fatalf("ListPrograms %v: %v", req, err)
		}
		var ids []string
		for _, p := range got.Msg.GetPrograms() {
			ids = append(ids, p.GetProgramId())
		}
		slices.Sort(ids)
		return ids
	}
	for name, tc := range map[string]struct {
		who  string
		req  *toolfleetv1.ListProgramsRequest
		want []string
	}{
		"tool":                      {"alice", &toolfleetv1.ListProgramsRequest{Tool: "Calculator.Multiply"}, []string{"flt-mul"}},
		"status":                    {"alice", &toolfleetv1.ListProgramsRequest{Status: toolfleetv1.ProgramStatus_PROGRAM_STATUS_FAILED, StartedAfter: timestamppb.New(start)}, []string{"flt-fail"}},
		"tool and status":           {"alice", &toolfleetv1.ListProgramsRequest{Tool: "Calculator.Add", Status: toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED}, []string{"flt-add"}},
		"started_by another":        {"alice", &toolfleetv1.ListProgramsRequest{StartedBy: "bob"}, nil},
		"started_by self":           {"bob", &toolfleetv1.ListProgramsRequest{StartedBy: "bob"}, []string{"flt-bob"}},
		"before the programs":       {"alice", &toolfleetv1.ListProgramsRequest{StartedBefore: timestamppb.New(start)}, nil},
		"bob's tool is not alice's": {"bob", &toolfleetv1.ListProgramsRequest{Tool: "Calculator.Multiply"}, nil},
	} {
		// Visibility catches up with the programs' attributes.
		var got []string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if got = list(tc.who, tc.req); slices.Equal(got, tc.want) || time.Now().After(deadline) {
				break
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: listed %v, want %v", name, got, tc.want)
		}
	}

	for name, req := range map[string]*toolfleetv1.ListProgramsRequest{
		"quote in tool":         {Tool: "x' OR WorkflowType != '"},
		"quote in started_by":   {StartedBy: "bob' OR 'a' = 'a"},
		"unknown status":        {Status: toolfleetv1.ProgramStatus(99)},
		"after not before":      {StartedAfter: timestamppb.New(start), StartedBefore: timestamppb.New(start)},
		"filter changes a page": {Tool: "Calculator.Add", PageToken: []byte("made up")},
	} {
		if _, err := c.ListPrograms(ctx, programstack.As("alice", req)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}
