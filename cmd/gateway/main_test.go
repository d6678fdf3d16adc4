package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// runMainEnv makes the test binary run main() instead of the tests, so that
// TestSIGTERM can start the real process without building it separately.
const runMainEnv = "GATEWAY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestProcess: the process refuses a bad configuration with status 2, and on
// SIGTERM stops serving and exits 0.
func TestProcess(t *testing.T) {
	t.Parallel()
	t.Run("bad configuration", func(t *testing.T) {
		t.Parallel()
		cmd := exec.CommandContext(t.Context(), os.Args[0], "--listen", "0.0.0.0:0", "--auth-disabled", "--workers", "127.0.0.1:1")
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitBadArgs || !strings.Contains(string(out), "loopback") {
			t.Fatalf("exit %v, output %s", err, out)
		}
		cmd = exec.CommandContext(t.Context(), os.Args[0], "--auth-disabled")
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		out, err = cmd.CombinedOutput()
		if !errors.As(err, &exit) || exit.ExitCode() != exitBadArgs || !strings.Contains(string(out), "no workers") {
			t.Fatalf("exit %v, output %s", err, out)
		}
	})
	t.Run("SIGTERM", func(t *testing.T) {
		t.Parallel()
		cmd := exec.CommandContext(t.Context(), os.Args[0], "--listen", "127.0.0.1:0", "--auth-disabled",
			"--workers", startPlainGRPC(t), "--shutdown-timeout", "5s")
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		lines := make(chan string, 64)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				select {
				case lines <- sc.Text():
				default: // never block the process on a slow reader
				}
			}
			close(lines)
			done <- cmd.Wait()
		}()
		addr := ""
		deadline := time.After(30 * time.Second)
		for addr == "" {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the gateway exited before serving: %v", <-done)
				}
				var rec struct{ Msg, Addr string }
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "gateway serving" {
					addr = rec.Addr
				}
			case <-deadline:
				t.Fatal("the gateway did not log \"gateway serving\" within 30s")
			}
		}
		waitHealth(t, dial(t, addr), "", healthpb.HealthCheckResponse_SERVING)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("after SIGTERM: %v (want exit status 0)", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the gateway did not exit within 30s of SIGTERM")
		}
	})
}
