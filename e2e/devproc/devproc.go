// Package devproc builds the toolfleet command from a checkout and runs
// `toolfleet dev` as a process of its own, on free loopback ports, for the
// end-to-end tests that drive the real binary from their own modules (the
// console in a browser, e2e/browser; OpenID Connect sign-in, e2e/oauth).
package devproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Options of one `toolfleet dev`.
type Options struct {
	// Repo is the toolfleet checkout the binary is built from.
	Repo string
	// Dir holds the binary, the data, the scripts and the dev file.
	Dir string
	// Scripts are model scripts (file name → YAML) written to the script
	// folder (--script-dir), for --model scripted:NAME.yaml.
	Scripts map[string]string
	// Args are more flags of `toolfleet dev`.
	Args []string
}

// stopWait bounds the graceful stop at the test's end; then the process
// group (dev and the workers it started) is killed.
const stopWait = 30 * time.Second

// Start builds cmd/toolfleet into o.Dir and runs `toolfleet dev` until the
// test ends; it returns once dev printed its banner, with the gateway's URL
// and the binary's path (for the CLI).
func Start(ctx context.Context, t testing.TB, o Options) (base, bin string) {
	t.Helper()
	bin = filepath.Join(o.Dir, "toolfleet")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/toolfleet")
	build.Dir = o.Repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build toolfleet: %v\n%s", err, out)
	}
	scripts := filepath.Join(o.Dir, "scripts")
	if err := os.MkdirAll(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range o.Scripts {
		if err := os.WriteFile(filepath.Join(scripts, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	devFile := filepath.Join(o.Dir, "dev.json")
	cmd := exec.Command(bin, append([]string{"dev", "--data-dir", filepath.Join(o.Dir, "data"), "--gateway-port", "0",
		"--nats-port", "0", "--temporal-port", "0", "--temporal-ui-port", "0", "--script-dir", scripts,
		"--dev-file", devFile}, o.Args...)...)
	cmd.Dir = o.Dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(stopWait):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("toolfleet dev exited before it was up:\n%s", log.String())
			}
			log.WriteString(l + "\n")
			if strings.HasPrefix(l, "Press Ctrl-C") {
				go func() { // keep draining its output
					for range lines {
					}
				}()
				addr, err := gatewayOf(devFile)
				if err != nil {
					t.Fatalf("%v\n%s", err, log.String())
				}
				return "http://" + addr, bin
			}
		case <-ctx.Done():
			t.Fatalf("toolfleet dev was not up in time:\n%s", log.String())
		}
	}
}

// gatewayOf reads the gateway's address from dev's dev file.
func gatewayOf(devFile string) (string, error) {
	b, err := os.ReadFile(devFile)
	if err != nil {
		return "", fmt.Errorf("toolfleet dev wrote no dev file: %w", err)
	}
	var d struct {
		Gateway string `json:"gateway"`
	}
	if err := json.Unmarshal(b, &d); err != nil || d.Gateway == "" {
		return "", errors.Join(errors.New("the dev file names no gateway"), err)
	}
	return d.Gateway, nil
}
