package programapi

import (
	"context"
	"encoding/json"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// maxDetailCalls bounds the calls GetProgram's detail lists.
const maxDetailCalls = 500

// detail is GetProgram's detail of a program the caller may see.
func (s *Service) detail(ctx context.Context, id string, steps uint64) (*toolfleetv1.ProgramDetail, error) {
	d, err := s.Programs.Detail(ctx, id, maxDetailCalls)
	if err != nil {
		return nil, err
	}
	in, l := d.Input, d.Limits
	out := &toolfleetv1.ProgramDetail{Source: in.Source, Filename: in.Filename, ArgsJson: in.ArgsJSON, Tools: in.Tools,
		CallsTruncated: d.Truncated, Steps: steps,
		Limits: &toolfleetv1.ProgramLimits{MaxSteps: int64(min(l.MaxSteps, 1<<62)), MaxToolCalls: int32(l.MaxToolCalls),
			MaxWidth: int32(l.MaxWidth), Deadline: durationpb.New(l.Deadline), MaxValueBytes: int32(l.MaxValueBytes),
			MaxResultBytes: int32(l.MaxResultBytes), ApprovalWait: durationpb.New(l.ApprovalWait), MaxMemoryBytes: l.MaxMemoryBytes}}
	if c := in.Call; c != nil {
		tc := &toolfleetv1.ProgramToolCall{ToolId: c.ToolID}
		var m map[string]any
		if json.Unmarshal([]byte(c.InputJSON), &m) == nil {
			tc.Input, _ = structpb.NewStruct(m)
		}
		out.ToolCall = tc
	}
	for _, c := range d.Calls {
		pc := &toolfleetv1.ProgramCall{CallId: c.Request.CallID, ToolId: c.Request.ToolID, InputJson: c.Request.InputJSON,
			Failure: c.Failure, Attempts: c.Attempt, ScheduledAt: timestamppb.New(c.Scheduled), Approver: c.Request.Approver}
		if !c.Closed.IsZero() {
			pc.EndedAt = timestamppb.New(c.Closed)
		}
		if r := c.Result; r != nil {
			if r.OK {
				pc.ResultJson = r.ValueJSON
			} else if r.Error != nil {
				pc.Error = &toolfleetv1.ProgramError{Kind: string(r.Error.Kind.ForProgram()), Message: r.Error.Message}
			} else if r.Asked != nil {
				for _, q := range r.Asked.Requests {
					pc.Asked = append(pc.Asked, q.Key)
				}
			}
		}
		out.Calls = append(out.Calls, pc)
	}
	return out, nil
}
