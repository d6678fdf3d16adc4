package runner_test

import (
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
)

// TestFailedWhenTheWorkerStops: when Temporal's worker gives up for good
// (here: its namespace is deleted under it, as happened on a cluster whose
// Service briefly reached a server without the namespace), Failed says so,
// so that the process exits and is restarted instead of looking healthy
// while nothing polls. It takes a little over 2 minutes: the SDK's grace
// period for such errors.
func TestFailedWhenTheWorkerStops(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	o, err := runner.Start(t.Context(), runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		TaskQueue: "fatal-test", NATSURL: stack.NATS.URL(), GatewayAddress: "127.0.0.1:1", Models: agent.NewResolver(), MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	select {
	case err := <-o.Failed():
		t.Fatalf("Failed before anything went wrong: %v", err)
	case <-time.After(time.Second):
	}
	c := devstacktest.Client(t, stack)
	if _, err := c.OperatorService().DeleteNamespace(t.Context(), &operatorservice.DeleteNamespaceRequest{Namespace: stack.Namespace()}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-o.Failed():
		if err == nil {
			t.Fatal("Failed gave a nil error")
		}
		t.Logf("worker stopped: %v", err)
	case <-time.After(4 * time.Minute):
		// The SDK retries a "non-retriable" poll error for 2 minutes first
		// (proxies may answer oddly for a moment), then gives up.
		t.Fatal("the worker's namespace is gone and Failed said nothing")
	}
}
