// Package runnertest runs an orchestrator in a child process, for tests that
// kill it with SIGKILL and start it again: the child is the test binary run
// again with an environment that tells its TestMain to serve instead.
//
//	func TestMain(m *testing.M) {
//		if runnertest.IsChild() {
//			os.Exit(runnertest.Serve(models()))
//		}
//		os.Exit(m.Run())
//	}
package runnertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"

	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
)

// The child's environment.
const (
	envChild     = "TOOLFLEET_RUNNERTEST_CHILD"
	envNATS      = "TOOLFLEET_RUNNERTEST_NATS"
	envTemporal  = "TOOLFLEET_RUNNERTEST_TEMPORAL"
	envNamespace = "TOOLFLEET_RUNNERTEST_NAMESPACE"
	envGateway   = "TOOLFLEET_RUNNERTEST_GATEWAY"
	envQueue     = "TOOLFLEET_RUNNERTEST_QUEUE"
)

// IsChild reports whether this process is a child started by [Start].
func IsChild() bool { return os.Getenv(envChild) == "1" }

// NATSURL is, in a child, the URL of its parent's NATS server.
func NATSURL() string { return os.Getenv(envNATS) }

// Serve runs the orchestrator with models on the stack, gateway and task
// queue its parent named, until SIGTERM (or the SIGKILL the test is about),
// and returns the process's exit code.
func Serve(models agent.Models) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	o, err := runner.Start(ctx, runner.Config{TemporalAddress: os.Getenv(envTemporal), Namespace: os.Getenv(envNamespace),
		TaskQueue: os.Getenv(envQueue), NATSURL: os.Getenv(envNATS), GatewayAddress: os.Getenv(envGateway),
		Models: models, MemoryStorage: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator child:", err)
		return 1
	}
	<-ctx.Done()
	o.Stop()
	return 0
}

// Child is the orchestrator process of a test, started again after each kill.
type Child struct {
	t   testing.TB
	env []string
	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start starts the child on stack, calling tools through gatewayAddr and
// polling queue. It is stopped (SIGTERM) when the test ends.
func Start(t testing.TB, stack *devstack.Stack, gatewayAddr, queue string) *Child {
	t.Helper()
	c := &Child{t: t, env: append(os.Environ(), envChild+"=1", envNATS+"="+stack.NATS.URL(),
		envTemporal+"="+stack.Temporal.Address(), envNamespace+"="+stack.Namespace(), envGateway+"="+gatewayAddr, envQueue+"="+queue)}
	c.spawn()
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		_ = c.cmd.Wait()
	})
	return c
}

func (c *Child) spawn() {
	c.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = c.env
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.cmd = cmd
	c.mu.Unlock()
}

// Kill kills the child with SIGKILL and waits until it is gone.
func (c *Child) Kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
}

// Restart starts a new child after a Kill.
func (c *Child) Restart() { c.spawn() }
