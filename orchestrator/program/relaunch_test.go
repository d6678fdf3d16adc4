package program_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// TestCallLostWithItsWorker: a call whose attempts all time out on their
// heartbeat (its orchestrator died, or Temporal's server restarted) did not
// fail in the tool: it is scheduled again with the same call id, and the
// script sees the tool's answer. A call lost more than MaxRelaunches times
// ends as a failed result the script can handle.
func TestCallLostWithItsWorker(t *testing.T) {
	t.Parallel()
	const attempts = 3 // Calculator.Add's contract sets none: toolcall.DefaultAttempts
	for _, tt := range []struct {
		name string
		lost int64 // attempts that time out on their heartbeat before the call gets through
		want string
	}{
		{"lost once", attempts, `[true,3]`},
		{"lost on every relaunch", attempts * (toolcall.MaxRelaunches + 1), `[false,null]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			real := &program.Activities{Gateway: e.gw, Events: e.events}
			var ran atomic.Int64
			var mu sync.Mutex
			callIDs := map[string]bool{}
			e.OnActivity(program.CallToolActivity, mock.Anything, mock.Anything).Return(
				func(ctx context.Context, req program.CallRequest) (*program.CallResult, error) {
					mu.Lock()
					callIDs[req.CallID] = true
					mu.Unlock()
					if n := ran.Add(1); n <= tt.lost {
						if a := activity.GetInfo(ctx).Attempt; a < 1 {
							t.Errorf("attempt %d", a)
						}
						return nil, temporal.NewHeartbeatTimeoutError()
					}
					return real.ProgramCallTool(ctx, req)
				})
			out, perr := e.run(t, program.Input{Source: `
r = Calculator_Add(a=1, b=2)
result = [r.ok, r.value["result"] if r.ok else None]
`})
			if perr != nil {
				t.Fatalf("program failed: %v", perr)
			}
			if out.ResultJSON != tt.want {
				t.Fatalf("result %s, want %s (activity ran %d times)", out.ResultJSON, tt.want, ran.Load())
			}
			if len(callIDs) != 1 {
				t.Fatalf("call ids %v: a relaunch must repeat the same call id", callIDs)
			}
			if want := min(tt.lost+1, attempts*(toolcall.MaxRelaunches+1)); ran.Load() != want {
				t.Fatalf("activity ran %d times, want %d", ran.Load(), want)
			}
		})
	}
}
