package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/e2e"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/runner/runnertest"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// The orchestrator of TestCrash runs in a child process (runnertest): this
// test binary run again, until it is killed.
func TestMain(m *testing.M) {
	if runnertest.IsChild() {
		models := agent.NewResolver()
		for i := range crashRuns {
			models.Register("crash-"+strconv.Itoa(i), crashModel(i))
		}
		os.Exit(runnertest.Serve(models))
	}
	code := m.Run()
	removeBinaries() // fleetBinaries'
	os.Exit(code)
}

// Shape of TestCrash's work: each agent run makes crashSteps() side-effecting
// calls over as many turns; each program makes as many sequential calls and
// as many in parallel.
const (
	crashRuns     = 5
	crashPrograms = 5
	crashQueue    = "crash-test"
)

// crashSteps is 4 in the short form and 12 in the full one, whose 20 kills
// need more work to land in.
func crashSteps() int {
	if full() {
		return 12
	}
	return 4
}

// crashProgram makes 2×args["n"] side-effecting calls (SchemaTest.Sleep is
// neither read-only nor idempotent) and returns how many succeeded.
const crashProgram = `
n = 0
for i in range(args["n"]):
    if SchemaTest_Sleep(duration="0.03s").ok:
        n += 1
rs = parallel([lambda: SchemaTest_Sleep(duration="0.03s") for _ in range(args["n"])])
result = n + len([r for r in rs if r.ok])
`

// crashModel is run i's scripted model: crashSteps turns of one
// SchemaTest.Sleep call each, then an answer. Each turn thinks for 20 ms, so
// kills land inside model turns as well as inside tool calls.
func crashModel(i int) *agenttest.ByTurn {
	var turns []llmtest.ScriptTurn
	for s := range crashSteps() {
		turns = append(turns, llmtest.CallTools("", llm.CallPart(fmt.Sprintf("c%d", s), "SchemaTest_Sleep", map[string]any{"duration": "0.03s"})))
	}
	turns = append(turns, llmtest.SayText(fmt.Sprintf("run %d done", i)))
	return &agenttest.ByTurn{Turns: turns, BeforeReply: func(ctx context.Context, _ int) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
			return nil
		}
	}}
}

// TestCrash runs 5 agent runs and 5 programs on an orchestrator in a separate
// process, kills that process with SIGKILL at random moments (5 times; 20 in
// the full form, with three times the work) and starts it again each time.
// Every run and program must complete with the right result, and every side
// effect (a SchemaTest.Sleep call, counted by call id in the worker) must have
// happened exactly once.
// TOOLFLEET_CRASH_SEED replays a run's kill moments.
func TestCrash(t *testing.T) {
	t.Parallel()
	kills := 5
	if full() {
		kills = 20
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TOOLFLEET_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	began := time.Now()

	stack := devstacktest.Start(t)
	fleet := e2e.Start(t, e2e.Options{NATSURL: stack.NATS.URL()})
	nc, err := nats.Connect(stack.NATS.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	child := runnertest.Start(t, stack, fleet.Addr, crashQueue)

	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	store, err := runstore.OpenStore(ctx, js, runstore.StoreConfig{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	tc := devstacktest.Client(t, stack)
	runs := &agent.Runs{Temporal: tc, Store: store, TaskQueue: crashQueue}
	programs := &program.Programs{Temporal: tc, TaskQueue: crashQueue}
	for i := range crashPrograms {
		if _, err := programs.Start(ctx, program.Input{ProgramID: "crash-prog-" + strconv.Itoa(i), Source: crashProgram,
			ArgsJSON: fmt.Sprintf(`{"n": %d}`, crashSteps()), Tools: []string{"SchemaTest.Sleep"}, Principal: toolcall.Principal{Subject: "crash"}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range crashRuns {
		if _, err := runs.Start(ctx, "crash-run-"+strconv.Itoa(i), agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "crash-" + strconv.Itoa(i)}},
			Tools: []string{"SchemaTest.Sleep"}, IdleTimeout: -1}, toolcall.Principal{Subject: "crash"}, llm.User("sleep a few times")); err != nil {
			t.Fatal(err)
		}
	}

	// The runs' ending events, from the stream's start, so none is missed (the
	// stream is made here as the orchestrator makes it, whichever comes first).
	if _, err := agent.OpenEvents(ctx, nc, js, agent.EventStreamConfig("", true)); err != nil {
		t.Fatal(err)
	}
	ends, err := js.OrderedConsumer(ctx, toolcall.DefaultEventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{toolcall.EventSubjectPrefix + "*." + toolcall.EventCompleted, toolcall.EventSubjectPrefix + "*." + toolcall.EventFailed}})
	if err != nil {
		t.Fatal(err)
	}

	// Kill the orchestrator at random moments while the work runs.
	for range kills {
		time.Sleep(time.Duration(100+rng.IntN(600)) * time.Millisecond)
		child.Kill()
		child.Restart()
	}
	killedAt := time.Since(began)

	// Every program completes with all six calls made.
	var wg sync.WaitGroup
	for i := range crashPrograms {
		id := "crash-prog-" + strconv.Itoa(i)
		wg.Go(func() {
			st, err := programs.Wait(ctx, id)
			if want := strconv.Itoa(2 * crashSteps()); err != nil || st.Status != program.StatusCompleted || st.Output.ResultJSON != want {
				t.Errorf("program %s: %+v %v, want COMPLETED with %s", id, st, err, want)
			}
		})
	}
	// Every run completes with its answer.
	done := map[string]bool{}
	for len(done) < crashRuns {
		msg, err := ends.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("%d of %d runs ended (seed %d): %v", len(done), crashRuns, seed, err)
		}
		ev, err := toolcall.DecodeEvent(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(ev.GetRunId(), "crash-run-") {
			continue
		}
		if ev.GetKind() != toolcall.EventCompleted {
			t.Fatalf("run %s ended %s: %s (seed %d)", ev.GetRunId(), ev.GetKind(), ev.GetMessage(), seed)
		}
		done[ev.GetRunId()] = true
	}
	wg.Wait()
	for i := range crashRuns {
		id := "crash-run-" + strconv.Itoa(i)
		st, err := runs.Get(ctx, id)
		if err != nil || st.Status != agent.StatusCompleted || st.Answer != fmt.Sprintf("run %d done", i) {
			t.Errorf("run %s: %+v %v, want COMPLETED with its answer", id, st, err)
		}
	}

	// Every side effect happened exactly once.
	calls := fleet.SchemaTest.SleepsByCallID()
	want := crashRuns*crashSteps() + crashPrograms*2*crashSteps()
	twice := 0
	for id, n := range calls {
		if n != 1 {
			twice++
			t.Errorf("call %s ran %d times (seed %d)", id, n, seed)
		}
	}
	if len(calls) != want {
		t.Errorf("%d distinct side-effecting calls, want %d (seed %d)", len(calls), want, seed)
	}
	t.Logf("%d agent runs and %d programs, orchestrator SIGKILLed %d times over %s (seed %d): all completed in %s; %d side effects, %d ran more than once",
		crashRuns, crashPrograms, kills, killedAt.Round(time.Millisecond), seed, time.Since(began).Round(time.Millisecond), len(calls), twice)
}
