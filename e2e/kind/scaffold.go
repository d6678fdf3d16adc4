package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolfleet/toolfleet/sdk/client"
)

// checkScaffold is docs/tool-authoring.md's "Deploy" section as a user runs
// it: a toolkit scaffolded by `toolfleet new toolkit` into a folder outside
// this repository, deployed with its own Tiltfile into the fleet's namespace,
// then called through the deployed gateway. It removes the worker afterwards
// (`tilt down` in the toolkit's folder).
func (h *harness) checkScaffold(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "kind-test-toolkit-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kit := filepath.Join(dir, "tickets")
	step := func(name, wd string, env []string, args ...string) (time.Duration, error) {
		begin := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, args[0], args[1:]...)
		cmd.Dir = wd
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w\n%s", name, strings.Join(args, " "), err, tail(out, 2000))
		}
		return time.Since(begin), nil
	}
	tNew, err := step("new", h.cfg.repo, nil, "go", "run", "./cmd/toolfleet", "new", "toolkit", "tickets",
		"--dir", kit, "--module", "example.com/tickets", "--toolfleet-dir", h.cfg.repo, "--template", "rich")
	if err != nil {
		return err
	}
	tTidy, err := step("tidy", kit, nil, "go", "mod", "tidy")
	if err != nil {
		return err
	}
	// Port 0: no Tilt UI, so a `tilt up` of the fleet may keep running.
	tiltEnv := []string{"TOOLFLEET_NAMESPACE=" + h.cfg.namespace}
	defer func() {
		if _, err := step("tilt down", kit, tiltEnv, "tilt", "down"); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	tUp, err := step("tilt ci", kit, tiltEnv, "tilt", "ci", "--port", "0", "--timeout", "10m")
	if err != nil {
		return err
	}
	begin := time.Now()
	var list struct {
		Tickets []any `json:"tickets"`
	}
	// Ready pods have announced, but the gateways learn of them over NATS:
	// an unknown tool for a few seconds is expected, not longer.
	for {
		err := h.fleet.call(ctx, "Tickets.List", map[string]any{"limit": 5}, &list)
		if err == nil {
			break
		}
		if status.Code(err) != codes.NotFound && connect.CodeOf(err) != connect.CodeNotFound || time.Since(begin) > time.Minute {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	tCall := time.Since(begin)
	// The worker's own code answers: an unknown id is its execution error.
	res, err := h.fleet.tools.Call(ctx, "Tickets.Get", map[string]any{"id": "T-999"})
	if err != nil {
		return fmt.Errorf("Tickets.Get: %w", err)
	}
	var execErr *client.ExecutionError
	if err := res.Err(); !errors.As(err, &execErr) || !strings.Contains(err.Error(), "no ticket T-999") {
		return fmt.Errorf("Tickets.Get T-999 = %v; want the worker's execution error", err)
	}
	h.figure("toolfleet new %s, go mod tidy %s, tilt ci %s, first call %s: %s in all",
		tNew.Round(100*time.Millisecond), tTidy.Round(100*time.Millisecond), tUp.Round(100*time.Millisecond),
		tCall.Round(100*time.Millisecond), (tNew + tTidy + tUp + tCall).Round(time.Second))
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
