package bench

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"
)

// agentSteps is the number of tool steps of one benchmarked run.
const agentSteps = 10

// RawActivities runs n Upper activities one after another: the baseline of
// an agent run on the same server.
func RawActivities(ctx workflow.Context, n int) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	for range n {
		if err := workflow.ExecuteActivity(ctx, devstacktest.Upper, "x").Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkAgentStep compares one agent tool step (a scripted model turn that
// asks for Calculator.Add, the call through the gateway, transcript writes
// and events) with one raw Temporal activity, on the same embedded server,
// sides taking turns. It also reports the workflow history bytes per step.
//
//	go test ./bench -run '^$' -bench AgentStep -benchtime 20x
func BenchmarkAgentStep(b *testing.B) {
	stack := devstacktest.Start(b)
	tc := devstacktest.Client(b, stack)
	devstacktest.StartWorker(b, tc, "bench-raw", RawActivities)
	fleet := gatewaytest.Start(b, gatewaytest.Options{NATSURL: stack.NATS.URL()})
	turns := []llm.ScriptTurn{}
	for i := range agentSteps {
		turns = append(turns, llm.CallTools("", llm.CallPart("c", "Calculator_Add", map[string]any{"a": i, "b": 1})))
	}
	turns = append(turns, llm.SayText("done"))
	models := agent.NewResolver()
	models.Register("bench", &agenttest.ByTurn{Turns: turns})
	o, err := runner.Start(b.Context(), runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		TaskQueue: "bench-agent", NATSURL: stack.NATS.URL(), GatewayAddress: fleet.Addr, Models: models, MemoryStorage: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(o.Stop)
	nc, err := nats.Connect(stack.NATS.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}

	var raw, agentTime time.Duration
	historyBytes := 0
	b.ResetTimer()
	for i := range b.N {
		ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute)
		began := time.Now()
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("raw-%d", i), TaskQueue: "bench-raw"}, RawActivities, agentSteps)
		if err == nil {
			err = run.Get(ctx, nil)
		}
		if err != nil {
			b.Fatalf("raw %d: %v", i, err)
		}
		raw += time.Since(began)

		id := fmt.Sprintf("agent-%d", i)
		began = time.Now()
		if _, err := o.Runs.Start(ctx, id, agent.RunSpec{Model: agent.ModelSpec{Provider: "scripted", Name: "bench"},
			Tools: []string{"Calculator.Add"}, IdleTimeout: -1}, agent.Principal{}, llm.User("go")); err != nil {
			b.Fatal(err)
		}
		waitCompleted(ctx, b, js, id)
		agentTime += time.Since(began)
		if i == 0 {
			it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					b.Fatal(err)
				}
				historyBytes += proto.Size(ev)
			}
		}
		cancel()
	}
	b.StopTimer()
	steps := float64(b.N * agentSteps)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / steps }
	b.ReportMetric(ms(raw), "raw-activity-ms")
	b.ReportMetric(ms(agentTime), "agent-step-ms")
	b.ReportMetric(float64(agentTime)/float64(raw), "step/activity-x")
	b.ReportMetric(float64(historyBytes)/agentSteps, "history-B/step")
}

// waitCompleted waits for the run's completed event (never on the workflow result).
func waitCompleted(ctx context.Context, b *testing.B, js jetstream.JetStream, runID string) {
	cons, err := js.OrderedConsumer(ctx, agent.DefaultEventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{agent.EventSubject(runID, agent.EventCompleted)}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cons.Next(jetstream.FetchContext(ctx)); err != nil {
		b.Fatalf("run %s: %v", runID, err)
	}
}
