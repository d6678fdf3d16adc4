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
	"io"
	"log/slog"
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
// a discarding logger. The worker stops when the test ends; an error from Run then
// fails the test.
func Start(t testing.TB, cfg tool.Config, register func(w *tool.Worker)) *tool.Worker {
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
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("tooltest: worker Run: %v", err)
			}
		case <-time.After(StopTimeout):
			t.Errorf("tooltest: worker did not stop within %s", StopTimeout)
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("tooltest: worker stopped before serving: %v", err)
	case <-time.After(ReadyTimeout):
		t.Fatalf("tooltest: worker not ready within %s", ReadyTimeout)
	}
	return w
}

// Serve is Start plus a plaintext client connection to the worker, closed when the
// test ends.
func Serve(t testing.TB, cfg tool.Config, register func(w *tool.Worker)) *grpc.ClientConn {
	t.Helper()
	return Dial(t, Start(t, cfg, register).Addr())
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
