package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

func TestRegisterRefusesWithoutNATS(t *testing.T) {
	t.Parallel()
	noEnv := func(string) string { return "" }
	w, err := tool.NewWorker(tool.Config{Name: "kv"})
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	if err := register(noEnv)(w); !errors.Is(err, errNoNATS) {
		t.Fatalf("register without NATS = %v, want %v", err, errNoNATS)
	}
}

func TestBucketConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env     map[string]string
		wantErr bool
		name    string
		history uint8
	}{
		{env: map[string]string{}, name: "", history: 0},
		{env: map[string]string{EnvBucket: "team_notes", EnvHistory: "20"}, name: "team_notes", history: 20},
		{env: map[string]string{EnvBucket: "bad.name"}, wantErr: true},
		{env: map[string]string{EnvHistory: "65"}, wantErr: true},
		{env: map[string]string{EnvHistory: "ten"}, wantErr: true},
	}
	for _, tt := range tests {
		cfg, err := bucketConfig(func(k string) string { return tt.env[k] })
		if (err != nil) != tt.wantErr {
			t.Errorf("bucketConfig(%v) err = %v, want error %v", tt.env, err, tt.wantErr)
			continue
		}
		if err == nil && (cfg.Name != tt.name || cfg.History != tt.history) {
			t.Errorf("bucketConfig(%v) = %+v", tt.env, cfg)
		}
	}
}

// The binary's wiring: --nats from the arguments, the bucket from the environment,
// served by a real worker.
func TestRegisterServes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	w, err := tool.NewWorker(tool.Config{Name: "kv", Listen: "127.0.0.1:0", NATSURL: srv.URL(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	env := map[string]string{EnvBucket: "wired", EnvHistory: "3"}
	if err := register(func(k string) string { return env[k] })(w); err != nil {
		t.Fatalf("register: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker Run: %v", err)
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("worker stopped before serving: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("worker not ready within 10s")
	}
	conn, err := grpc.NewClient(w.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	callCtx, cancelCall := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancelCall()
	if _, err := kvv1.NewKVServiceClient(conn).Put(callCtx, &kvv1.PutRequest{Key: "k", Value: "v"}); err != nil {
		t.Fatalf("Put: %v", err)
	}

	// The value landed in the bucket named by the environment, created with its history.
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	bucket, err := js.KeyValue(callCtx, "wired")
	if err != nil {
		t.Fatalf("bucket wired: %v", err)
	}
	if e, err := bucket.Get(callCtx, "k"); err != nil || string(e.Value()) != "v" {
		t.Errorf("k in bucket wired = %v, %v", e, err)
	}
	if st, err := bucket.Status(callCtx); err != nil || st.History() != 3 {
		t.Errorf("bucket status = %v, %v; want history 3", st, err)
	}
}

func TestRegisterFailsWithoutServer(t *testing.T) {
	t.Parallel()
	// A NATS URL nobody answers: register must fail rather than serve a dead store.
	w, err := tool.NewWorker(tool.Config{Name: "kv", NATSURL: "nats://127.0.0.1:1"})
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	env := map[string]string{EnvStartTimeout: "500ms"}
	begin := time.Now()
	if err := register(func(k string) string { return env[k] })(w); err == nil {
		t.Fatal("register with an unreachable NATS succeeded")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("register = %v, want it to give up at its start timeout", err)
	}
	if d := time.Since(begin); d < 400*time.Millisecond || d > 5*time.Second {
		t.Fatalf("gave up after %s, want about the 500ms start timeout", d)
	}
	env[EnvStartTimeout] = "soon"
	if err := register(func(k string) string { return env[k] })(w); err == nil || !strings.Contains(err.Error(), EnvStartTimeout) {
		t.Fatalf("register with a bad start timeout = %v", err)
	}
}

// Started before NATS (in Kubernetes, before cluster DNS answers for the NATS
// Service), the worker waits for it and then serves, instead of exiting.
func TestRegisterWaitsForALateNATS(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	w, err := tool.NewWorker(tool.Config{Name: "kv", Listen: "127.0.0.1:0", NATSURL: "nats://127.0.0.1:" + strconv.Itoa(port),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	late := make(chan *natsx.Embedded, 1)
	go func() {
		defer close(late)
		time.Sleep(time.Second)
		srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{Port: port, StoreDir: t.TempDir()})
		if err != nil {
			t.Errorf("late NATS: %v", err)
			return
		}
		late <- srv
	}()
	begin := time.Now()
	err = register(func(k string) string { return map[string]string{EnvBucket: "late", EnvStartTimeout: "30s"}[k] })(w)
	if srv := <-late; srv != nil {
		t.Cleanup(srv.Shutdown)
	}
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	if d := time.Since(begin); d < 900*time.Millisecond {
		t.Fatalf("registered after %s, before NATS started", d)
	}
}
