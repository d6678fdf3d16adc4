package devworker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/devworker"
)

// lines is a goroutine-safe output sink.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// program is a worker stand-in: it prints "<version> started <pid>", then
// waits for SIGTERM and prints "<version> stopping <pid>". With crash it
// exits 1 after 300ms.
func program(version string, crash bool) string {
	body := `<-sig
	fmt.Println("` + version + ` stopping", os.Getpid())`
	if crash {
		body = `time.Sleep(300 * time.Millisecond)
	os.Exit(1)`
	}
	// The handler is in place before "started" is printed: the test sends
	// SIGTERM as soon as it reads that line.
	return `package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

var _ = time.Second

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	fmt.Println("` + version + ` started", os.Getpid(), os.Args[1:])
	` + body + `
}
`
}

func waitFor(t *testing.T, out *lines, what string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(out.String(), what) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %s; output:\n%s", what, timeout, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pidOf(t *testing.T, out *lines, version string) int {
	t.Helper()
	m := regexp.MustCompile(version + ` started (\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no pid of %s in:\n%s", version, out.String())
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestRunBuildsRestartsAndStops(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	cmdDir := filepath.Join(mod, "cmd", "w")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(cmdDir, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(cmdDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/w\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(program("v1", false))

	var out, status lines
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		// Ready: the worker printed its arguments, so it runs with them.
		ready := func(ctx context.Context, addr string) (string, error) {
			for !strings.Contains(out.String(), "[--listen "+addr+"]") {
				select {
				case <-ctx.Done():
					return "", ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
			return "one contract", nil
		}
		done <- devworker.Run(ctx, devworker.Config{Dir: cmdDir, Listen: "127.0.0.1", Ready: ready,
			Stdout: &out, Stderr: &out, Status: &status, Env: []string{"GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "GOPROXY=off"},
			Poll: 50 * time.Millisecond, MinBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond,
			StopTimeout: 5 * time.Second})
	}()
	waitFor(t, &out, "v1 started", time.Minute)
	if !strings.Contains(out.String(), "[--listen 127.0.0.1:") {
		t.Errorf("the worker did not get its arguments:\n%s", out.String())
	}
	v1 := pidOf(t, &out, "v1")

	// A change: the new build is started first, then the old process is
	// stopped politely.
	write(program("v2", false))
	waitFor(t, &out, fmt.Sprintf("v1 stopping %d", v1), time.Minute)
	if i, j := strings.Index(out.String(), "v2 started"), strings.Index(out.String(), "v1 stopping"); i < 0 || i > j {
		t.Errorf("v1 stopped before v2 started:\n%s", out.String())
	}
	// It prints "stopping" on SIGTERM, just before it exits.
	for deadline := time.Now().Add(10 * time.Second); alive(v1) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(v1) {
		t.Errorf("v1 (pid %d) still runs", v1)
	}
	waitFor(t, &status, "ready (pid", time.Minute)

	// A build failure keeps the running worker and prints the compiler's error.
	write("package main\n\nfunc main() { undefined() }\n")
	waitFor(t, &status, "build failed; the running worker", time.Minute)
	waitFor(t, &status, "undefined: undefined", time.Minute)
	v2 := pidOf(t, &out, "v2")
	if !alive(v2) {
		t.Errorf("v2 (pid %d) stopped on a failed build:\n%s", v2, out.String())
	}
	if strings.Contains(out.String(), "v2 stopping") {
		t.Errorf("v2 was stopped on a failed build:\n%s", out.String())
	}

	// A crashing worker is restarted with a bounded backoff, not in a tight loop.
	write(program("v3", true))
	waitFor(t, &out, "v3 started", time.Minute)
	time.Sleep(2 * time.Second)
	if n := strings.Count(out.String(), "v3 started"); n < 3 || n > 12 {
		t.Errorf("a worker crashing after 300ms started %d times in 2s; want a few (backoff 100ms doubling to 400ms)", n)
	}

	write(program("v4", false))
	waitFor(t, &out, "v4 started", time.Minute)
	v4 := pidOf(t, &out, "v4")

	// Run owns the process: cancelling stops it before Run returns.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if !strings.Contains(out.String(), fmt.Sprintf("v4 stopping %d", v4)) || alive(v4) {
		t.Errorf("v4 (pid %d) was not stopped with SIGTERM:\n%s", v4, out.String())
	}
}

func TestRunRefusesNoModule(t *testing.T) {
	t.Parallel()
	err := devworker.Run(t.Context(), devworker.Config{Dir: t.TempDir()})
	if !errors.Is(err, devworker.ErrNoModule) {
		t.Errorf("Run outside a module: %v, want ErrNoModule", err)
	}
	if err := devworker.Run(t.Context(), devworker.Config{Dir: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("Run on a missing folder succeeded")
	}
}

// A worker that ignores SIGTERM is killed after StopTimeout.
func TestRunKillsAStubbornWorker(t *testing.T) {
	t.Parallel()
	mod := t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/s\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := `package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	signal.Ignore(syscall.SIGTERM)
	fmt.Println("stubborn started", os.Getpid())
	time.Sleep(time.Hour)
}
`
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out lines
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- devworker.Run(ctx, devworker.Config{Dir: mod, Stdout: &out, Env: []string{"GOTOOLCHAIN=local", "GOPROXY=off"},
			StopTimeout: 300 * time.Millisecond})
	}()
	waitFor(t, &out, "stubborn started", time.Minute)
	pid := pidOf(t, &out, "stubborn")
	start := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 10*time.Second {
		t.Errorf("stop took %s, want about the 300ms stop timeout", took)
	}
	if alive(pid) {
		t.Errorf("the stubborn worker (pid %d) survived", pid)
	}
}

// A rebuild that changes the contract (Ready's key) cannot run beside the old
// worker (a registry refuses a second contract of a version): the old one
// stops first, and the new build starts again on a fresh address.
// contractModule is a module whose main.go is program("v1", false); write
// replaces main.go.
func contractModule(t *testing.T) (mod string, write func(src string)) {
	t.Helper()
	mod = t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/c\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write = func(src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(program("v1", false))
	return mod, write
}

// contractReady is a Config.Ready whose contract key is the version the
// worker printed to out with its address.
func contractReady(out *lines) func(ctx context.Context, addr string) (string, error) {
	return func(ctx context.Context, addr string) (string, error) {
		re := regexp.MustCompile(`(v\d) started \d+ \[--listen ` + regexp.QuoteMeta(addr) + `\]`)
		for {
			if m := re.FindStringSubmatch(out.String()); m != nil {
				return m[1], nil
			}
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

func TestRunContractChangeStopsTheOldFirst(t *testing.T) {
	t.Parallel()
	mod, write := contractModule(t)
	var out, status lines
	ready := contractReady(&out)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- devworker.Run(ctx, devworker.Config{Dir: mod, Listen: "127.0.0.1", Ready: ready, Stdout: &out, Status: &status,
			Env: []string{"GOTOOLCHAIN=local", "GOPROXY=off"}, Poll: 50 * time.Millisecond})
	}()
	waitFor(t, &status, "ready (pid", time.Minute)
	v1 := pidOf(t, &out, "v1")
	write(program("v2", false))
	deadline := time.Now().Add(time.Minute)
	for strings.Count(status.String(), "ready (pid") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("v2 not ready:\n%s\n%s", status.String(), out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	text := out.String()
	if n := strings.Count(text, "v2 started"); n != 2 {
		t.Errorf("v2 started %d times, want 2 (beside v1, then alone):\n%s", n, text)
	}
	last := strings.LastIndex(text, "v2 started")
	if i := strings.Index(text, fmt.Sprintf("v1 stopping %d", v1)); i < 0 || i > last {
		t.Errorf("v1 did not stop before the last v2 start:\n%s", text)
	}
	cancel()
	<-done
}

// With Config.Draining, a contract change signals the old worker, waits for
// it to say it drains, and starts the new one while the old one finishes:
// the Draining hook gets the old worker's address, and the old process is
// gone once the swap is over.
func TestRunContractChangeDrainsTheOld(t *testing.T) {
	t.Parallel()
	mod, write := contractModule(t)
	var out, status lines
	ready := contractReady(&out)
	drained := make(chan string, 4)
	// The program prints "stopping" on SIGTERM: its DRAINING announcement here.
	draining := func(ctx context.Context, addr string, stop func()) error {
		drained <- addr
		stop()
		for !strings.Contains(out.String(), "v1 stopping") {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- devworker.Run(ctx, devworker.Config{Dir: mod, Listen: "127.0.0.1", Ready: ready, Draining: draining, Stdout: &out, Status: &status,
			Env: []string{"GOTOOLCHAIN=local", "GOPROXY=off"}, Poll: 50 * time.Millisecond})
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, &status, "ready (pid", time.Minute)
	v1 := pidOf(t, &out, "v1")
	v1addr := regexp.MustCompile(`v1 started \d+ \[--listen (\S+)\]`).FindStringSubmatch(out.String())
	if v1addr == nil {
		t.Fatalf("no v1 address:\n%s", out.String())
	}
	write(program("v2", false))
	deadline := time.Now().Add(time.Minute)
	for strings.Count(status.String(), "ready (pid") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("v2 not ready:\n%s\n%s", status.String(), out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case addr := <-drained:
		if addr != v1addr[1] {
			t.Errorf("Draining got %s, want v1's address %s", addr, v1addr[1])
		}
	default:
		t.Fatal("Draining was not called on a contract change")
	}
	text := out.String()
	if n := strings.Count(text, "v2 started"); n != 2 {
		t.Errorf("v2 started %d times, want 2 (beside v1, then once v1 drains):\n%s", n, text)
	}
	if i := strings.Index(text, fmt.Sprintf("v1 stopping %d", v1)); i < 0 || i > strings.LastIndex(text, "v2 started") {
		t.Errorf("v1 was not draining before the last v2 start:\n%s", text)
	}
	if alive(v1) {
		t.Errorf("v1 (pid %d) outlived the swap", v1)
	}
}

// With Config.Joined saying the registry took the new worker beside the old
// one (a contract that only adds tools), a contract change swaps as a plain
// rebuild does: the new worker is started once and keeps running, the old one
// stops only after the new one was ready, and Draining is not used.
func TestRunContractExtendedSwapsWithoutRestart(t *testing.T) {
	t.Parallel()
	mod, write := contractModule(t)
	var out, status lines
	ready := contractReady(&out)
	joinedAsked := make(chan string, 4)
	joined := func(_ context.Context, addr string) bool { joinedAsked <- addr; return true }
	draining := func(context.Context, string, func()) error {
		t.Error("Draining was used although the new worker joined")
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- devworker.Run(ctx, devworker.Config{Dir: mod, Listen: "127.0.0.1", Ready: ready, Draining: draining, Joined: joined,
			Stdout: &out, Status: &status, Env: []string{"GOTOOLCHAIN=local", "GOPROXY=off"}, Poll: 50 * time.Millisecond})
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, &status, "ready (pid", time.Minute)
	v1 := pidOf(t, &out, "v1")
	write(program("v2", false))
	deadline := time.Now().Add(time.Minute)
	for strings.Count(status.String(), "ready (pid") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("v2 not ready:\n%s\n%s", status.String(), out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	text := out.String()
	if n := strings.Count(text, "v2 started"); n != 1 {
		t.Errorf("v2 started %d times, want once (it joined beside v1):\n%s", n, text)
	}
	v2addr := regexp.MustCompile(`v2 started \d+ \[--listen (\S+)\]`).FindStringSubmatch(text)
	select {
	case addr := <-joinedAsked:
		if v2addr == nil || addr != v2addr[1] {
			t.Errorf("Joined got %s, want v2's address (%v)", addr, v2addr)
		}
	default:
		t.Fatal("Joined was not asked on a contract change")
	}
	if i := strings.Index(text, fmt.Sprintf("v1 stopping %d", v1)); i < 0 || i < strings.Index(text, "v2 started") {
		t.Errorf("v1 did not stop after v2 started:\n%s", text)
	}
	if !strings.Contains(status.String(), "contract extended") {
		t.Errorf("no \"contract extended\" status line:\n%s", status.String())
	}
	if alive(v1) {
		t.Errorf("v1 (pid %d) outlived the swap", v1)
	}
}
