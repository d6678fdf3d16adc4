package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/toolfleet/toolfleet/e2e"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
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
	fleet := e2e.Start(b, e2e.Options{NATSURL: stack.NATS.URL()})
	turns := []llmtest.ScriptTurn{}
	for i := range agentSteps {
		turns = append(turns, llmtest.CallTools("", llm.CallPart("c", "Calculator_Add", map[string]any{"a": i, "b": 1})))
	}
	turns = append(turns, llmtest.SayText("done"))
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
		if _, err := o.Runs.Start(ctx, id, agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "bench"}},
			Tools: []string{"Calculator.Add"}, IdleTimeout: -1}, toolcall.Principal{}, llm.User("go")); err != nil {
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
	cons, err := js.OrderedConsumer(ctx, toolcall.DefaultEventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{toolcall.EventSubject(runID, toolcall.EventCompleted)}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cons.Next(jetstream.FetchContext(ctx)); err != nil {
		b.Fatalf("run %s: %v", runID, err)
	}
}

// BenchmarkAgentConcurrentRuns starts many agent runs at once (scripted model,
// 5 tool steps each; TOOLFLEET_BENCH_RUNS, default 200) and the same number of
// raw 5-activity workflows, and compares steps/s with activities/s on the
// same server. Every run must complete: errors fail the benchmark.
//
//	TOOLFLEET_BENCH_RUNS=1000 go test ./bench -run '^$' -bench AgentConcurrent -benchtime 1x -timeout 30m
func BenchmarkAgentConcurrentRuns(b *testing.B) {
	const steps = 5
	n := 200
	if v, err := strconv.Atoi(os.Getenv("TOOLFLEET_BENCH_RUNS")); err == nil && v > 0 {
		n = v
	}
	stack := devstacktest.Start(b)
	tc := devstacktest.Client(b, stack)
	devstacktest.StartWorker(b, tc, "bench-raw-many", RawActivities)
	fleet := e2e.Start(b, e2e.Options{NATSURL: stack.NATS.URL()})
	turns := []llmtest.ScriptTurn{}
	for i := range steps {
		turns = append(turns, llmtest.CallTools("", llm.CallPart("c", "Calculator_Add", map[string]any{"a": i, "b": 1})))
	}
	turns = append(turns, llmtest.SayText("done"))
	models := agent.NewResolver()
	models.Register("many", &agenttest.ByTurn{Turns: turns})
	o, err := runner.Start(b.Context(), runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		TaskQueue: "bench-many", NATSURL: stack.NATS.URL(), GatewayAddress: fleet.Addr, Models: models, MemoryStorage: true,
		Logger: slog.New(slog.DiscardHandler)})
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

	var rawTime, agentTime time.Duration
	b.ResetTimer()
	for it := range b.N {
		ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
		began := time.Now()
		var g errgroup.Group
		g.SetLimit(64) // bounded starters
		for i := range n {
			g.Go(func() error {
				run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("raw-many-%d-%d", it, i), TaskQueue: "bench-raw-many"}, RawActivities, steps)
				if err != nil {
					return err
				}
				return run.Get(ctx, nil)
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatalf("raw: %v", err)
		}
		rawTime += time.Since(began)

		prefix := fmt.Sprintf("many-%d-", it)
		cons, err := js.OrderedConsumer(ctx, toolcall.DefaultEventStream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{toolcall.EventSubjectPrefix + "*." + toolcall.EventCompleted, toolcall.EventSubjectPrefix + "*." + toolcall.EventFailed},
			DeliverPolicy:  jetstream.DeliverNewPolicy})
		if err != nil {
			b.Fatal(err)
		}
		began = time.Now()
		for i := range n {
			g.Go(func() error {
				_, err := o.Runs.Start(ctx, fmt.Sprintf("%s%d", prefix, i), agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "many"}},
					Tools: []string{"Calculator.Add"}, IdleTimeout: -1}, toolcall.Principal{}, llm.User("go"))
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatalf("start: %v", err)
		}
		done := 0
		for done < n {
			msg, err := cons.Next(jetstream.FetchContext(ctx))
			if err != nil {
				b.Fatalf("%d of %d runs ended: %v", done, n, err)
			}
			if !strings.HasPrefix(strings.TrimPrefix(msg.Subject(), toolcall.EventSubjectPrefix), prefix) {
				continue
			}
			if strings.HasSuffix(msg.Subject(), "."+toolcall.EventFailed) {
				b.Fatalf("run failed: %s", msg.Data())
			}
			done++
		}
		agentTime += time.Since(began)
		cancel()
	}
	b.StopTimer()
	total := float64(b.N * n * steps)
	b.ReportMetric(total/rawTime.Seconds(), "raw-activities/s")
	b.ReportMetric(total/agentTime.Seconds(), "agent-steps/s")
	b.ReportMetric(rawTime.Seconds()/agentTime.Seconds(), "steps/activities-x")
	b.ReportMetric(float64(n), "runs")
}
