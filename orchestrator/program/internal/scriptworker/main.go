// Command scriptworker is a program worker without tools, for the tests
// that measure a worker process's peak memory (VmHWM): the peak tests build
// it without the race detector, whose shadow memory would be most of what
// they measure, and run it as a child process.
//
//	scriptworker -temporal HOST:PORT -namespace NS -queue Q [-script-memory BYTES]
//
// It prints "script worker ready" once it polls, and stops on SIGTERM or
// after two minutes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/toolfleet/toolfleet/orchestrator/program"
)

func main() {
	addr := flag.String("temporal", "127.0.0.1:7233", "Temporal frontend host:port")
	ns := flag.String("namespace", "default", "Temporal namespace")
	queue := flag.String("queue", "", "task queue")
	mem := flag.Int64("script-memory", 0, "script memory in bytes (program.Config.ScriptMemory; 0: none)")
	flag.Parse()
	if err := run(*addr, *ns, *queue, *mem); err != nil {
		fmt.Fprintln(os.Stderr, "scriptworker:", err)
		os.Exit(1)
	}
}

func run(addr, ns, queue string, mem int64) error {
	c, err := tclient.Dial(tclient.Options{HostPort: addr, Namespace: ns})
	if err != nil {
		return err
	}
	defer c.Close()
	if mem != 0 {
		program.SetAdmission(program.Config{ScriptMemory: mem}.Admission())
	}
	w := worker.New(c, queue, worker.Options{DeadlockDetectionTimeout: program.DeadlockDetectionTimeout})
	program.Register(w, &program.Activities{})
	if err := w.Start(); err != nil {
		return err
	}
	defer w.Stop()
	fmt.Println("script worker ready")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Minute):
	}
	return nil
}
