package pythonworker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/internal/syncbuf"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"
)

// debianPackages are what worker.py imports, from Debian (PyPI is not needed).
var debianPackages = []string{"python3-grpcio", "python3-protobuf"}

// python returns a python3 that can import grpc and google.protobuf. Outside CI a
// missing one skips the test; under CI=true it is installed with apt when the
// test runs as root, and otherwise the test fails saying what to install.
func python(t *testing.T) string {
	t.Helper()
	find := func() (string, error) {
		var errs []error
		// Debian's python3 first: pyenv's or a venv's does not see Debian's packages.
		for _, p := range []string{"/usr/bin/python3", "python3"} {
			path, err := exec.LookPath(p)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out, err := exec.Command(path, "-c", "import grpc, google.protobuf").CombinedOutput()
			if err == nil {
				return path, nil
			}
			errs = append(errs, fmt.Errorf("%s: %s", path, bytes.TrimSpace(out)))
		}
		return "", errors.Join(errs...)
	}
	path, err := find()
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "true" {
		t.Skipf("no python3 with grpcio and protobuf (%v); install %s (Debian) to run it", err, strings.Join(debianPackages, " "))
	}
	if os.Geteuid() == 0 {
		if _, aerr := exec.LookPath("apt-get"); aerr == nil {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 "+strings.Join(debianPackages, " "))
			out, ierr := cmd.CombinedOutput()
			if ierr != nil {
				t.Logf("apt-get install: %v\n%s", ierr, out)
			}
			if path, err = find(); err == nil {
				return path
			}
		}
	}
	t.Fatalf("CI=true and no python3 with grpcio and protobuf (%v): install %s (apt-get install -y %s)",
		err, strings.Join(debianPackages, ", "), strings.Join(debianPackages, " "))
	return ""
}

// pyWorker is calculator.py running as a subprocess.
type pyWorker struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
	err  error
}

var serving = regexp.MustCompile(`worker serving addr=(\S+)`)

// startPython runs calculator.py announcing on natsURL and returns once it
// listens. It is killed at the end of the test if still running.
func startPython(t *testing.T, py, natsURL string, args ...string) *pyWorker {
	t.Helper()
	return startPythonArgs(t, py, append([]string{"calculator.py", "--listen", "127.0.0.1:0", "--nats", natsURL}, args...)...)
}

// startPythonArgs runs py with args (a script and its flags, or -c and a
// program) that start a worker, and returns once it listens.
func startPythonArgs(t *testing.T, py string, args ...string) *pyWorker {
	t.Helper()
	w := &pyWorker{out: &syncbuf.Buffer{}, done: make(chan struct{})}
	w.cmd = exec.Command(py, args...)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	w.cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1")
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.err = w.cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.done
		if t.Failed() {
			t.Logf("python worker output:\n%s", w.out.String())
		}
	})
	deadline := time.After(20 * time.Second)
	for w.addr() == "" {
		select {
		case <-w.done:
			t.Fatalf("calculator.py exited (%v):\n%s", w.err, w.out.String())
		case <-deadline:
			t.Fatalf("calculator.py did not listen within 20s:\n%s", w.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return w
}

func (w *pyWorker) addr() string {
	if m := serving.FindStringSubmatch(w.out.String()); m != nil {
		return m[1]
	}
	return ""
}

// stop sends SIGTERM and waits (up to 20s) for a clean exit.
func (w *pyWorker) stop(t *testing.T) {
	t.Helper()
	w.term(t)
	w.wait(t)
}

func (w *pyWorker) term(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

func (w *pyWorker) wait(t *testing.T) {
	t.Helper()
	select {
	case <-w.done:
		if w.err != nil {
			t.Fatalf("calculator.py after SIGTERM: %v\n%s", w.err, w.out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("calculator.py did not stop within 20s of SIGTERM:\n%s", w.out.String())
	}
}

// fleet starts embedded NATS and a gateway (auth off, on loopback) that learns
// its workers from NATS only.
func fleet(t *testing.T) (*gateway.Gateway, string) {
	t.Helper()
	url := natstest.Start(t).URL()
	return startGateway(t, url), url
}

func startGateway(t *testing.T, natsURL string) *gateway.Gateway {
	t.Helper()
	g, err := gateway.New(t.Context(), gateway.Config{Listen: "127.0.0.1:0", NATSURL: natsURL,
		Auth: gateway.AuthConfig{Disabled: true}, AnnounceSweep: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gatewaytest.Run(t, g)
	return g
}

// TestPythonWorkerAnswersDiscovery: a gateway that starts after the worker asks
// for announcements (toolfleet.registry.discover) and learns the worker at once,
// not at its next heartbeat a minute later.
func TestPythonWorkerAnswersDiscovery(t *testing.T) {
	py := python(t)
	url := natstest.Start(t).URL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	announced := make(chan *nats.Msg, 16)
	if _, err := nc.ChanSubscribe(tool.AnnounceSubject, announced); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	startPython(t, py, url, "--announce-interval", "60")
	select {
	case <-announced: // its first announcement is gone: no gateway heard it
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not announce itself on connecting")
	}
	began := time.Now()
	g := startGateway(t, url)
	waitFor(t, "the gateway to learn the worker from its answer to the probe", 20*time.Second, func() bool { return served(g, "Calculator.Add@1.0.0") })
	t.Logf("the gateway served the Python worker's tools %v after it started", time.Since(began))
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func served(g *gateway.Gateway, id string) bool {
	_, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: id})
	return err == nil
}

func input(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPythonWorker: calculator.py joins the fleet over NATS and is called through
// the gateway on gRPC (sdk/client) and MCP; it serves reflection with the same
// contract as the Go worker (same digest) and health; it sees the call id and the
// deadline the gateway sends; its execution errors arrive as tool errors.
func TestPythonWorker(t *testing.T) {
	py := python(t)
	g, natsURL := fleet(t)
	w := startPython(t, py, natsURL, "--announce-interval", "0.5")
	waitFor(t, "the gateway to serve the Python worker's Calculator.Add", 20*time.Second, func() bool { return served(g, "Calculator.Add@1.0.0") })

	t.Run("reflection and health", func(t *testing.T) {
		cc, err := grpc.NewClient(w.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		c, err := contract.Fetch(t.Context(), cc)
		if err != nil {
			t.Fatalf("reflection: %v", err)
		}
		var got string
		for _, sd := range c.Services {
			if sd.FullName() == "tools.calculator.v1.CalculatorService" {
				if got, err = contract.Digest(sd); err != nil {
					t.Fatal(err)
				}
			}
		}
		want, err := contract.Digest(calculatorv1.File_tools_calculator_v1_calculator_proto.Services().Get(0))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("contract digest over reflection = %q, the Go worker's = %q", got, want)
		}
		h, err := healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health = %v, %v; want SERVING", h, err)
		}
	})

	t.Run("grpc", func(t *testing.T) {
		c, err := client.New(g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		res, err := c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{CallId: "python-add-1", ToolId: "Calculator.Add",
			Input: input(t, map[string]any{"a": 2, "b": 3.5})})
		if err != nil || !res.Success || res.Value.GetStructValue().GetFields()["result"].GetNumberValue() != 5.5 {
			t.Fatalf("Add(2, 3.5) = %+v, %v; want 5.5", res, err)
		}
		// The call id, and the principal (auth is off: anonymous).
		if !regexp.MustCompile(`call_id=python-add-1 deadline_ms=\d+ principal=anonymous `).MatchString(w.out.String()) {
			t.Errorf("the worker did not see the call id python-add-1 and the principal anonymous:\n%s", w.out.String())
		}

		res, err = c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{CallId: "python-eval-1", ToolId: "Calculator.Evaluate",
			Input: input(t, map[string]any{"expression": "(2 + 3) * 4 ^ 2"})})
		if err != nil || !res.Success || res.Value.GetStructValue().GetFields()["result"].GetNumberValue() != 80 {
			t.Fatalf("Evaluate = %+v, %v; want 80", res, err)
		}
		// The line it logged for its caller (the toolfleet-log-bin trailer).
		if len(res.Logs) != 1 || res.Logs[0].GetMessage() != "evaluated 15 characters" ||
			res.Logs[0].GetLevel() != toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_INFO || res.Logs[0].GetTime().AsTime().IsZero() {
			t.Errorf("Evaluate's caller log: %v", res.Logs)
		}
		// The contract gives Evaluate 2s: the deadline the worker sees is at most that.
		m := regexp.MustCompile(`call_id=python-eval-1 deadline_ms=(\d+)`).FindStringSubmatch(w.out.String())
		if m == nil {
			t.Fatalf("no deadline logged for python-eval-1:\n%s", w.out.String())
		}
		if ms, _ := strconv.Atoi(m[1]); ms <= 0 || ms > 2000 {
			t.Errorf("the worker saw a deadline of %dms for Evaluate; want (0, 2000] (the contract's timeout: 2s)", ms)
		}

		res, err = c.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Divide",
			Input: input(t, map[string]any{"a": 1, "b": 0})})
		if err != nil || res.Success || res.Error.GetMessage() != "cannot divide by zero" ||
			!strings.Contains(res.Error.GetAdditionalPromptContent(), "non-zero divisor") {
			t.Fatalf("Divide(1, 0) = %+v, %v; want the tool error \"cannot divide by zero\" with its prompt hint", res, err)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		// The official MCP Go SDK's client, over streamable HTTP.
		cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "python-worker-test", Version: "1"}, nil).
			Connect(t.Context(), &mcpsdk.StreamableClientTransport{Endpoint: "http://" + g.Addr() + "/mcp", MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		tools, err := cs.ListTools(t.Context(), nil)
		if err != nil || !slices.ContainsFunc(tools.Tools, func(tl *mcpsdk.Tool) bool { return tl.Name == "Calculator_Multiply" }) {
			t.Fatalf("MCP tools/list: %v; want Calculator_Multiply among them", err)
		}
		r, err := cs.CallTool(t.Context(), &mcpsdk.CallToolParams{Name: "Calculator_Multiply", Arguments: map[string]any{"a": 6, "b": 7}})
		if err != nil || r.IsError {
			t.Fatalf("MCP tools/call: %+v, %v", r, err)
		}
		if out, ok := r.StructuredContent.(map[string]any); !ok || out["result"] != 42.0 {
			t.Fatalf("MCP Calculator_Multiply(6, 7) = %v; want 42", r.StructuredContent)
		}
	})
}

// TestPythonWorkerLeavesPolitely: two Python replicas serve Calculator; one is
// stopped (SIGTERM) under traffic and no call fails; when the last one stops,
// its tools stay known and calls get a retryable Unavailable until its
// announcement's ttl runs out, then the tool is gone (NotFound).
func TestPythonWorkerLeavesPolitely(t *testing.T) {
	py := python(t)
	g, natsURL := fleet(t)
	const interval = 1.0 // seconds; the announced ttl is 3x
	// Every health a announces, in order.
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	var healths []string
	if _, err := nc.Subscribe(tool.AnnounceSubject, func(m *nats.Msg) {
		var ann toolfleetv1.WorkerAnnouncement
		if protojson.Unmarshal(m.Data, &ann) == nil && ann.GetWorkerId() == "python-a" {
			mu.Lock()
			if n := len(healths); n == 0 || healths[n-1] != ann.GetHealth() {
				healths = append(healths, ann.GetHealth())
			}
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	a := startPython(t, py, natsURL, "--announce-interval", fmt.Sprint(interval), "--worker-id", "python-a")
	b := startPython(t, py, natsURL, "--announce-interval", fmt.Sprint(interval))
	call := func(ctx context.Context) error {
		resp, err := g.Call(ctx, &gateway.Principal{Anonymous: true},
			&toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: input(t, map[string]any{"a": 1, "b": 2})})
		if err == nil && !resp.GetSuccess() {
			err = fmt.Errorf("tool error: %v", resp.GetError())
		}
		return err
	}
	// Round robin: once both replicas have answered a call, the gateway knows both.
	waitFor(t, "calls on both replicas", 20*time.Second, func() bool {
		_ = call(t.Context())
		return strings.Contains(a.out.String(), "call method=") && strings.Contains(b.out.String(), "call method=")
	})
	var calls, failures atomic.Int64
	var firstFailure atomic.Value
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := call(ctx)
				if ctx.Err() != nil {
					return
				}
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	a.term(t)
	waitFor(t, "replica a to drain", 10*time.Second, func() bool { return strings.Contains(a.out.String(), "worker draining") })
	// While it drains (it lingers a second), a call that still reaches it is
	// refused as not run: UNAVAILABLE with the draining trailer.
	cc, err := grpc.NewClient(a.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var trailer metadata.MD
	_, err = calculatorv1.NewCalculatorServiceClient(cc).Add(t.Context(), &calculatorv1.AddRequest{A: 1, B: 2}, grpc.Trailer(&trailer))
	_ = cc.Close()
	if status.Code(err) != codes.Unavailable || len(trailer.Get("toolfleet-draining")) == 0 {
		t.Errorf("a direct call to the draining replica: %v, trailer %v; want Unavailable with toolfleet-draining", err, trailer)
	}
	a.wait(t)
	_ = nc.Flush()
	mu.Lock()
	got := strings.Join(healths, " ")
	mu.Unlock()
	if !strings.HasSuffix(got, "SERVING DRAINING NOT_SERVING") {
		t.Errorf("replica a announced %q; want SERVING, then DRAINING, then NOT_SERVING last", got)
	}
	time.Sleep(500 * time.Millisecond) // traffic after a left: all on b
	cancel()
	wg.Wait()
	if calls.Load() < 10 || failures.Load() != 0 {
		t.Fatalf("%d of %d calls failed while one of two replicas left (first: %v)", failures.Load(), calls.Load(), firstFailure.Load())
	}
	if !strings.Contains(a.out.String(), "worker draining") {
		t.Errorf("replica a did not drain:\n%s", a.out.String())
	}
	t.Logf("%d calls while a replica left, none failed", calls.Load())

	b.stop(t)
	stopped := time.Now()
	// The last replica is gone but its announcement holds: retryable, not NotFound.
	err = call(t.Context())
	if code := gateway.CodeOf(err); code != codes.Unavailable {
		t.Fatalf("a call right after the last replica left: %v (%v); want Unavailable (retryable)", err, code)
	}
	waitFor(t, "the tool to go once the ttl ran out", 20*time.Second, func() bool { return !served(g, "Calculator.Add@1.0.0") })
	if gone := time.Since(stopped); gone > 3*time.Duration(interval*float64(time.Second))+5*time.Second {
		t.Errorf("the tool went %v after the last replica; want about the ttl (%vs)", gone, 3*interval)
	}
	if err := call(t.Context()); gateway.CodeOf(err) != codes.NotFound {
		t.Fatalf("a call after the ttl: %v; want NotFound", err)
	}
}
