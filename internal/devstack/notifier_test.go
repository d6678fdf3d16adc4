package devstack_test

import (
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	enumsspb "go.temporal.io/server/api/enums/v1"
	historyspb "go.temporal.io/server/api/history/v1"
	"go.temporal.io/server/common/clock"
	"go.temporal.io/server/common/definition"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/namespace"
	"go.temporal.io/server/service/history/events"
)

// TestHistoryNotifierDropsBurst pins down the cause of the ~20 s late results that
// client.WorkflowRun.Get sees on a fast single-node server (docs/performance.md).
//
// Get long-polls the history service, which waits on a per-subscriber channel of
// capacity 1 fed with a non-blocking send. When two notifications arrive before the
// poller reads the first (activity completed, then workflow completed, a few ms apart
// while the poller goroutine waits for a core), the second - the close - is dropped,
// and the poll sleeps until history.longPollExpirationInterval runs out.
//
// If this test starts failing, the server no longer drops notifications and the
// short long-poll interval in LatencyTunedDynamicConfig can go.
func TestHistoryNotifierDropsBurst(t *testing.T) {
	t.Parallel()
	n := events.NewNotifier(clock.NewRealTimeSource(), metrics.NoopMetricsHandler, func(namespace.ID, string) int32 { return 1 })
	n.Start()
	defer n.Stop()

	watched := &commonpb.WorkflowExecution{WorkflowId: "wf", RunId: "run"}
	sentinel := &commonpb.WorkflowExecution{WorkflowId: "other", RunId: "run"}
	key := definition.NewWorkflowKey("ns", watched.WorkflowId, watched.RunId)
	_, ch, err := n.WatchHistoryEvent(key)
	if err != nil {
		t.Fatal(err)
	}
	_, done, err := n.WatchHistoryEvent(definition.NewWorkflowKey("ns", sentinel.WorkflowId, sentinel.RunId))
	if err != nil {
		t.Fatal(err)
	}

	notify := func(exec *commonpb.WorkflowExecution, next int64, status enumspb.WorkflowExecutionStatus) {
		n.NotifyNewHistoryEvent(events.NewNotification("ns", exec, next-1, next-1, next, next-2,
			enumsspb.WORKFLOW_EXECUTION_STATE_RUNNING, status, &historyspb.VersionHistories{}, nil))
	}
	// A burst while the poller is busy: progress, then the close.
	notify(watched, 8, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING)
	notify(watched, 12, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED)
	// The dispatcher is one FIFO goroutine: once the sentinel arrives, the burst was handled.
	notify(sentinel, 3, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the notifier never dispatched the sentinel")
	}

	if got := len(ch); got != 1 {
		t.Fatalf("subscriber holds %d notifications, want 1 (capacity-1 channel)", got)
	}
	first := <-ch
	if first.WorkflowStatus != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("kept notification has status %v; the server no longer drops the close notification", first.WorkflowStatus)
	}
}
