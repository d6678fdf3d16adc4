package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/internal/syncbuf"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// startGatewayBinary builds cmd/gateway and runs it with args on a free
// loopback port until the test ends; it returns the address and the
// process's stderr.
func startGatewayBinary(ctx context.Context, t *testing.T, args ...string) (string, *syncbuf.Buffer) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gateway")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../gateway")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ../gateway: %v\n%s", err, out)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	stderr := &syncbuf.Buffer{}
	cmd := exec.Command(bin, append([]string{"--listen", addr, "--log-format", "text", "--log-level", "warn"}, args...)...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("gateway stderr:\n%s", stderr.String())
		}
	})
	return addr, stderr
}

// waitServiceServing waits (bounded by ctx) until the gateway at addr reports
// service SERVING over grpc.health.v1.
func waitServiceServing(ctx context.Context, t *testing.T, addr, service string) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	for {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s at %s never became SERVING: %v %v", service, addr, resp, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// userToken mints alice's token with scopes, signed with secret.
func userToken(t *testing.T, secret string, scopes ...string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "scope": strings.Join(scopes, " "),
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startOrchestrator runs an orchestrator on stack calling tools through
// gatewayAddr with its own token minted from secret, as `toolfleet dev
// --gateway-jwt-secret` does.
func startOrchestrator(ctx context.Context, t *testing.T, stack *devstack.Stack, gatewayAddr, secret string, models agent.Models) *runner.Orchestrator {
	t.Helper()
	o, err := runner.Start(ctx, runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		NATSURL: stack.NATS.URL(), GatewayAddress: gatewayAddr, GatewayTokenSource: devTokenSource([]byte(secret)),
		Models: models, MemoryStorage: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestFrontDoor runs the production gateway binary (cmd/gateway) with auth on,
// in front of the bundled workers, with an orchestrator that calls tools
// through it with its own token; the real CLI then does what it does against
// `toolfleet dev`: an agent run that waits for approval, approved and watched,
// and programs, one of which waits for approval for longer than the 5 s after
// which `program run --watch` used to die, across an orchestrator restart.
func TestFrontDoor(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	stack := devstacktest.Start(t)
	// The bundled workers announce themselves on NATS (the fleet's own
	// gateway is not used here).
	f, err := startFleet(ctx, fleetConfig{Host: "127.0.0.1", NATSURL: stack.NATS.URL(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.stop() })
	if err := f.waitToolkits(ctx, f.Toolkits...); err != nil {
		t.Fatal(err)
	}
	secret := strings.Repeat("front-door-secret-", 3)
	secretFile := filepath.Join(t.TempDir(), "hs256")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := startGatewayBinary(ctx, t, "--nats-url", stack.NATS.URL(), "--temporal-address", stack.Temporal.Address(),
		"--namespace", stack.Namespace(), "--jwt-hs256-secret-file", secretFile,
		"--model-endpoint", "none=http://127.0.0.1:*")

	models := agent.NewResolver()
	models.Register("frontdoor", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("Multiplying.", llm.CallPart("c1", "Calculator_Multiply", map[string]any{"a": 6, "b": 7})),
		llmtest.SayText("6 times 7 is 42."),
	}})
	o := startOrchestrator(ctx, t, stack, addr, secret, models)
	var oMu sync.Mutex
	t.Cleanup(func() { oMu.Lock(); o.Stop(); oMu.Unlock() })
	waitServiceServing(ctx, t, addr, "toolfleet.v1.AgentService")
	waitServiceServing(ctx, t, addr, "toolfleet.v1.ProgramService")

	token := userToken(t, secret, "runs:start", "runs:read", "runs:approve", "programs:run", "programs:read", "programs:approve", "tools:call")
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand()
		root.SetArgs(append(args, "--gateway", addr, "--token", token))
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	// pending polls get until the run or program has a call waiting for approval.
	pending := func(get func() (string, error), msg withPending) string {
		t.Helper()
		for {
			out, err := get()
			if err == nil {
				if err := protojson.Unmarshal([]byte(out), msg); err != nil {
					t.Fatalf("get printed no JSON (%v):\n%s", err, out)
				}
				if p := msg.GetPendingApprovals(); len(p) > 0 {
					return p[0].GetCallId()
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no call waited for approval: %v\n%s", err, out)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}

	t.Run("agent run, approve, watch", func(t *testing.T) {
		out, err := run("agent", "run", "--model", "scripted:frontdoor", "--run-id", "fd-run", "--tools", "Calculator.*",
			"--approve-tools", "Calculator.Multiply", "What is 6 times 7?")
		if err != nil || strings.TrimSpace(out) != "fd-run" {
			t.Fatalf("agent run: %v\n%s", err, out)
		}
		got := &toolfleetv1.GetRunResponse{}
		call := pending(func() (string, error) { return run("agent", "get", "fd-run") }, got)
		if out, err := run("approvals", "list", "-o", "text"); err != nil || !tableHas(out, []string{"KIND", "RUN OR PROGRAM", "CALL ID", "TOOL", "WAITS FOR", "WAITING SINCE"}, "run") ||
			!strings.Contains(strings.Join(strings.Fields(out), " "), "run fd-run "+call+" Calculator.Multiply") ||
			!strings.Contains(grepLines(out, "run "), " approval ") {
			t.Errorf("approvals list -o text: %v, want the run's call\n%s", err, out)
		}
		if out, err := run("approvals", "list", "-o", "json"); err != nil || !strings.Contains(out, `"runId": "fd-run"`) || !strings.Contains(out, `"callId": "`+call+`"`) {
			t.Errorf("approvals list -o json: %v, want the run's call\n%s", err, out)
		}
		if out, err := run("agent", "get", "fd-run", "-o", "text"); err != nil || !strings.Contains(out, "toolfleet agent approve CALL_ID") || !strings.Contains(out, call) {
			t.Errorf("agent get -o text: %v, want the pending call and how to decide it\n%s", err, out)
		}
		if out, err := run("agent", "approve", call); err != nil || strings.TrimSpace(out) != "approved "+call+" (run fd-run)" {
			t.Fatalf("agent approve CALL_ID: %v, want a confirmation line\n%s", err, out)
		}
		out, err = run("agent", "watch", "fd-run")
		if err != nil {
			t.Fatalf("agent watch: %v\n%s", err, out)
		}
		for _, want := range []string{"→ Calculator.Multiply", `{"result":42}`, "✓ 6 times 7 is 42."} {
			if !strings.Contains(out, want) {
				t.Errorf("watch output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("operators find the run in Temporal", func(t *testing.T) {
		// The run above answered and waits for a follow-up message: it is
		// "answered", not an anonymous RUNNING, and carries who, what and
		// which tools, readable by a visibility query and in its memo.
		tc := devstacktest.Client(t, stack)
		query := "ToolfleetPrincipal = 'alice' AND ToolfleetKind = 'run' AND ToolfleetModel = 'scripted:frontdoor' " +
			"AND ToolfleetStatus = 'answered' AND ToolfleetTools = 'Calculator.Multiply' AND ExecutionStatus = 'Running'"
		for {
			resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: stack.Namespace(), Query: query})
			if err != nil {
				t.Fatal(err)
			}
			if ex := resp.GetExecutions(); len(ex) == 1 && ex[0].GetExecution().GetWorkflowId() == "fd-run" {
				memo := ex[0].GetMemo().GetFields()["model"]
				var model string
				if err := converter.GetDefaultDataConverter().FromPayload(memo, &model); err != nil || model != "scripted:frontdoor" {
					t.Errorf("memo model = %q (%v), want scripted:frontdoor", model, err)
				}
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no run found by %s", query)
			case <-time.After(200 * time.Millisecond):
			}
		}
	})

	t.Run("a model key sent to an unbound URL is refused at StartRun", func(t *testing.T) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		for _, spec := range []*toolfleetv1.ModelSpec{
			{Provider: "openai-compatible", Name: "m", BaseUrl: "http://169.254.169.254/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_TEAM"},
			{Provider: "openai-compatible", Name: "m", BaseUrl: "http://10.0.0.1:8000/v1"}, // keyless, not bound to none
		} {
			_, err := toolfleetv1.NewAgentServiceClient(conn).StartRun(cctx, &toolfleetv1.StartRunRequest{ModelSpec: spec,
				RunId: "fd-evil", Messages: []*toolfleetv1.Message{{Role: toolfleetv1.Role_ROLE_USER,
					Parts: []*toolfleetv1.Part{{Kind: &toolfleetv1.Part_Text{Text: "hi"}}}}}})
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--model-endpoint") {
				t.Errorf("StartRun to %s = %v, want PERMISSION_DENIED naming --model-endpoint", spec.GetBaseUrl(), err)
			}
		}
	})

	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sum := write("sum.star", "total = 0\nfor n in args[\"numbers\"]:\n    total = Calculator_Add(a=total, b=n).value[\"result\"]\nresult = {\"total\": total}\n")
	del := write("del.star", "call(\"KV.Put\", key=\"frontdoor.k\", value=\"v\")\nr = call(\"KV.Delete\", key=\"frontdoor.k\")\nresult = {\"deleted\": r.ok}\n")

	t.Run("program run waits for the result", func(t *testing.T) {
		out, err := run("program", "run", sum, "--arg", "numbers=[1,2,3]", "--timeout", "2m")
		if err != nil || !strings.Contains(out, `"total": 6`) {
			t.Fatalf("program run: %v\n%s", err, out)
		}
	})

	t.Run("program run --timeout returns while it waits for approval", func(t *testing.T) {
		out, err := run("program", "run", del, "--id", "fd-timeout", "--timeout", "3s")
		if err == nil || !strings.Contains(out, "still running after --timeout 3s") {
			t.Fatalf("program run: %v, want the timeout said\n%s", err, out)
		}
		if out, err := run("program", "cancel", "fd-timeout"); err != nil || !strings.Contains(out, "cancelling program fd-timeout") {
			t.Fatalf("program cancel: %v\n%s", err, out)
		}
		// Cancelling is a request the workflow acts on a moment later.
		for {
			out, err = run("program", "get", "fd-timeout")
			if err == nil && strings.Contains(out, "PROGRAM_STATUS_CANCELED") {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("program get after cancel: %v\n%s", err, out)
			case <-time.After(200 * time.Millisecond):
			}
		}
	})

	t.Run("program run --watch outlives a quiet approval and an orchestrator restart", func(t *testing.T) {
		type result struct {
			out string
			err error
		}
		done := make(chan result, 1)
		go func() { // owned by this subtest: it waits for it below
			out, err := run("program", "run", del, "--id", "fd-approve", "--watch", "--timeout", "3m")
			done <- result{out, err}
		}()
		got := &toolfleetv1.GetProgramResponse{}
		call := pending(func() (string, error) { return run("program", "get", "fd-approve") }, got)
		// Quiet for longer than the 5 s after which the watch used to end.
		time.Sleep(6 * time.Second)
		// The orchestrator restarts: nothing answers the program's query meanwhile.
		oMu.Lock()
		o.Stop()
		time.Sleep(2 * time.Second)
		o = startOrchestrator(ctx, t, stack, addr, secret, models)
		oMu.Unlock()
		select {
		case r := <-done:
			t.Fatalf("program run --watch ended before the approval: %v\n%s", r.err, r.out)
		default:
		}
		var items []map[string]any
		if out, err := run("approvals", "list"); err != nil || json.Unmarshal([]byte(out), &items) != nil ||
			!slices.ContainsFunc(items, func(m map[string]any) bool {
				return m["kind"] == "program" && m["programId"] == "fd-approve" && m["callId"] == call && strings.HasPrefix(m["toolId"].(string), "KV.Delete@")
			}) {
			t.Errorf("approvals list (JSON): %v, want the program's call\n%s", err, out)
		}
		// The older form, PROGRAM_ID CALL_ID, still works.
		if out, err := run("program", "approve", "fd-approve", call); err != nil || strings.TrimSpace(out) != "approved "+call+" (program fd-approve)" {
			t.Fatalf("program approve: %v, want a confirmation line\n%s", err, out)
		}
		var r result
		select {
		case r = <-done:
		case <-ctx.Done():
			t.Fatal("program run --watch did not return")
		}
		if r.err != nil {
			t.Fatalf("program run --watch: %v\n%s", r.err, r.out)
		}
		for _, want := range []string{"approval.requested KV.Delete", "approval.decided", "completed", `"deleted": true`} {
			if !strings.Contains(r.out, want) {
				t.Errorf("output lacks %q:\n%s", want, r.out)
			}
		}
		if out, err := run("program", "watch", "fd-approve"); err != nil || !strings.Contains(out, `"deleted": true`) {
			t.Errorf("program watch of an ended program: %v\n%s", err, out)
		}
	})

	t.Run("program list shows the caller's programs only", func(t *testing.T) {
		out, err := run("program", "list", "-o", "text")
		if err != nil || !tableHas(out, []string{"PROGRAM ID", "STATE", "STATUS", "STARTED"}, "fd-approve") {
			t.Fatalf("program list -o text: %v, want a header row and fd-approve\n%s", err, out)
		}
		for _, want := range []string{"fd-approve Completed completed ", "fd-timeout Canceled canceled "} {
			if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
				t.Errorf("program list lacks %q:\n%s", want, out)
			}
		}
		out, err = run("program", "list", "-o", "json")
		var progs []map[string]any
		if err != nil || json.Unmarshal([]byte(out), &progs) != nil || !slices.ContainsFunc(progs, func(m map[string]any) bool { return m["programId"] == "fd-approve" }) {
			t.Errorf("program list -o json: %v\n%s", err, out)
		}
		if out, err := run("program", "get", "fd-approve", "-o", "text"); err != nil || !strings.Contains(out, "Status:") ||
			!strings.Contains(out, "completed") || !strings.Contains(out, "Result:") || !strings.Contains(out, `"deleted": true`) {
			t.Errorf("program get -o text: %v\n%s", err, out)
		}
		bob, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "scope": "programs:read",
			"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		root := newRootCommand()
		root.SetArgs([]string{"program", "list", "--gateway", addr, "--token", bob})
		root.SetOut(&buf)
		root.SetErr(&buf)
		if err := root.ExecuteContext(ctx); err != nil || strings.Contains(buf.String(), "fd-") {
			t.Errorf("another principal's program list: %v\n%s", err, buf.String())
		}
	})
}

// withPending is GetRunResponse and GetProgramResponse.
type withPending interface {
	proto.Message
	GetPendingApprovals() []*toolfleetv1.PendingApproval
}
