package reliability

// The fleet as separate processes, for the tests that kill a gateway or a
// worker with SIGKILL (exactlyonce_test.go): the production binaries
// (cmd/gateway, workers/kv, cmd/orchestrator) built once per test binary,
// on NATS and Temporal embedded in the test process.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// The binaries, built once by fleetBinaries; binDir is removed by TestMain.
var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// fleetBinaries builds the gateway, the kv worker and the orchestrator into a
// temporary folder once per test binary and returns the folder. It builds
// with -race when the tests run with it: the packages are then already in the
// build cache from compiling this test binary, and only linking is left.
func fleetBinaries(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "toolfleet-reliability-bin-")
		if binErr != nil {
			return
		}
		args := []string{"build", "-o", binDir + string(os.PathSeparator)}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "./cmd/gateway", "./cmd/orchestrator", "./workers/kv")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join("..", "..") // the module's root
		began := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "reliability: built the fleet's binaries in %s\n", time.Since(began).Round(time.Millisecond))
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

// removeBinaries removes what fleetBinaries built (TestMain, after the tests).
func removeBinaries() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// freePort returns a loopback port that was free a moment ago: a process
// restarted after a kill listens on the same one, as a pod behind a Service
// keeps its address.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is one process of the fleet, killed and started again by the test.
// Its stderr (every incarnation) goes to a log file, shown when the test
// fails.
type proc struct {
	t    testing.TB
	name string
	bin  string
	args []string
	env  []string
	log  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

// startProc starts bin with args (and env added to the test's environment)
// and stops it with SIGTERM (then SIGKILL after 10 s) when the test ends.
func startProc(t testing.TB, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, bin: bin, args: args, env: append(os.Environ(), env...), log: filepath.Join(t.TempDir(), name+".log")}
	p.Start()
	t.Cleanup(func() {
		p.mu.Lock()
		cmd, exited := p.cmd, p.exited
		p.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		if t.Failed() {
			t.Logf("%s: last lines of its log (%d starts):\n%s", name, p.starts, tail(p.log, 25))
		}
	})
	return p
}

// Start starts the process (again, after Kill).
func (p *proc) Start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.starts++
	p.mu.Unlock()
}

// Kill kills the process with SIGKILL and waits until it is gone.
func (p *proc) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// dialGateway is a plain gRPC connection to a gateway's address, which
// outlives the gateway's restarts (grpc-go reconnects).
func dialGateway(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	// Reconnect within 200 ms of a restart (grpc-go's default backoff waits
	// a second or more): callers meet a restarted gateway as soon as it
	// listens, as a client behind a Service meets a new pod.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6,
			Jitter: 0.2, MaxDelay: 200 * time.Millisecond}, MinConnectTimeout: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// waitTool waits (bounded by ctx) until the gateway at cc is SERVING and
// knows tool (ctx may carry a token).
func waitTool(ctx context.Context, t testing.TB, cc *grpc.ClientConn, tool string) {
	t.Helper()
	hc := healthpb.NewHealthClient(cc)
	gc := toolfleetv1.NewToolGatewayServiceClient(cc)
	var last error
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h, err := hc.Check(rctx, &healthpb.HealthCheckRequest{})
		if err == nil && h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			err = fmt.Errorf("health %s", h.GetStatus())
		}
		if err == nil {
			_, err = gc.GetTool(rctx, &toolfleetv1.GetToolRequest{ToolId: tool})
		}
		cancel()
		if err == nil {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never served %s: %v", cc.Target(), tool, last)
}
