package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// Detail is what a run's page shows beyond its status: the start's spec
// and each tool call of the current execution, from its history.
type Detail struct {
	Spec RunSpec
	// RunID is the Temporal run id of the execution read.
	ExecutionID string
	Calls       []CallDetail
	Truncated   bool
}

// CallDetail is one tool call: the activity's input and result, attempts
// and timing (arguments are in the transcript: [Runs.CallArguments]).
type CallDetail struct {
	// Local is a read-only call run as a local activity: history holds its
	// result, attempts and time, not its input (Input is zero).
	Local                      bool
	Input                      CallToolInput
	Result                     *CallToolResult
	Failure                    string
	Attempt                    int32
	Scheduled, Started, Closed time.Time
}

// Detail reads runID's start and tool calls (at most maxCalls) from its
// current execution's history. The caller checks ownership first.
func (r *Runs) Detail(ctx context.Context, runID string, maxCalls int) (*Detail, error) {
	desc, err := r.Temporal.DescribeWorkflowExecution(ctx, runID, "")
	if err != nil {
		return nil, fmt.Errorf("agent: describe %s: %w", runID, err)
	}
	in, err := toolcall.StartInput(ctx, r.Temporal, runID)
	if err != nil {
		return nil, err
	}
	var start RunInput
	if err := toolcall.Decode(in, &start); err != nil {
		return nil, fmt.Errorf("agent: decode the start of %s: %w", runID, err)
	}
	d := &Detail{Spec: start.Spec, ExecutionID: desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()}
	calls, truncated, err := toolcall.ActivityCalls(ctx, r.Temporal, runID, CallToolActivity, maxCalls)
	if err != nil {
		return nil, err
	}
	d.Truncated = truncated
	for _, c := range calls {
		cd := CallDetail{Local: c.Local, Failure: c.Failure, Attempt: c.Attempt, Scheduled: c.Scheduled, Started: c.Started, Closed: c.Closed}
		if err := toolcall.Decode(c.Input, &cd.Input); err != nil {
			return nil, fmt.Errorf("agent: decode a call of %s: %w", runID, err)
		}
		cd.Input.Principal = toolcall.Principal{}
		if c.Result != nil {
			cd.Result = &CallToolResult{}
			if err := toolcall.Decode(c.Result, cd.Result); err != nil {
				return nil, fmt.Errorf("agent: decode a result of %s: %w", runID, err)
			}
		}
		d.Calls = append(d.Calls, cd)
	}
	return d, nil
}
