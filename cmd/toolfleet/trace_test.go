package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/internal/telemetry"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// An agent step is one connected trace: the run's start, its workflow, the
// CallTool activity, the gateway, and the worker that ran the tool. Not
// parallel: it installs the process's TracerProvider (an in-memory exporter).
func TestAgentStepTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(telemetry.Propagator)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()); _ = tp.Shutdown(context.Background()) })

	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	models := agent.NewResolver()
	models.Register("traced", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("", llm.CallPart("c1", "Calculator_Add", map[string]any{"a": 2, "b": 3})),
		llmtest.SayText("5"),
	}})
	_, o := startTraced(ctx, t, stack, models, true)
	const runID = "traced-run"
	if _, err := o.Runs.Start(ctx, runID, agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "traced"}},
		Tools: []string{"Calculator.Add"}, IdleTimeout: -1}, toolcall.Principal{Subject: "ana", Scopes: []string{"tools:call"}}, llm.User("add")); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := o.Runs.Get(ctx, runID)
		if err == nil && st.Status == agent.StatusCompleted {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the run did not complete: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = tp.ForceFlush(ctx)

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	var tool *tracetest.SpanStub
	for i, s := range spans {
		byID[s.SpanContext.SpanID()] = s
		if s.Name == "tools.calculator.v1.CalculatorService/Add" && s.SpanKind == trace.SpanKindServer {
			tool = &spans[i]
		}
	}
	if tool == nil {
		t.Fatalf("no server span of the worker's Add among %d spans: %v", len(spans), names(spans))
	}
	// Walk from the tool's span to the root: each hop must be there.
	var chain []string
	for s, ok := *tool, true; ok; s, ok = byID[s.Parent.SpanID()] {
		if s.SpanContext.TraceID() != tool.SpanContext.TraceID() {
			t.Fatalf("span %q is in another trace", s.Name)
		}
		chain = append(chain, s.Name)
	}
	path := strings.Join(chain, " ← ")
	t.Log(path)
	for _, want := range []string{"toolfleet.v1.ToolGatewayService/CallTool", "CallTool", "RunWorkflow:AgentRun", "StartWorkflow:AgentRun"} {
		if !strings.Contains(path, want) {
			t.Errorf("the tool's trace lacks %q: %s", want, path)
		}
	}
	if !strings.HasSuffix(path, "StartWorkflow:AgentRun") {
		t.Errorf("the trace does not start where the run was started: %s", path)
	}

	// The run's tool_result event carries the trace in its NATS headers.
	nc, err := nats.Connect(stack.NATS.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, toolcall.DefaultEventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{toolcall.EventSubject(runID, toolcall.EventToolResult)}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if tp := msg.Headers().Get("traceparent"); !strings.Contains(tp, tool.SpanContext.TraceID().String()) {
		t.Errorf("tool_result event traceparent %q, want trace %s", tp, tool.SpanContext.TraceID())
	}
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}
