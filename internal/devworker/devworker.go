// Package devworker runs a tool worker from source for `toolfleet dev
// --worker DIR`: it builds the Go package in DIR, starts the binary, and
// rebuilds it when a Go file, go.mod or go.sum of its module changes. A
// rebuild is swapped in with no downtime: the new binary is built next to the
// running one, started, and the old one is stopped only once the new one is
// ready ([Config.Ready]); a rebuild that changes the worker's contract swaps
// the same way when the registry took it beside the old one ([Config.Joined]:
// it only adds tools), else starts once the old one drains
// ([Config.Draining]); a failed build leaves the old one serving. A worker that exits on its own is restarted after a backoff that
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
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	DefaultReadyTimeout = 30 * time.Second
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
	// Status receives one line per build: "building…", "ready …" or "build
	// failed …" with the compiler's output. Default: discarded.
	Status io.Writer
	// Listen, when set (e.g. "127.0.0.1"), gives every start of the worker
	// "--listen HOST:PORT" with a port free at that moment, passed to Ready.
	Listen string
	// Ready, when set, is called after each start with the worker's --listen
	// address and returns once the worker serves (e.g. a gateway routes to it),
	// with a key of its contract. Until it returns the previous worker keeps
	// serving; when the keys differ and Joined does not say the new one was
	// taken beside it, the previous worker stops before the new one starts
	// again on a fresh address (a registry refuses a second contract of a
	// version beside the first). An error or ReadyTimeout stops the new
	// worker and keeps the previous one. Nil: ready once started.
	Ready func(ctx context.Context, addr string) (contract string, err error)
	// ReadyTimeout bounds Ready. Default [DefaultReadyTimeout].
	ReadyTimeout time.Duration
	// Draining, when set, is used when a rebuild changes the contract: it is
	// called with the running worker's address and a stop function that
	// sends the worker SIGTERM, and returns once the worker no longer takes
	// new calls (e.g. the registry saw it announce DRAINING). The new worker
	// then starts while the old one finishes its calls, so the registry
	// takes the new contract as soon as it announces. Nil: the old worker
	// is stopped completely first. Bounded by StopTimeout.
	Draining func(ctx context.Context, addr string, stop func()) error
	// Joined, when set, is asked after a rebuild whose contract changed
	// whether the new worker (at addr) was taken beside the running one, as
	// a registry takes a contract that only adds tools: then the old worker
	// stops as on a rebuild with the same contract, and no call finds the
	// toolkit without a serving replica. false (or nil Joined): the old one
	// drains and the new one starts again on a fresh address (Draining).
	Joined func(ctx context.Context, addr string) bool
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
	if c.Status == nil {
		c.Status = io.Discard
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
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
	builds         int // names the binaries: a new build never overwrites the running one
}

// proc is one running worker process.
type proc struct {
	cmd      *exec.Cmd
	done     chan error // receives Wait's result once
	addr     string     // its --listen address when Config.Listen is set
	contract string     // what Ready returned
}

func (s *supervisor) status(format string, args ...any) {
	fmt.Fprintf(s.cfg.Status, "worker %s: "+format+"\n", append([]any{s.cfg.Dir}, args...)...)
}

// loop keeps the latest good build running. A change is built next to the
// running process, which keeps serving until the new one is ready (see
// [Config.Ready]); a failed build leaves it serving.
func (s *supervisor) loop(ctx context.Context) error {
	backoff := s.cfg.MinBackoff
	var cur *proc
	defer func() {
		if cur != nil {
			s.stop(cur)
		}
	}()
	bin, fp := "", ""
	tick := time.NewTicker(s.cfg.Poll)
	defer tick.Stop()
	var restartAt time.Time // when a worker that exited by itself is started again
	var started time.Time
	for {
		if now := fingerprint(s.root); now != fp {
			fp = now
			s.status("building…")
			start := time.Now()
			next, err := s.build(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil && cur != nil:
				s.status("build failed; the running worker (pid %d) keeps serving:\n%s", cur.cmd.Process.Pid, err)
			case err != nil:
				s.status("build failed; waiting for a change:\n%s", err)
			default:
				built := time.Since(start)
				prev := cur
				if cur, err = s.swap(ctx, cur, next); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					if cur != nil {
						s.status("the new build did not get ready; the running worker (pid %d) keeps serving: %v", cur.cmd.Process.Pid, err)
						_ = os.Remove(next)
						break
					}
					s.status("did not start: %v", err)
					restartAt = time.Now().Add(backoff)
				}
				if cur != prev || cur == nil {
					if bin != "" {
						_ = os.Remove(bin) // the stopped worker's binary
					}
					bin, backoff = next, s.cfg.MinBackoff
				}
				if err == nil {
					started, restartAt = time.Now(), time.Time{}
					s.status("ready (pid %d%s; built in %s, serving %s after the change)", cur.cmd.Process.Pid, addrNote(cur.addr),
						built.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
				}
			}
		}
		if cur == nil && bin != "" && !restartAt.IsZero() && !time.Now().Before(restartAt) {
			var err error
			if cur, err = s.swap(ctx, nil, bin); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.log.Warn("worker did not start", "error", err)
				restartAt = time.Now().Add(backoff)
				backoff = min(2*backoff, s.cfg.MaxBackoff)
			} else {
				started, restartAt = time.Now(), time.Time{}
			}
		}
		var exited <-chan error
		if cur != nil {
			exited = cur.done
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-exited:
			if err == nil {
				err = errors.New("exited with status 0")
			}
			cur = nil
			if time.Since(started) > 4*s.cfg.MaxBackoff {
				backoff = s.cfg.MinBackoff // it ran a good while: a new crash starts afresh
			}
			s.log.Warn("worker exited; restarting", "error", err, "after", backoff)
			restartAt = time.Now().Add(backoff)
			backoff = min(2*backoff, s.cfg.MaxBackoff)
		case <-tick.C:
		}
	}
}

func addrNote(addr string) string {
	if addr == "" {
		return ""
	}
	return ", " + addr
}

// build compiles the package into a new binary and returns its path; the
// error carries the compiler's output.
func (s *supervisor) build(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.BuildTimeout)
	defer cancel()
	s.builds++
	bin := fmt.Sprintf("%s-%d", s.bin, s.builds)
	start := time.Now()
	var out strings.Builder
	cmd := exec.CommandContext(ctx, s.cfg.Go, "build", "-o", bin, ".")
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), s.cfg.Env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", s.dir, err, strings.TrimRight(out.String(), "\n"))
	}
	s.log.Info("worker built", "took", time.Since(start).Round(time.Millisecond))
	return bin, nil
}

// swap starts bin and, once it is ready, stops old (when not nil), and
// returns the process that runs then. When the new process serves another
// contract than old under Config.Ready's key, a registry refuses it beside
// old: the new one is stopped, old drains (Config.Draining) and the new one
// starts again on a fresh address while old finishes its calls. When the new
// process does not get ready, old keeps serving and is returned with the
// error.
func (s *supervisor) swap(ctx context.Context, old *proc, bin string) (running *proc, err error) {
	p, err := s.start(ctx, bin)
	if err != nil {
		return old, err
	}
	if old == nil || old.contract == p.contract {
		if old != nil {
			s.stop(old)
		}
		return p, nil
	}
	if s.cfg.Joined != nil && s.cfg.Joined(ctx, p.addr) {
		s.log.Info("worker contract extended: the new worker serves beside the old one, which stops", "pid", old.cmd.Process.Pid)
		s.status("contract extended: the new worker took over beside the old one, with no gap")
		s.stop(old)
		return p, nil
	}
	s.stop(p)
	if s.cfg.Draining == nil {
		s.log.Info("worker contract changed: the old worker stops before the new one announces", "pid", old.cmd.Process.Pid)
		s.stop(old)
		return s.start(ctx, bin)
	}
	s.log.Info("worker contract changed: the old worker drains while the new one starts", "pid", old.cmd.Process.Pid)
	stopped := make(chan struct{})
	var once sync.Once
	signal := func() {
		once.Do(func() {
			go func() { defer close(stopped); s.stop(old) }()
		})
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.StopTimeout)
	err = s.cfg.Draining(dctx, old.addr, signal)
	cancel()
	signal() // in case Draining failed before stopping it
	if err != nil {
		s.log.Warn("the old worker's drain was not seen; starting the new one once it is gone", "error", err)
		<-stopped
	}
	p, err = s.start(ctx, bin)
	<-stopped // old is gone by now in practice: its calls are short, the start waits for the new one to be ready
	return p, err
}

// start runs bin and waits for Config.Ready.
func (s *supervisor) start(ctx context.Context, bin string) (*proc, error) {
	args := s.cfg.Args
	p := &proc{done: make(chan error, 1)}
	if s.cfg.Listen != "" {
		addr, err := freeAddr(s.cfg.Listen)
		if err != nil {
			return nil, err
		}
		p.addr = addr
		args = append(slices.Clone(args), "--listen", addr)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = s.dir
	p.cmd.Env = append(os.Environ(), s.cfg.Env...)
	p.cmd.Stdout, p.cmd.Stderr = s.cfg.Stdout, s.cfg.Stderr
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	s.log.Info("worker started", "pid", p.cmd.Process.Pid)
	go func() { p.done <- p.cmd.Wait() }()
	if s.cfg.Ready == nil {
		return p, nil
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	type result struct {
		key string
		err error
	}
	ready := make(chan result, 1)
	go func() {
		k, err := s.cfg.Ready(rctx, p.addr)
		ready <- result{k, err}
	}()
	select {
	case r := <-ready:
		if r.err != nil {
			s.stop(p)
			return nil, fmt.Errorf("not ready within %s: %w", s.cfg.ReadyTimeout, r.err)
		}
		p.contract = r.key
		return p, nil
	case err := <-p.done:
		p.done <- err // for stop
		cancel()
		<-ready
		return nil, fmt.Errorf("exited before it was ready: %v", err)
	}
}

// freeAddr is host with a port free now.
func freeAddr(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("devworker: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// stop sends SIGTERM, waits up to StopTimeout, then kills.
func (s *supervisor) stop(p *proc) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		s.log.Info("worker stopped", "pid", p.cmd.Process.Pid)
	case <-time.After(s.cfg.StopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		s.log.Warn("worker killed: no exit within the stop timeout", "pid", p.cmd.Process.Pid, "timeout", s.cfg.StopTimeout)
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
