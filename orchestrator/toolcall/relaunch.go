package toolcall

import (
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// A call whose attempts were lost with their worker — the orchestrator
// process died, or Temporal's server restarted and the attempt's heartbeat
// timed out — never reached a verdict of the tool's: its retries were spent
// by the infrastructure, not by the tool. Such a call is scheduled again,
// with the same input and so the same call id (the gateway's idempotency
// store keeps its side effect single), up to MaxRelaunches times. A tool's
// own failures still end it after the attempts its contract allows.
const (
	// RelaunchChangeID is the workflow.GetVersion change id of relaunching:
	// it is asked only when a call was lost, so histories of calls that were
	// not lost are unchanged, and older histories replay as they ran.
	RelaunchChangeID = "toolcall-relaunch"
	// MaxRelaunches bounds the relaunches of one call: a call that takes its
	// worker down every time (a crash the call itself causes) still ends.
	MaxRelaunches = 5
)

// LostWithWorker reports whether err is an activity failure whose last
// attempt timed out on its heartbeat: the worker running it went away.
func LostWithWorker(err error) bool {
	var te *temporal.TimeoutError
	return errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT
}

// Await waits for a call activity's future f and, while it fails because
// it was lost with its worker (see [LostWithWorker]), schedules activity
// name with in again on the context opts returns (called at each relaunch,
// so deadlines can be recomputed), at most [MaxRelaunches] times. A nil
// opts never relaunches (a local activity has no heartbeat).
func Await(ctx workflow.Context, f workflow.Future, opts func() workflow.Context, name string, in, out any) error {
	err := f.Get(ctx, out)
	for n := 0; err != nil && opts != nil && n < MaxRelaunches && LostWithWorker(err) && ctx.Err() == nil; n++ {
		if workflow.GetVersion(ctx, RelaunchChangeID, workflow.DefaultVersion, 1) < 1 {
			break
		}
		workflow.GetLogger(ctx).Warn("a tool call was lost with its worker; scheduling it again", "activity", name, "relaunch", n+1)
		err = workflow.ExecuteActivity(opts(), name, in).Get(ctx, out)
	}
	return err
}
