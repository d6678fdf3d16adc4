package jsonq_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/internal/procmem"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/jsonq/jsonq"
)

// workerBin is the jq worker's binary built once without the race detector:
// VmHWM is the peak of a whole process, so what it measures runs alone in
// one, and the race detector's shadow memory would be most of it.
var workerBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "jsonq")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "jsonq")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/toolfleet/toolfleet/workers/jsonq")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./workers/jsonq: %v\n%s", err, out)
	}
	return bin, nil
})

// startWorker runs the jq worker binary with args and returns its process
// and a client of it.
func startWorker(t *testing.T, env []string, args ...string) (*os.Process, jsonqv1.JSONQueryServiceClient) {
	t.Helper()
	bin, err := workerBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "GOGC=100"), env...)
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		defer close(addr)
		sc := bufio.NewScanner(logs)
		sent := false
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "worker serving" && !sent {
				addr <- line.Addr
				sent = true
			}
		}
	}()
	var a string
	select {
	case a = <-addr:
	case <-time.After(time.Minute):
	}
	if a == "" {
		t.Fatal("the worker did not say where it serves within a minute")
	}
	conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return cmd.Process, jsonqv1.NewJSONQueryServiceClient(conn)
}

func peak(t *testing.T, p *os.Process) int64 {
	t.Helper()
	n, err := procmem.Peak(p.Pid)
	if err != nil {
		t.Fatalf("the worker's peak memory: %v", err)
	}
	return n
}

// TestQueryMemoryPeak: a caller sends many heavy queries at once — each a
// 4 MiB document of one-key objects, the shape that takes the most memory
// once decoded (about 210 MiB each) — to a worker process with
// GOMEMLIMIT=1280MiB, so its default query memory is 960 MiB. A heavy query
// reserves 512 MiB (256 MiB for its steps, 64 bytes per request byte), so
// they run one at a time, the others waiting or refused as busy (or past
// their deadline, as a caller gives up); another caller's light query
// (256 MiB) is admitted beside one; and the process's peak stays within its
// baseline plus the ceiling and the quarter of GOMEMLIMIT over it, the
// collector's headroom. Without the ceiling (--query-memory none) they
// decode at once and the peak passes the bound by far.
func TestQueryMemoryPeak(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a process and fills it with hundreds of MiB")
	}
	const gomemlimit = 1280 << 20
	const ceiling = gomemlimit / 4 * 3 // the default, procmem.Ceiling
	const heavies = 8
	proc, client := startWorker(t, []string{fmt.Sprintf("GOMEMLIMIT=%dMiB", gomemlimit>>20)})

	light := &jsonqv1.QueryRequest{Query: ".tenant", Input: &jsonqv1.QueryRequest_DocumentJson{DocumentJson: `{"tenant": "other"}`}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := client.Query(ctx, light); err != nil {
		t.Fatalf("warm-up query: %v", err)
	}
	baseline := peak(t, proc)

	unit := `{"":0},`
	n := (jsonq.DefaultMaxInputBytes - 1024) / len(unit) // the request within gRPC's 4 MiB
	doc := "[" + strings.Repeat(unit, n-1) + strings.TrimSuffix(unit, ",") + "]"
	heavy := &jsonqv1.QueryRequest{Query: "length", Input: &jsonqv1.QueryRequest_DocumentJson{DocumentJson: doc}}

	var wg sync.WaitGroup
	errs := make([]error, heavies)
	for i := range heavies {
		wg.Go(func() {
			// Each waits up to its deadline; a refusal is an answer too.
			hctx, hcancel := context.WithTimeout(ctx, 20*time.Second)
			defer hcancel()
			_, errs[i] = client.Query(hctx, heavy)
		})
	}
	// Another caller's light query, while the heavy ones hold the worker.
	lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
	defer lcancel()
	resp, lerr := client.Query(lctx, light)
	wg.Wait()
	top := peak(t, proc)

	if lerr != nil || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetStringValue() != "other" {
		t.Errorf("the other caller's light query: %v %v, want \"other\"", resp.GetResults(), lerr)
	}
	answered, busy, late := 0, 0, 0
	for i, err := range errs {
		te, isTool := tool.AsToolError(err)
		switch {
		case err == nil:
			answered++
		case isTool && strings.Contains(te.GetMessage(), "the jq worker is busy; try again") && te.GetCanRetry():
			busy++
		case status.Code(err) == codes.DeadlineExceeded:
			late++
		default:
			t.Errorf("heavy query %d: %v, want an answer or a retryable busy refusal", i, err)
		}
	}
	if answered == 0 {
		t.Errorf("no heavy query was answered: the test measured nothing")
	}
	bound := baseline + ceiling/3*4
	t.Logf("%d heavy queries: %d answered, %d refused as busy, %d past their deadline; worker VmHWM %d MiB before them, %d MiB after (bound %d MiB: baseline + 4/3 × %d MiB of query memory)",
		heavies, answered, busy, late, baseline>>20, top>>20, bound>>20, ceiling>>20)
	if top > bound {
		t.Errorf("the worker's peak is %d MiB, over its baseline %d MiB plus 4/3 of the query memory %d MiB", top>>20, baseline>>20, ceiling>>20)
	}
}
