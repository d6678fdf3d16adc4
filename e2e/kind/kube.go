package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// kubectl runs kubectl with args in the fleet's namespace and returns its
// standard output; the error carries its standard error.
func (h *harness) kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "kubectl", append([]string{"-n", h.cfg.namespace}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// kubectlJSON runs kubectl … -o json and decodes the output into v.
func (h *harness) kubectlJSON(ctx context.Context, v any, args ...string) error {
	out, err := h.kubectl(ctx, append(args, "-o", "json")...)
	if err != nil {
		return err
	}
	return json.Unmarshal(out, v)
}

// pod is what the checks read of a Pod.
type pod struct {
	Metadata struct {
		Name              string            `json:"name"`
		Labels            map[string]string `json:"labels"`
		DeletionTimestamp *time.Time        `json:"deletionTimestamp"`
		OwnerReferences   []struct {
			Kind string `json:"kind"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Status struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			Name         string `json:"name"`
			RestartCount int    `json:"restartCount"`
			Ready        bool   `json:"ready"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (p pod) ready() bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

func (p pod) restarts() int {
	n := 0
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

func (p pod) job() bool {
	for _, o := range p.Metadata.OwnerReferences {
		if o.Kind == "Job" {
			return true
		}
	}
	return false
}

func (h *harness) pods(ctx context.Context, selector string) ([]pod, error) {
	var list struct {
		Items []pod `json:"items"`
	}
	args := []string{"get", "pods"}
	if selector != "" {
		args = append(args, "-l", selector)
	}
	if err := h.kubectlJSON(ctx, &list, args...); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitReady waits until every pod (but finished Job pods) is Running and
// ready, and no pod is being deleted.
func (h *harness) waitReady(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last string
	for {
		pods, err := h.pods(ctx, "")
		if err == nil {
			var waiting []string
			for _, p := range pods {
				switch {
				case p.job():
					if p.Status.Phase != "Succeeded" {
						waiting = append(waiting, p.Metadata.Name+"("+p.Status.Phase+")")
					}
				case p.Metadata.DeletionTimestamp != nil:
					waiting = append(waiting, p.Metadata.Name+"(terminating)")
				case p.Status.Phase != "Running" || !p.ready():
					waiting = append(waiting, p.Metadata.Name+"("+p.Status.Phase+")")
				}
			}
			if len(waiting) == 0 && len(pods) > 0 {
				return nil
			}
			last = strings.Join(waiting, " ")
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods not ready within %s: %s", within, last)
		case <-time.After(2 * time.Second):
		}
	}
}

// forward is a kubectl port-forward kept alive: when the pod behind it goes
// away (the chaos deletes pods), it starts again on the same local port.
type forward struct {
	target string // svc/gateway, pod/nats-0
	remote int
	local  int
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func (h *harness) forward(ctx context.Context, target string, remote int) (*forward, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	local := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	f := &forward{target: target, remote: remote, local: local, stop: make(chan struct{}), done: make(chan struct{})}
	go f.loop(h.cfg.namespace)
	h.mu.Lock()
	h.forwards = append(h.forwards, f)
	h.mu.Unlock()
	// Wait for the first connection to be accepted.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", f.addr(), time.Second)
		if err == nil {
			_ = c.Close()
			return f, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("port-forward %s %d: nothing listens on %s after 60s", target, remote, f.addr())
}

func (f *forward) addr() string { return "127.0.0.1:" + strconv.Itoa(f.local) }

func (f *forward) loop(namespace string) {
	defer close(f.done)
	for {
		cmd := exec.Command("kubectl", "-n", namespace, "port-forward", "--address", "127.0.0.1",
			f.target, strconv.Itoa(f.local)+":"+strconv.Itoa(f.remote))
		stderr, err := cmd.StderrPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err == nil {
			exited := make(chan struct{})
			go func() {
				// kubectl keeps running when the pod behind it is gone and only
				// logs each failed connection: restart it on the first such line.
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					if l := strings.ToLower(sc.Text()); strings.Contains(l, "error") || strings.Contains(l, "lost connection") {
						_ = cmd.Process.Kill()
					}
				}
				_ = cmd.Wait()
				close(exited)
			}()
			select {
			case <-f.stop:
				_ = cmd.Process.Kill()
				<-exited
				return
			case <-exited:
			}
		}
		select {
		case <-f.stop:
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (f *forward) close() {
	f.once.Do(func() {
		close(f.stop)
		<-f.done
	})
}

// harness holds the state the checks share.
type harness struct {
	cfg   config
	start time.Time
	note  string // what the last check measured, printed on its line

	mu       sync.Mutex
	forwards []*forward
	figures  []string
	fleet    *fleet
}

func (h *harness) close() {
	if h.fleet != nil {
		h.fleet.close()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.forwards {
		f.close()
	}
}

// figure records a measured figure for the summary.
func (h *harness) figure(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.figures = append(h.figures, s)
	h.mu.Unlock()
	if h.note == "" {
		h.note = s
	} else {
		h.note += "; " + s
	}
}

// tilt runs `tilt ci` from the repository root with the overlay chosen.
func (h *harness) tilt(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, h.cfg.upTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, "tilt", "ci", "--timeout", h.cfg.upTimeout.String())
	cmd.Dir = h.cfg.repo
	cmd.Env = append(os.Environ(), "TOOLFLEET_OVERLAY="+h.cfg.overlay)
	logPath := filepath.Join(os.TempDir(), "kind-test-tilt-"+h.cfg.overlay+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tilt ci: %w (log: %s)", err, logPath)
	}
	return nil
}
