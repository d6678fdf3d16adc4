package bench

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// squaresProgram is the 10-tool task written as one program.
const squaresProgram = `
total = 0
for i in range(1, args["n"] + 1):
    total += Calculator_Multiply(a=i, b=i).value["result"]
result = {"sum_of_squares": total}
`

// BenchmarkCodeMode does one 10-tool task (the sum of the squares of 1..10,
// ten Calculator.Multiply calls) both ways on the same stack, sides taking
// turns: as a plain agent loop, one call per model turn (11 round trips), and
// in code mode, one run_program call (2 round trips). It reports each side's
// wall time and their ratio, the model round trips, the transcript's bytes,
// and the bytes the model is sent over the whole run (every turn re-reads the
// transcript: what input tokens are billed on).
//
//	go test ./bench -run '^$' -bench CodeMode -benchtime 10x
func BenchmarkCodeMode(b *testing.B) {
	const n = 10
	stack := devstacktest.Start(b)
	fleet := e2e.Start(b, e2e.Options{NATSURL: stack.NATS.URL()})
	loop := []llmtest.ScriptTurn{}
	for i := 1; i <= n; i++ {
		loop = append(loop, llmtest.CallTools("", llm.CallPart("c", "Calculator_Multiply", map[string]any{"a": i, "b": i})))
	}
	loop = append(loop, llmtest.SayText("385"))
	models := agent.NewResolver()
	models.Register("loop", &agenttest.ByTurn{Turns: loop})
	models.Register("program", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("", llm.CallPart("p", agent.RunProgramTool, map[string]any{"source": squaresProgram, "args": map[string]any{"n": n}})),
		llmtest.SayText("385"),
	}})
	o, err := runner.Start(b.Context(), runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		TaskQueue: "bench-code-mode", NATSURL: stack.NATS.URL(), GatewayAddress: fleet.Addr, Models: models, MemoryStorage: true,
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

	type side struct {
		model    string
		codeMode bool
		took     time.Duration
		turns    int
		// transcript is the final conversation's size; sent sums what each
		// model turn was sent.
		transcript, sent int
	}
	sides := []*side{{model: "loop"}, {model: "program", codeMode: true}}
	b.ResetTimer()
	for i := range b.N {
		for _, s := range sides {
			ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute)
			id := fmt.Sprintf("%s-%d", s.model, i)
			began := time.Now()
			if _, err := o.Runs.Start(ctx, id, agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: s.model}},
				Tools: []string{"Calculator.Multiply"}, CodeMode: s.codeMode, IdleTimeout: -1}, toolcall.Principal{},
				llm.User("What is the sum of the squares of 1 to 10?")); err != nil {
				b.Fatal(err)
			}
			waitCompleted(ctx, b, js, id)
			s.took += time.Since(began)
			if i == 0 {
				msgs, err := o.Runs.Transcript(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				s.turns, s.transcript, s.sent = transcriptCost(msgs)
				if answer := llm.MessageText(msgs[len(msgs)-1]); answer != "385" {
					b.Fatalf("%s answered %q", id, answer)
				}
			}
			cancel()
		}
	}
	b.StopTimer()
	loopSide, prog := sides[0], sides[1]
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(loopSide.took), "loop-ms")
	b.ReportMetric(ms(prog.took), "program-ms")
	b.ReportMetric(float64(prog.took)/float64(loopSide.took), "program/loop-x")
	b.ReportMetric(float64(loopSide.turns), "loop-round-trips")
	b.ReportMetric(float64(prog.turns), "program-round-trips")
	b.ReportMetric(float64(loopSide.transcript), "loop-transcript-B")
	b.ReportMetric(float64(prog.transcript), "program-transcript-B")
	b.ReportMetric(float64(loopSide.sent), "loop-sent-B")
	b.ReportMetric(float64(prog.sent), "program-sent-B")
}

// transcriptCost counts a transcript's model turns, its bytes, and the bytes
// of the conversation sent to the model at each turn, summed.
func transcriptCost(msgs []*toolfleetv1.Message) (turns, size, sent int) {
	for _, m := range msgs {
		if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			turns++
			sent += size // the model read everything before its reply
		}
		size += proto.Size(m)
	}
	return turns, size, sent
}
