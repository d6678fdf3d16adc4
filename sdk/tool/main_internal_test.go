package tool

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/internal/syncbuf"
)

func register(w *Worker) error {
	schematestv1.RegisterSchemaTestServiceServer(w, schematestv1.UnimplementedSchemaTestServiceServer{})
	return nil
}

func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		register func(*Worker) error
		want     int
		log      string
	}{
		{"unknown flag", []string{"--nope"}, register, 2, "flag provided but not defined"},
		{"bad log level", []string{"--log-level", "loud"}, register, 2, "bad --log-level"},
		{"register fails", []string{"--listen", "127.0.0.1:0"}, func(*Worker) error { return errors.New("no config") }, 1, "no config"},
		{"bad listen address", []string{"--listen", "127.0.0.1:99999"}, register, 1, "listen on 127.0.0.1:99999"},
		{"no services", []string{"--listen", "127.0.0.1:0"}, func(*Worker) error { return nil }, 1, "no service registered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out syncbuf.Buffer
			if got := run(t.Context(), "test", tt.args, &out, tt.register); got != tt.want {
				t.Fatalf("exit code %d, want %d; output:\n%s", got, tt.want, out.String())
			}
			if !strings.Contains(out.String(), tt.log) {
				t.Fatalf("output lacks %q:\n%s", tt.log, out.String())
			}
		})
	}
}

func TestRunServesUntilStopped(t *testing.T) {
	t.Setenv(EnvListen, "127.0.0.1:0") // flags default to the environment
	t.Setenv(EnvLogLevel, "debug")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out syncbuf.Buffer
	ready := make(chan *Worker, 1)
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, "test", nil, &out, func(w *Worker) error {
			ready <- w
			return register(w)
		})
	}()
	var w *Worker
	select {
	case w = <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("register not called")
	}
	select {
	case <-w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("not serving; output:\n%s", out.String())
	}
	if !strings.HasPrefix(w.Addr(), "127.0.0.1:") || w.cfg.Listen != "127.0.0.1:0" {
		t.Fatalf("addr %q, listen %q", w.Addr(), w.cfg.Listen)
	}
	cancel() // what SIGTERM does in Main
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d; output:\n%s", c, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not stop")
	}
	for _, want := range []string{`"msg":"worker serving"`, `"msg":"worker stopped"`, `"service":"test"`} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("log lacks %s:\n%s", want, out.String())
		}
	}
}

// TestRunServesMetrics: --metrics-listen serves the worker's call metrics.
func TestRunServesMetrics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out syncbuf.Buffer
	ready := make(chan *Worker, 1)
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, "test", []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}, &out, func(w *Worker) error {
			ready <- w
			return register(w)
		})
	}()
	w := <-ready
	select {
	case <-w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("not serving; output:\n%s", out.String())
	}
	conn, err := grpc.NewClient(w.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = schematestv1.NewSchemaTestServiceClient(conn).Types(ctx, &schematestv1.TypesRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("call: %v", err)
	}
	addr := regexp.MustCompile(`"msg":"metrics",.*?"addr":"([^"]+)"`).FindStringSubmatch(out.String())
	if addr == nil {
		t.Fatalf("no metrics address logged:\n%s", out.String())
	}
	resp, err := http.Get("http://" + addr[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `toolfleet_worker_calls_total{method="/tools.schematest.v1.SchemaTestService/Types",outcome="Unimplemented"} 1`
	if !strings.Contains(string(body), want) {
		t.Fatalf("/metrics lacks %s:\n%s", want, body)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d; output:\n%s", c, out.String())
	}
}

// TestRunWorkerFlags: a worker's own flags are parsed with the common ones,
// before register runs; register refusing their value exits with status 1.
func TestRunWorkerFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		value string
		want  int
		log   string
	}{
		{"bad", 1, "want a number"},
		{"", 2, "flag needs an argument"},
	} {
		var out syncbuf.Buffer
		var size string
		flags := func(fs *flag.FlagSet) { fs.StringVar(&size, "size", "", "a worker's own flag") }
		args := []string{"--listen", "127.0.0.1:0", "--size"}
		if tt.value != "" {
			args = append(args, tt.value)
		}
		got := runWithFlags(t.Context(), "test", args, &out, flags, func(w *Worker) error {
			return fmt.Errorf("--size %q: want a number", size)
		})
		if got != tt.want || !strings.Contains(out.String(), tt.log) {
			t.Errorf("--size %q: exit code %d, want %d with %q in the output:\n%s", tt.value, got, tt.want, tt.log, out.String())
		}
	}
}
