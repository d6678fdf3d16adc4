package agentapi_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
)

// TestProgramDetail reads a finished program's source, limits and each
// call with its values from GetProgram's detail; another principal gets
// NotFound, as for the status alone.
func TestProgramDetail(t *testing.T) {
	t.Parallel()
	tn := startTenants(t, "program-detail-test", agent.NewResolver())
	ctx := t.Context()
	const src = "a = Calculator_Multiply(a=6, b=7)\nb = Calculator_Add(a=a.value['result'], b=1)\nresult = b.value['result']\n"
	res, err := tn.alicePrograms.RunProgram(ctx, connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: "detail-1",
		Source: src, Tools: []string{"Calculator.*"}, Wait: true, Limits: &toolfleetv1.ProgramLimits{MaxToolCalls: 5}}))
	if err != nil || res.Msg.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED {
		t.Fatalf("RunProgram: %v %v", res, err)
	}
	got, err := tn.alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: "detail-1", Detail: true}))
	if err != nil {
		t.Fatal(err)
	}
	d := got.Msg.GetDetail()
	if d.GetSource() != src || d.GetLimits().GetMaxToolCalls() != 5 || d.GetLimits().GetMaxSteps() == 0 || len(d.GetCalls()) != 2 || d.GetSteps() == 0 {
		t.Fatalf("detail: %v", d)
	}
	c := d.GetCalls()[0]
	if !strings.HasPrefix(c.GetToolId(), "Calculator.Multiply") || !strings.Contains(c.GetInputJson(), `"a":6`) ||
		!strings.Contains(c.GetResultJson(), "42") || c.GetAttempts() != 1 || c.GetCallId() != "detail-1/1" || c.GetEndedAt() == nil {
		t.Errorf("first call: %v", c)
	}
	if plain, err := tn.alicePrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: "detail-1"})); err != nil || plain.Msg.GetDetail() != nil {
		t.Errorf("GetProgram without detail: %v %v", plain, err)
	}
	if _, err := tn.malloryPrograms.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: "detail-1", Detail: true})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("another principal's detail: %v, want NotFound", err)
	}
}
