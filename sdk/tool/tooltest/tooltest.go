// Package tooltest runs a toolkit worker for one test: a real tool.Worker serving on a
// free loopback port, stopped (and checked for a clean stop) when the test ends.
//
//	conn := tooltest.Serve(t, tool.Config{Name: "calculator"}, func(w *tool.Worker) {
//		calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
//	})
//	client := calculatorv1.NewCalculatorServiceClient(conn)
package tooltest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolfleet/toolfleet/sdk/tool"
)

// ReadyTimeout bounds the wait for a worker to listen, and StopTimeout its stop.
const (
	ReadyTimeout = 10 * time.Second
	StopTimeout  = 20 * time.Second
)

// Start runs a worker built from cfg, with register adding its services, and returns
// it once it listens. cfg.Listen defaults to a free loopback port and cfg.Logger to
// a discarding logger.
//
// stop stops the worker early (e.g. to kill one of two replicas) and returns Run's
// error; calling it again returns the same error. The worker is stopped when the
// test ends in any case, and an error from Run then fails the test unless the test
// already collected it through stop.
func Start(t testing.TB, cfg tool.Config, register func(w *tool.Worker)) (w *tool.Worker, stop func() error) {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := tool.NewWorker(cfg)
	if err != nil {
		t.Fatalf("tooltest: NewWorker: %v", err)
	}
	register(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	var once sync.Once
	var runErr error
	halt := func() {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(StopTimeout):
				runErr = fmt.Errorf("tooltest: worker did not stop within %s", StopTimeout)
			}
		})
	}
	var collected atomic.Bool // the test took Run's error through stop
	stop = func() error {
		halt()
		collected.Store(true)
		return runErr
	}
	t.Cleanup(func() {
		halt()
		if runErr != nil && !collected.Load() {
			t.Errorf("tooltest: worker Run: %v", runErr)
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		once.Do(func() { cancel(); runErr = err }) // Run is over: nothing left for halt to wait for
		collected.Store(true)                      // reported right here
		t.Fatalf("tooltest: worker stopped before serving: %v", err)
	case <-time.After(ReadyTimeout):
		t.Fatalf("tooltest: worker not ready within %s", ReadyTimeout)
	}
	return w, stop
}

// Serve is Start plus a plaintext client connection to the worker, closed when the
// test ends.
func Serve(t testing.TB, cfg tool.Config, register func(w *tool.Worker)) *grpc.ClientConn {
	t.Helper()
	w, _ := Start(t, cfg, register)
	return Dial(t, w.Addr())
}

// Dial opens a plaintext client connection to addr, closed when the test ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("tooltest: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
