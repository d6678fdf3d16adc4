// Package devworker runs a tool worker from source for `toolfleet dev
// --worker DIR`: it builds the Go package in DIR, starts the binary, and
// rebuilds and restarts it when a Go file, go.mod or go.sum of its module
// changes. A worker that exits on its own is restarted after a backoff that
// doubles up to a bound and resets once a run lasted long enough. The
// process belongs to [Run]: it is stopped (SIGTERM, then SIGKILL after
// StopTimeout) before Run returns.
//
// Changes are found by polling file sizes and modification times (no
// platform watcher), bounded to MaxFiles files.
package devworker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Defaults of [Config].
const (
	DefaultPoll         = 500 * time.Millisecond
	DefaultMinBackoff   = 500 * time.Millisecond
	DefaultMaxBackoff   = 30 * time.Second
	DefaultStopTimeout  = 10 * time.Second
	DefaultBuildTimeout = 5 * time.Minute
	// MaxFiles bounds the files watched; a bigger module is watched in part.
	MaxFiles = 20000
)

// ErrNoModule is returned when DIR is not inside a Go module.
var ErrNoModule = errors.New("devworker: no go.mod in the folder or above it")

// Config says what to run.
type Config struct {
	// Dir is the folder of the worker's main package.
	Dir string
	// Args are the worker's arguments (e.g. --listen 127.0.0.1:0 --nats URL).
	Args []string
	// Env is added to the process environment of the build and the worker.
	Env []string
	// Stdout and Stderr receive the worker's and the build's output. Default: discarded.
	Stdout, Stderr io.Writer
	// Logger receives builds, starts, restarts and stops. Default: discarded.
	Logger *slog.Logger
	// Go is the go command. Default "go" on PATH.
	Go string
	// Poll is how often the module is checked for changes. Default [DefaultPoll].
	Poll time.Duration
	// MinBackoff and MaxBackoff bound the wait before restarting a worker that
	// exited by itself (doubling from Min to Max). Defaults [DefaultMinBackoff], [DefaultMaxBackoff].
	MinBackoff, MaxBackoff time.Duration
	// StopTimeout is how long a stopping worker has after SIGTERM before it is
	// killed. Default [DefaultStopTimeout].
	StopTimeout time.Duration
	// BuildTimeout bounds one go build. Default [DefaultBuildTimeout].
	BuildTimeout time.Duration
}

func (c *Config) defaults() {
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Go == "" {
		c.Go = "go"
	}
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(DefaultMaxBackoff, c.MinBackoff)
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.BuildTimeout <= 0 {
		c.BuildTimeout = DefaultBuildTimeout
	}
}

// ModuleRoot returns the folder of the go.mod that dir belongs to.
func ModuleRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("%w: %s", ErrNoModule, dir)
		}
		d = parent
	}
}

// Run builds and runs the worker until ctx is done, then stops it and
// returns nil. It returns an error only when it cannot start at all (no
// module, no temporary folder); build failures and crashes are logged and
// retried.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return fmt.Errorf("devworker: %w", err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("devworker: %s is not a folder", cfg.Dir)
	}
	root, err := ModuleRoot(dir)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "toolfleet-worker-")
	if err != nil {
		return fmt.Errorf("devworker: %w", err)
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, filepath.Base(dir))
	log := cfg.Logger.With("worker", cfg.Dir)

	s := &supervisor{cfg: cfg, dir: dir, root: root, bin: bin, log: log}
	return s.loop(ctx)
}

type supervisor struct {
	cfg            Config
	dir, root, bin string
	log            *slog.Logger
}

func (s *supervisor) loop(ctx context.Context) error {
	backoff := s.cfg.MinBackoff
	built := ""
	for {
		fp := fingerprint(s.root)
		if fp != built {
			if err := s.build(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.log.Error("worker build failed; waiting for a change", "error", err)
				if !s.waitChange(ctx, fp) {
					return nil
				}
				continue
			}
			built = fp
		}
		started := time.Now()
		exit, changed := s.runOnce(ctx, fp)
		switch {
		case ctx.Err() != nil:
			return nil
		case changed:
			backoff = s.cfg.MinBackoff
			s.log.Info("worker source changed; rebuilding")
			continue
		}
		if time.Since(started) > 4*s.cfg.MaxBackoff {
			backoff = s.cfg.MinBackoff // it ran a good while: a new crash starts afresh
		}
		s.log.Warn("worker exited; restarting", "error", exit, "after", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

// build compiles the package into s.bin.
func (s *supervisor) build(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.BuildTimeout)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, s.cfg.Go, "build", "-o", s.bin, ".")
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), s.cfg.Env...)
	cmd.Stdout, cmd.Stderr = s.cfg.Stderr, s.cfg.Stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build in %s: %w", s.dir, err)
	}
	s.log.Info("worker built", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// runOnce runs the binary until it exits, the module changes (it is then
// stopped; changed is true) or ctx is done (it is stopped).
func (s *supervisor) runOnce(ctx context.Context, fp string) (exit error, changed bool) {
	cmd := exec.Command(s.bin, s.cfg.Args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), s.cfg.Env...)
	cmd.Stdout, cmd.Stderr = s.cfg.Stdout, s.cfg.Stderr
	if err := cmd.Start(); err != nil {
		return err, false
	}
	s.log.Info("worker started", "pid", cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	tick := time.NewTicker(s.cfg.Poll)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("exited with status 0")
			}
			return err, false
		case <-ctx.Done():
			s.stop(cmd, done)
			return nil, false
		case <-tick.C:
			if fingerprint(s.root) != fp {
				s.stop(cmd, done)
				return nil, true
			}
		}
	}
}

// stop sends SIGTERM, waits up to StopTimeout, then kills.
func (s *supervisor) stop(cmd *exec.Cmd, done <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		s.log.Info("worker stopped", "pid", cmd.Process.Pid)
	case <-time.After(s.cfg.StopTimeout):
		_ = cmd.Process.Kill()
		<-done
		s.log.Warn("worker killed: no exit within the stop timeout", "pid", cmd.Process.Pid, "timeout", s.cfg.StopTimeout)
	}
}

// waitChange waits until the module's fingerprint differs from fp; false
// when ctx ended first.
func (s *supervisor) waitChange(ctx context.Context, fp string) bool {
	tick := time.NewTicker(s.cfg.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			if fingerprint(s.root) != fp {
				return true
			}
		}
	}
}

// fingerprint hashes the names, sizes and modification times of the
// module's Go files, go.mod and go.sum (hidden folders, testdata and
// vendor-like folders skipped), at most MaxFiles of them.
func fingerprint(root string) string {
	h := fnv.New128a()
	n := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			if p != root {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") && name != "go.mod" && name != "go.sum" {
			return nil
		}
		if n++; n > MaxFiles {
			return filepath.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\n", p, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	return fmt.Sprintf("%x", h.Sum(nil))
}
