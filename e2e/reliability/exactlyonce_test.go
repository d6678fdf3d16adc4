package reliability

// Exactly once under every fault (issue 31): the fleet as separate processes
// (fleetproc_test.go), gateways and workers killed with SIGKILL while callers
// make non-idempotent KV.Increment calls, each logical call with its own
// call_id and its own counter key, retried with the same call_id until it
// gets a definite answer. At the end every counter is read from the KV
// worker's bucket and each call is classified (tallyCalls); the hard
// invariants are in checkCalls.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// Classes of a logical call's final answer.
const (
	classSuccess    = "success"         // answered with the tool's result
	classMayHaveRun = "may have run"    // ALREADY_EXISTS, "may have run"
	classDidNotRun  = "did not run"     // still UNAVAILABLE (or alike) after every retry
	classNotFound   = "NOT_FOUND"       // the gateway did not know the tool
	classOther      = "other"           // any other definite answer (an execution error, another code)
	classRunCall    = "agent run calls" // a run's calls: their answers went to the model
)

// logicalCall is one KV.Increment the callers want to happen once: its own
// call_id and its own counter key.
type logicalCall struct {
	source   string // direct, program, run
	callID   string
	key      string
	class    string
	detail   string // the last error or the failure's message
	attempts int
}

// retryable says whether a caller tries the same call_id again after err:
// the answer is not definite (the gateway went away, the store was
// unreachable, an earlier attempt still holds the call).
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Canceled:
		return true
	}
	return false
}

// classify is the class of a definite answer (err not retryable).
func classify(resp *toolfleetv1.CallToolResponse, err error) (class, detail string) {
	switch {
	case err == nil && resp.GetSuccess():
		return classSuccess, ""
	case err == nil:
		return classOther, "execution error: " + resp.GetError().GetMessage()
	case status.Code(err) == codes.AlreadyExists && strings.Contains(err.Error(), "may have run"):
		return classMayHaveRun, err.Error()
	case status.Code(err) == codes.NotFound:
		return classNotFound, err.Error()
	}
	return classOther, err.Error()
}

// callUntilDefinite makes c's KV.Increment through the gateways, first
// gws[first], then the next one after each answer that is not definite,
// with the same call_id, until a definite answer or until it has tried for
// callPatience (then classDidNotRun).
func callUntilDefinite(ctx context.Context, gws []toolfleetv1.ToolGatewayServiceClient, first int, c *logicalCall, opts ...grpc.CallOption) {
	const callPatience, attemptTimeout = 60 * time.Second, 20 * time.Second
	ctx, cancel := context.WithTimeout(ctx, callPatience)
	defer cancel()
	req := &toolfleetv1.CallToolRequest{CallId: c.callID, ToolId: "KV.Increment", Input: mustStruct(map[string]any{"key": c.key})}
	backoff := 50 * time.Millisecond
	for i := first; ; i++ {
		c.attempts++
		actx, acancel := context.WithTimeout(ctx, attemptTimeout)
		resp, err := gws[i%len(gws)].CallTool(actx, req, opts...)
		acancel()
		if err == nil || !retryable(err) {
			c.class, c.detail = classify(resp, err)
			return
		}
		c.detail = err.Error()
		select {
		case <-ctx.Done():
			c.class = classDidNotRun
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// withToken sends a bearer token with each call.
type withToken string

func (w withToken) ctx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+string(w))
}

// token mints an HS256 token for subject with tools:call.
func token(t *testing.T, secret []byte, subject string) withToken {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": subject, "scope": "tools:call",
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return withToken(s)
}

// procFleet is the fleet as processes on an embedded NATS (and Temporal).
type procFleet struct {
	natsURL  string
	js       jetstream.JetStream
	gateways []*proc
	gwConns  []*grpc.ClientConn
	gws      []toolfleetv1.ToolGatewayServiceClient
	workers  []*proc
	orch     *proc
	// scriptDir holds the agent runs' scripted models (scripted:NAME.yaml).
	scriptDir string
	queue     string
}

type procFleetOptions struct {
	gateways, workers int
	// stack, when set, also runs the orchestrator on its Temporal.
	stack *devstack.Stack
	// natsURL is the NATS without a stack.
	natsURL string
	// gatewayArgs are added to every gateway's flags (default
	// --auth-disabled).
	gatewayArgs []string
	// authCtx adds a caller's token to the start's readiness checks.
	authCtx func(context.Context) context.Context
}

// startProcFleet starts the processes and waits until every gateway serves
// KV.Increment.
func startProcFleet(ctx context.Context, t *testing.T, o procFleetOptions) *procFleet {
	t.Helper()
	bins := fleetBinaries(t)
	f := &procFleet{natsURL: o.natsURL, scriptDir: t.TempDir(), queue: "exactly-once"}
	if o.stack != nil {
		f.natsURL = o.stack.NATS.URL()
	}
	nc, err := nats.Connect(f.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if f.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	// Every process sizes its JetStream assets with the small dev profile.
	env := []string{"TOOLFLEET_JS_PROFILE=dev", "TOOLFLEET_JS_OVERRIDES=", "TOOLFLEET_GATEWAY_TOKEN="}
	for i := range o.workers {
		f.workers = append(f.workers, startProc(t, fmt.Sprintf("kv-%d", i), filepath.Join(bins, "kv"), env,
			"--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--nats", f.natsURL, "--log-level", "warn"))
	}
	gwArgs := o.gatewayArgs
	if gwArgs == nil {
		gwArgs = []string{"--auth-disabled"}
	}
	for i := range o.gateways {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		args := append([]string{"--listen", addr, "--nats-url", f.natsURL, "--log-format", "text", "--log-level", "warn",
			"--shutdown-timeout", "2s"}, gwArgs...)
		f.gateways = append(f.gateways, startProc(t, fmt.Sprintf("gateway-%d", i), filepath.Join(bins, "gateway"), env, args...))
		cc := dialGateway(t, addr)
		f.gwConns = append(f.gwConns, cc)
		f.gws = append(f.gws, toolfleetv1.NewToolGatewayServiceClient(cc))
	}
	wctx := ctx
	if o.authCtx != nil {
		wctx = o.authCtx(ctx)
	}
	for _, cc := range f.gwConns {
		waitTool(wctx, t, cc, "KV.Increment")
	}
	if o.stack != nil {
		f.orch = startProc(t, "orchestrator", filepath.Join(bins, "orchestrator"), env,
			"--temporal-address", o.stack.Temporal.Address(), "--namespace", o.stack.Namespace(), "--nats-url", f.natsURL,
			"--gateway-address", f.gwConns[0].Target(), "--task-queue", f.queue, "--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			"--metrics-listen=", "--script-dir", f.scriptDir, "--principal-max-bytes", "none", "--principal-max-runs", "0",
			"--log-level", "warn")
	}
	return f
}

// killWork is the work of a kill test: direct callers (back to back, each
// starting at the next gateway), programs and agent runs, all making
// KV.Increment calls, while kill kills (and restarts) a process at random
// moments.
type killWork struct {
	kills, callers, programSteps, runSteps int
}

func killWorkload() killWork {
	if full() {
		return killWork{kills: 10, callers: 12, programSteps: 12, runSteps: 6}
	}
	return killWork{kills: 3, callers: 6, programSteps: 6, runSteps: 3}
}

// exactlyOnceProgram makes args["n"] KV.Increment calls on keys
// args["prefix"].0, .1, ... and returns each call's outcome: "ok" or its
// error message.
const exactlyOnceProgram = `
out = []
for i in range(args["n"]):
    r = KV_Increment(key=args["prefix"] + "." + str(i))
    out.append("ok" if r.ok else r.error.message)
result = out
`

// runKillTest runs w on f: before each kill it starts a program and an agent
// run, waits 100–700 ms, then kill(k) kills a process and starts it again;
// direct callers call all along. Then it waits for everything (bounded),
// reads the counters, logs the table and checks the invariants.
func runKillTest(ctx context.Context, t *testing.T, title string, stack *devstack.Stack, f *procFleet, w killWork, kill func(k int)) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TOOLFLEET_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	tc := devstacktest.Client(t, stack)
	programs := &program.Programs{Temporal: tc, TaskQueue: f.queue}
	var store *runstore.Store
	for store == nil {
		// The orchestrator makes its buckets as it starts.
		s, err := runstore.BindStore(ctx, f.js, runstore.StoreConfig{})
		if err == nil {
			store = s
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the orchestrator's buckets: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	runs := &agent.Runs{Temporal: tc, Store: store, TaskQueue: f.queue}

	var (
		mu    sync.Mutex
		calls []*logicalCall
		wg    sync.WaitGroup
		stop  = make(chan struct{})
	)
	add := func(c *logicalCall) {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
	}
	// Direct callers: one logical call after another, each with its own
	// call_id and key, retried on the next gateway until definite.
	for c := range w.callers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				lc := &logicalCall{source: "direct", callID: fmt.Sprintf("direct-%d-%d", c, i), key: fmt.Sprintf("direct.%d.%d", c, i)}
				callUntilDefinite(ctx, f.gws, c+i, lc)
				add(lc)
				// Back to back: a kill lands inside calls (between the tool's
				// effect and its stored answer) as often as can be.
			}
		})
	}

	var programIDs, runIDs []string
	began := time.Now()
	for k := range w.kills {
		pid, rid := fmt.Sprintf("eo-prog-%d", k), fmt.Sprintf("eo-run-%d", k)
		if _, err := programs.Start(ctx, program.Input{ProgramID: pid, Source: exactlyOnceProgram,
			ArgsJSON: fmt.Sprintf(`{"n": %d, "prefix": "prog.%d"}`, w.programSteps, k), Tools: []string{"KV.Increment"},
			Principal: toolcall.Principal{Subject: "exactly-once"}}); err != nil {
			t.Fatal(err)
		}
		programIDs = append(programIDs, pid)
		var script strings.Builder
		script.WriteString("turns:\n")
		for s := range w.runSteps {
			fmt.Fprintf(&script, "  - calls:\n      - tool: KV.Increment\n        args: {key: run.%d.%d}\n", k, s)
		}
		script.WriteString("  - text: counted\n")
		name := fmt.Sprintf("run-%d.yaml", k)
		if err := os.WriteFile(filepath.Join(f.scriptDir, name), []byte(script.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := runs.Start(ctx, rid, agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: llm.ProviderScripted, Name: name}},
			Tools: []string{"KV.Increment"}, IdleTimeout: -1}, toolcall.Principal{Subject: "exactly-once"}, llm.User("count")); err != nil {
			t.Fatal(err)
		}
		runIDs = append(runIDs, rid)
		time.Sleep(time.Duration(100+rng.IntN(600)) * time.Millisecond)
		kill(k)
	}
	killedIn := time.Since(began)
	time.Sleep(500 * time.Millisecond) // calls after the last restart
	close(stop)
	wg.Wait()

	// Programs: each call's outcome is in the result.
	for k, id := range programIDs {
		st, err := programs.Wait(ctx, id)
		if err != nil || st.Status != program.StatusCompleted {
			t.Errorf("program %s: %+v %v, want COMPLETED (seed %d)", id, st, err, seed)
		}
		var out []string
		if st != nil && st.Output != nil {
			_ = json.Unmarshal([]byte(st.Output.ResultJSON), &out)
		}
		for i := range w.programSteps {
			lc := &logicalCall{source: "program", callID: fmt.Sprintf("%s/%d", id, i), key: fmt.Sprintf("prog.%d.%d", k, i), class: classDidNotRun}
			if i < len(out) {
				switch o := out[i]; {
				case o == "ok":
					lc.class = classSuccess
				case strings.Contains(o, "may have run"):
					lc.class, lc.detail = classMayHaveRun, o
				case strings.Contains(strings.ToLower(o), "not found"):
					lc.class, lc.detail = classNotFound, o
				default:
					lc.class, lc.detail = classOther, o
				}
			}
			add(lc)
		}
	}
	// Agent runs: their calls' answers went to the model; counters only.
	for k, id := range runIDs {
		var st agent.RunState
		if err := tc.GetWorkflow(ctx, id, "").Get(ctx, &st); err != nil || st.Status != agent.StatusCompleted {
			t.Errorf("run %s: %s %v, want COMPLETED (seed %d)", id, st.Status, err, seed)
		}
		for s := range w.runSteps {
			add(&logicalCall{source: "run", callID: fmt.Sprintf("%s/%d", id, s), key: fmt.Sprintf("run.%d.%d", k, s), class: classRunCall})
		}
	}
	count := counters(ctx, t, f.js, calls)
	tallyCalls(t, fmt.Sprintf("%s: %d kills over %s (seed %d)", title, w.kills, killedIn.Round(time.Millisecond), seed), calls, count)
	checkCalls(ctx, t, f.js, calls, count)
}

// TestGatewayKill kills one of two gateway processes with SIGKILL (3 times;
// full: 10) while direct callers, programs and agent runs (scripted models
// on a separate orchestrator process) make KV.Increment calls; each killed
// gateway is started again on its address. Every call must run at most once,
// every answered success exactly once, and no known tool may be NOT_FOUND.
func TestGatewayKill(t *testing.T) {
	t.Parallel()

	w := killWorkload()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	stack := devstacktest.Start(t)
	f := startProcFleet(ctx, t, procFleetOptions{gateways: 2, workers: 1, stack: stack})
	runKillTest(ctx, t, "gateway kill", stack, f, w, func(k int) {
		g := f.gateways[k%len(f.gateways)]
		g.Kill()
		g.Start()
	})
}

// TestWorkerKill kills one of two KV worker processes with SIGKILL (3 times;
// full: 10) under the same work as TestGatewayKill, and starts it again on
// its address each time. A direct call refused as "may have run" that never
// ran (counter 0) must be one a worker had recorded as started, by the call
// journal's record (workerStarted).
func TestWorkerKill(t *testing.T) {
	t.Parallel()
	w := killWorkload()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	stack := devstacktest.Start(t)
	f := startProcFleet(ctx, t, procFleetOptions{gateways: 1, workers: 2, stack: stack})
	runKillTest(ctx, t, "worker kill", stack, f, w, func(k int) {
		p := f.workers[k%len(f.workers)]
		p.Kill()
		p.Start()
	})
}

// TestStoreFill: tenant A makes one KV.Increment with call_id X and gets its
// answer; tenant B then stores 45 results of about 900 KiB (KV.Get of a big
// value, its own call ids) in a gateway whose idempotency store holds 8 MiB;
// A's retry of X must be answered from the store, not run again: the counter
// stays 1. B's calls that do not fit run unstored (KV.Get is read-only; a
// side-effecting call would be refused with RESOURCE_EXHAUSTED).
func TestStoreFill(t *testing.T) {
	t.Parallel()

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	srv := natstest.Start(t)
	secret := []byte("exactly-once-test-secret-of-32-bytes-or-more")
	secretFile := filepath.Join(t.TempDir(), "hs256")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := token(t, secret, "tenant-a"), token(t, secret, "tenant-b")
	f := startProcFleet(ctx, t, procFleetOptions{gateways: 1, workers: 1, natsURL: srv.URL(),
		// Without store shares, so that B fills the whole store (with them, B
		// fills only its share: services/gateway TestStoreShareCalls).
		gatewayArgs: []string{"--jwt-hs256-secret-file", secretFile, "--js-overrides", "toolfleet_calls.max-bytes=8MiB", "--store-share", "none"}, authCtx: a.ctx})
	kv, err := f.js.KeyValue(ctx, "agent_memory")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "big", []byte(strings.Repeat("x", 900<<10))); err != nil {
		t.Fatal(err)
	}
	gw := f.gws[0]
	incr := &toolfleetv1.CallToolRequest{CallId: "x", ToolId: "KV.Increment", Input: mustStruct(map[string]any{"key": "tenant-a.x"})}
	first, err := gw.CallTool(a.ctx(ctx), incr)
	if err != nil || !first.GetSuccess() {
		t.Fatalf("tenant A's call: %v %v", first, err)
	}

	var stored, refused, other int
	var others []string
	for i := range 45 {
		resp, err := gw.CallTool(b.ctx(ctx), &toolfleetv1.CallToolRequest{CallId: fmt.Sprintf("b-%d", i), ToolId: "KV.Get",
			Input: mustStruct(map[string]any{"key": "big"})})
		switch {
		case err == nil && resp.GetSuccess():
			stored++
		case status.Code(err) == codes.ResourceExhausted:
			refused++
		default:
			other++
			if len(others) < 3 {
				others = append(others, fmt.Sprint(resp.GetError().GetMessage(), err))
			}
		}
	}

	retry, err := gw.CallTool(a.ctx(ctx), incr)
	count := counters(ctx, t, f.js, []*logicalCall{{key: "tenant-a.x"}})["tenant-a.x"]
	t.Logf("store fill: tenant B's 45 results of 900 KiB in an 8 MiB store: %d answered, %d refused (RESOURCE_EXHAUSTED), %d otherwise %v; "+
		"tenant A's retry of its KV.Increment: success %v (%v), %v; counter %d",
		stored, refused, other, others, retry.GetSuccess(), retry.GetValue().GetStructValue().AsMap(), err, count)
	if count != 1 {
		t.Errorf("tenant A's KV.Increment ran %d times: its stored answer was evicted by tenant B's results", count)
	}
	if err != nil || !retry.GetSuccess() {
		t.Errorf("tenant A's retry of a call that succeeded: %v %v, want its stored answer", retry, err)
	}
}
