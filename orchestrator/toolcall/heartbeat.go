package toolcall

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
)

// heartbeatEvery keeps long activities cancellable and lets Temporal notice
// a dead worker within [HeartbeatTimeout].
const heartbeatEvery = 2 * time.Second

// Heartbeat records heartbeats every 2 s until the returned stop is called;
// its goroutine is owned by the calling activity. With a HeartbeatTimeout on
// the activity, Temporal retries it on another worker within that timeout
// when this process dies, instead of after the whole StartToCloseTimeout.
func Heartbeat(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {} // called directly (a test), not by a Temporal worker
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(heartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}
