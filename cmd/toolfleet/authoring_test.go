package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/syncbuf"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// envRunCLI makes this test binary the toolfleet CLI (TestRunCLI), so that a
// test can run it as a separate process with an environment of its own.
const envRunCLI = "TOOLFLEET_TEST_RUN_CLI"

// TestRunCLI is not a test: run with envRunCLI=1, it is `toolfleet` with the
// arguments after "--".
func TestRunCLI(t *testing.T) {
	if os.Getenv(envRunCLI) != "1" {
		return
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCommand()
	root.SetArgs(args)
	code := 0
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "toolfleet:", err)
		code = exitCode(err)
	}
	os.Exit(code)
}

// cliCommand is `toolfleet args...` as a process with env.
func cliCommand(ctx context.Context, t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^TestRunCLI$", "--"}, args...)...)
	cmd.Env = append(env, envRunCLI+"=1")
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// onlyGo is the environment of a machine with Go and nothing else on PATH (no
// buf, no protoc plugins); modules come from GOPROXY as set, into the shared
// module cache.
func onlyGo(t *testing.T) (goBin string, env []string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "GOFLAGS=") && !strings.HasPrefix(kv, "GOWORK=") {
			env = append(env, kv)
		}
	}
	return goBin, append(env, "PATH="+filepath.Dir(goBin), "GOTOOLCHAIN=local", "GOWORK=off", "GOFLAGS=-buildvcs=false")
}

// TestAuthoringWithOnlyGo is issue 36's "done when": with only Go on PATH, a
// toolkit scaffolded outside the repository generates, builds and passes its
// tests; `toolfleet add tool` then adds a second tool, which is called
// through `toolfleet dev --worker` while a caller keeps calling the first
// one through the rebuild without a failed call.
func TestAuthoringWithOnlyGo(t *testing.T) {
	if testing.Short() {
		t.Skip("scaffolds, generates and builds a module, runs toolfleet dev")
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	goBin, env := onlyGo(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "weather")
	step := func(name string, cmd *exec.Cmd) string {
		t.Helper()
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		t.Logf("%s: %s", name, time.Since(start).Round(100*time.Millisecond))
		return string(out)
	}
	goCmd := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		return cmd
	}

	out := step("toolfleet new toolkit weather (with generation)", cliCommand(ctx, t, env, "new", "toolkit", "weather", "--dir", dir, "--toolfleet-dir", root))
	if !strings.Contains(out, "generated "+filepath.Join(dir, "gen")) {
		t.Fatalf("new did not generate gen/:\n%s", out)
	}
	for _, f := range []string{"gen/weather/v1/weather.pb.go", "gen/weather/v1/weather_grpc.pb.go", "weather/service.go", "weather/service_test.go"} {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f))); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	step("go vet ./...", goCmd("vet", "./..."))
	if out := step("go test ./...", goCmd("test", "-count=1", "-v", "./...")); !strings.Contains(out, "--- PASS: TestHello") {
		t.Fatalf("the scaffold's test did not pass:\n%s", out)
	}

	// toolfleet dev --worker: the toolkit from source, in its own process.
	var stdout, stderr syncbuf.Buffer
	// In the toolkit's folder, as docs/tutorial.md runs it: its dev file lets
	// the tutorial's commands find this dev, and scripted models are read there.
	dev := cliCommand(ctx, t, env, "dev", "--data-dir", t.TempDir(), "--nats-port", "0", "--temporal-port", "0", "--temporal-ui-port", "0",
		"--gateway-port", "0", "--log-level", "info", "--worker", ".")
	dev.Dir = dir
	dev.Stdout, dev.Stderr = &stdout, &stderr
	dev.Cancel = func() error { return dev.Process.Signal(os.Interrupt) }
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	devDone := make(chan error, 1)
	go func() { devDone <- dev.Wait() }()
	defer func() {
		_ = dev.Process.Signal(os.Interrupt)
		select {
		case <-devDone:
		case <-time.After(time.Minute):
			_ = dev.Process.Kill()
			t.Error("toolfleet dev did not stop within a minute of SIGINT")
		}
	}()
	var gw string
	for deadline := time.Now().Add(5 * time.Minute); gw == ""; {
		if m := regexp.MustCompile(`Gateway\s+(\S+)`).FindStringSubmatch(stdout.String()); m != nil && strings.Contains(stdout.String(), "Your worker") {
			gw = m[1]
			break
		}
		select {
		case err := <-devDone:
			t.Fatalf("dev stopped: %v\n%s\n%s", err, stdout.String(), stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev not up:\n%s\n%s", stdout.String(), stderr.String())
		}
	}
	// The SDK's client, as agents and programs call: it retries what is safe
	// to retry (Unavailable on a read-only tool) with backoff.
	c, err := client.New(gw, client.WithRetry(client.RetryPolicy{MaxAttempts: 8, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hello := func() (string, int, error) {
		res, err := c.Call(ctx, "Weather.Hello", map[string]any{"name": "Ada"})
		if err != nil {
			return "", 0, err
		}
		if !res.Success {
			return "", res.Attempts, fmt.Errorf("execution error: %s", res.Error.GetMessage())
		}
		return res.Value.GetStructValue().AsMap()["greeting"].(string), res.Attempts, nil
	}
	start := time.Now()
	for {
		if g, _, err := hello(); err == nil && g == "Hello, Ada!" {
			break
		} else if time.Since(start) > 3*time.Minute {
			t.Fatalf("Weather.Hello through dev: %q %v\n%s", g, err, stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("dev up to the worker's first answer: %s", time.Since(start).Round(100*time.Millisecond))

	// A plain gRPC caller (grpc-go, no retry policy, not the SDK's client)
	// keeps calling Weather.Hello through the rebuild every few milliseconds:
	// a moment without a serving replica would fail its call.
	conn, err := grpc.NewClient(gw, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := toolfleetv1.NewToolGatewayServiceClient(conn)
	in, err := structpb.NewStruct(map[string]any{"name": "Ada"})
	if err != nil {
		t.Fatal(err)
	}
	plainHello := func() error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := raw.CallTool(cctx, &toolfleetv1.CallToolRequest{ToolId: "Weather.Hello", Input: in})
		if err != nil {
			return err
		}
		if g := res.GetValue().GetStructValue().GetFields()["greeting"].GetStringValue(); !res.GetSuccess() || g != "Hello, Ada!" {
			return fmt.Errorf("answered %v", res)
		}
		return nil
	}
	callerStart := time.Now()
	var mu sync.Mutex
	var calls int
	var failed []string
	stopCaller := make(chan struct{})
	callerDone := make(chan struct{})
	go func() {
		defer close(callerDone)
		for {
			select {
			case <-stopCaller:
				return
			case <-time.After(5 * time.Millisecond):
			}
			err := plainHello()
			mu.Lock()
			calls++
			if err != nil {
				failed = append(failed, fmt.Sprintf("%v (after %s)", err, time.Since(callerStart).Round(time.Millisecond)))
			}
			mu.Unlock()
		}
	}()

	out = step("toolfleet add tool Forecast (with regeneration)", func() *exec.Cmd {
		cmd := cliCommand(ctx, t, env, "add", "tool", "Forecast")
		cmd.Dir = dir
		return cmd
	}())
	if !strings.Contains(out, "added Weather.Forecast") {
		t.Fatalf("add tool:\n%s", out)
	}
	start = time.Now()
	for {
		res, err := c.Call(ctx, "Weather.Forecast", map[string]any{"query": "Paris"})
		if err == nil && !res.Success && res.Error.GetMessage() == "Weather.Forecast is not implemented yet" {
			break
		}
		var se *client.ServerError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("Weather.Forecast: %v", err)
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("Weather.Forecast not served: %v %v\n%s", res, err, stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("add tool to the new tool served: %s", time.Since(start).Round(100*time.Millisecond))
	// The old worker stops once the new one joined; keep calling past its stop.
	for !strings.Contains(stderr.String(), "worker stopped") {
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("the old worker was not stopped:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	close(stopCaller)
	<-callerDone
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d plain gRPC calls of Weather.Hello through the rebuild", calls)
	if len(failed) > 0 {
		t.Errorf("%d of %d plain gRPC calls failed during the rebuild, first %s, last %s\nstderr:\n%s", len(failed), calls, failed[0], failed[len(failed)-1], stderr.String())
	}
	if calls == 0 {
		t.Error("no call was made during the rebuild")
	}
	for _, want := range []string{"building…", "ready (pid", "contract extended: the new worker took over beside the old one, with no gap"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("no %q on dev's stderr:\n%s", want, stderr.String())
		}
	}
	if t.Failed() {
		return
	}
	tutorialSteps4And5(ctx, t, dir, env, goCmd, plainHello, &stderr)
}
