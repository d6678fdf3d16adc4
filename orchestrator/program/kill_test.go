package program_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/toolfleet/toolfleet/e2e"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// Environment of the orchestrator process TestKill starts (this test binary
// running TestOrchestratorProcess).
const (
	envProcess   = "TOOLFLEET_TEST_ORCHESTRATOR"
	envTemporal  = "TOOLFLEET_TEST_TEMPORAL"
	envNamespace = "TOOLFLEET_TEST_NAMESPACE"
	envGateway   = "TOOLFLEET_TEST_GATEWAY"
	envQueue     = "TOOLFLEET_TEST_QUEUE"
)

// TestOrchestratorProcess is the orchestrator process of TestKill: a program
// worker that runs until it is killed (or, at the latest, for two minutes).
func TestOrchestratorProcess(t *testing.T) {
	if os.Getenv(envProcess) != "1" {
		t.Skip("runs only as TestKill's child process")
	}
	c, err := tclient.Dial(tclient.Options{HostPort: os.Getenv(envTemporal), Namespace: os.Getenv(envNamespace)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gw, err := client.New(os.Getenv(envGateway), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	w := worker.New(c, os.Getenv(envQueue), worker.Options{DeadlockDetectionTimeout: program.DeadlockDetectionTimeout})
	program.Register(w, &program.Activities{Gateway: gw})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	fmt.Println("orchestrator ready")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Minute):
	}
}

// TestKill kills the orchestrator process with SIGKILL while a program waits
// for approval after three calls, starts a new one, approves, and checks that
// the program finishes with every side effect made exactly once.
func TestKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	s := devstacktest.Start(t)
	fleet := e2e.Start(t, e2e.Options{NATSURL: s.NATS.URL()})
	c := devstacktest.Client(t, s)
	const queue = "program-kill"
	env := append(os.Environ(), envProcess+"=1", envTemporal+"="+s.Temporal.Address(), envNamespace+"="+s.Namespace(),
		envGateway+"="+fleet.Addr, envQueue+"="+queue)
	startProcess := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOrchestratorProcess$", "-test.v")
		cmd.Env = env
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		ready := make(chan bool, 1)
		go func() {
			buf := make([]byte, 4096)
			var seen strings.Builder
			for {
				n, err := out.Read(buf)
				seen.Write(buf[:n])
				if strings.Contains(seen.String(), "orchestrator ready") {
					ready <- true
					for err == nil { // keep reading so the child never blocks on stdout
						_, err = out.Read(buf)
					}
					return
				}
				if err != nil {
					ready <- false
					return
				}
			}
		}()
		select {
		case ok := <-ready:
			if !ok {
				t.Fatal("the orchestrator process exited before it was ready")
			}
		case <-time.After(time.Minute):
			t.Fatal("the orchestrator process was not ready within a minute")
		}
		return cmd
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	adds0 := fleet.Calculator.Adds.Load()
	first := startProcess()
	programs := &program.Programs{Temporal: c, TaskQueue: queue}
	const id = "kill-1"
	src := `
total = 0
for n in range(1, 4):
    total = Calculator_Add(a=total, b=n).value["result"]
gate = SchemaTest_Types(s="kill-gate")
for n in range(4, 7):
    total = Calculator_Add(a=total, b=n).value["result"]
result = [total, gate.ok]
`
	if _, err := programs.Start(ctx, program.Input{ProgramID: id, Source: src, Tools: []string{"Calculator.Add", "SchemaTest.Types"}}); err != nil {
		t.Fatal(err)
	}
	for { // until the program waits for approval, after three adds
		st, err := programs.Get(ctx, id)
		if err == nil && st.Status == program.StatusWaitingApproval {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the program never waited for approval: %+v %v", st, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if n := fleet.Calculator.Adds.Load() - adds0; n != 3 {
		t.Fatalf("%d adds before the pause, want 3", n)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	startProcess() // a fresh process replays the program from history
	if err := programs.Decide(ctx, id, toolcall.Decision{CallID: id + "/4", Approved: true, Approver: "tester"}); err != nil {
		t.Fatal(err)
	}
	st, err := programs.Wait(ctx, id)
	if err != nil || st.Status != program.StatusCompleted {
		t.Fatalf("after the kill: %+v %v, want COMPLETED", st, err)
	}
	if st.Output.ResultJSON != "[21,true]" {
		t.Fatalf("result %s, want [21,true]", st.Output.ResultJSON)
	}
	if n := fleet.Calculator.Adds.Load() - adds0; n != 6 {
		t.Fatalf("Calculator.Add ran %d times, want 6: a finished call was repeated", n)
	}
	if ids := fleet.SchemaTest.TypesFor("kill-gate"); len(ids) != 1 {
		t.Fatalf("the approved call ran %d times, want once", len(ids))
	}
}
