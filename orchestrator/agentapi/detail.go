package agentapi

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
)

// maxDetailCalls bounds the calls GetRun's detail lists (each one's
// arguments are one read of the transcript).
const maxDetailCalls = 200

// detail is GetRun's detail of a run the caller may see.
func (s *Service) detail(ctx context.Context, runID string) (*toolfleetv1.RunDetail, error) {
	d, err := s.Runs.Detail(ctx, runID, maxDetailCalls)
	if err != nil {
		return nil, err
	}
	sp, b := d.Spec, d.Spec.Budget
	out := &toolfleetv1.RunDetail{Model: sp.Model.Provider + ":" + sp.Model.Name, WorkflowId: runID, WorkflowRunId: d.ExecutionID,
		CallsTruncated: d.Truncated,
		Budget: &toolfleetv1.Budget{MaxTurns: int32(b.MaxTurns), MaxToolCalls: int32(b.MaxToolCalls), MaxInputTokens: b.MaxInputTokens,
			MaxOutputTokens: b.MaxOutputTokens, Deadline: durationpb.New(b.Deadline)}}
	for _, c := range d.Calls {
		in := c.Input
		tc := &toolfleetv1.RunToolCall{Failure: c.Failure, Attempts: c.Attempt, ScheduledAt: timestamppb.New(c.Scheduled),
			Approver: in.Approver, Denial: in.Denial, ReadOnlyLocal: c.Local}
		if !c.Local {
			tc.CallId, tc.Turn = ids.RunCall(runID, in.Turn, in.Index), int32(in.Turn)
		}
		switch {
		case in.Tool != nil:
			tc.ToolId = in.Tool.ID
		case in.Program != nil:
			tc.ToolId = "run_program"
		}
		if !c.Local {
			if args, err := s.Runs.CallArguments(ctx, runID, in.CallSeq, in.Index); err == nil {
				tc.Arguments = args
			}
		}
		if !c.Closed.IsZero() {
			tc.EndedAt = timestamppb.New(c.Closed)
		}
		if r := c.Result; r != nil {
			tc.Kind, tc.IsError, tc.Preview, tc.ContentSha256 = string(r.Kind), r.IsError, r.Preview, r.ContentSHA256
			tc.ContentBytes, tc.ResultRef, tc.Duration = int64(r.ContentBytes), r.Ref, durationpb.New(r.Duration)
		}
		out.Calls = append(out.Calls, tc)
	}
	return out, nil
}
