package program_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/internal/procmem"
	"github.com/toolfleet/toolfleet/orchestrator/program"
)

// scriptWorkerBin is internal/scriptworker built once without the race
// detector: VmHWM is the peak of a whole process, so what it measures runs
// alone in one, and the race detector's shadow memory would be most of it.
var scriptWorkerBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "scriptworker")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "scriptworker")
	cmd := exec.Command("go", "build", "-o", bin, "./internal/scriptworker")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./internal/scriptworker: %v\n%s", err, out)
	}
	return bin, nil
})

// scriptWorker is an internal/scriptworker child process.
type scriptWorker struct {
	cmd *exec.Cmd
}

// startScriptWorker starts a worker process polling queue with scriptMemory
// bytes of script memory (0: no ceiling), and GOMEMLIMIT gomemlimit when set.
func startScriptWorker(t *testing.T, temporalAddr, namespace, queue string, scriptMemory int64, gomemlimit string) *scriptWorker {
	t.Helper()
	bin, err := scriptWorkerBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-temporal", temporalAddr, "-namespace", namespace, "-queue", queue,
		"-script-memory", strconv.FormatInt(scriptMemory, 10))
	cmd.Env = os.Environ()
	if gomemlimit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+gomemlimit)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		signaled := false
		for sc.Scan() {
			if !signaled && strings.Contains(sc.Text(), "script worker ready") {
				ready <- true
				signaled = true
			}
		}
		if !signaled {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the worker process exited before it was ready")
		}
	case <-time.After(time.Minute):
		t.Fatal("the worker process was not ready within a minute")
	}
	return &scriptWorker{cmd: cmd}
}

// peak is the process's VmHWM (peak resident memory), in bytes.
func (w *scriptWorker) peak(t *testing.T) int64 {
	t.Helper()
	n, err := procmem.Peak(w.cmd.Process.Pid)
	if err != nil {
		t.Fatalf("the worker's peak memory: %v", err)
	}
	return n
}

// outcome is how a program of the peak tests ended.
type outcome struct {
	id   string
	out  program.Output
	perr *program.ProgramError
	err  error
	at   time.Duration
}

// runAll starts every input on queue at once and waits for them all.
func runAll(t *testing.T, c tclient.Client, queue string, ins []program.Input) map[string]outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	res := map[string]outcome{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, in := range ins {
		run, err := c.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: in.ProgramID, TaskQueue: queue,
			WorkflowExecutionTimeout: 3 * time.Minute}, program.WorkflowName, in)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := outcome{id: in.ProgramID}
			o.err = run.Get(ctx, &o.out)
			o.at = time.Since(start)
			var ae *temporal.ApplicationError
			if errors.As(o.err, &ae) && ae.Type() == program.ErrorType {
				var pe program.ProgramError
				if ae.Details(&pe) == nil {
					o.perr = &pe
				}
			}
			mu.Lock()
			res[in.ProgramID] = o
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

// tenantSource is another tenant's ordinary program.
const tenantSource = `
total = 0
for i in range(20000):
    total += i * i
result = total
`

// TestBigIntPeak runs issue 32's big-int attacks in a worker process: they
// end at once as max_int_bits limits, the process's peak stays far below
// the 1.4–1.8 GB the issue measured, and another tenant's program completes
// meanwhile.
func TestBigIntPeak(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	s := devstacktest.Start(t)
	c := devstacktest.Client(t, s)
	const queue = "program-bigint-peak"
	w := startScriptWorker(t, s.Temporal.Address(), s.Namespace(), queue, 0, "")
	before := w.peak(t)
	res := runAll(t, c, queue, []program.Input{
		{ProgramID: "bigint-square", Source: "x = 3\nfor i in range(27):\n    x = x * x\nresult = x > 0\n"},
		{ProgramID: "bigint-parse", Source: `x = int("9" * 1000000)` + "\nresult = x > 0\n"},
		{ProgramID: "bigint-json", Source: `x = json.decode("9" * 1000000)` + "\nresult = x > 0\n"},
		{ProgramID: "bigint-loop", Source: bigPrefix + "y = x\nfor i in range(1000000):\n    y = (y * x) % (x + 1)\n",
			Limits: program.Limits{MaxSteps: program.MaxSteps}},
		{ProgramID: "tenant", Source: tenantSource},
	})
	peak := w.peak(t)
	for id, want := range map[string]string{"bigint-square": program.LimitInt, "bigint-parse": program.LimitInt,
		"bigint-json": program.LimitInt, "bigint-loop": program.LimitSteps} {
		o := res[id]
		if o.perr == nil || o.perr.Limit != want {
			t.Errorf("%s: %v, want a %s limit", id, o.err, want)
			continue
		}
		t.Logf("%s ended after %s: %s", id, o.at.Round(time.Millisecond), o.perr.Message)
	}
	if o := res["tenant"]; o.err != nil || o.out.ResultJSON != "2666466670000" {
		t.Errorf("the other tenant's program: %v %s", o.err, o.out.ResultJSON)
	} else {
		t.Logf("the other tenant's program completed after %s", o.at.Round(time.Millisecond))
	}
	t.Logf("worker process VmHWM: %d MiB before the programs, %d MiB after", before>>20, peak>>20)
	if peak > 200<<20 {
		t.Errorf("the worker process's peak is %d MiB, want under 200 MiB", peak>>20)
	}
}

// TestScriptMemoryPeak runs four programs that each fill most of a 256 MiB
// budget at once in a worker process with 300 MiB of script memory (and
// GOMEMLIMIT 450MiB): they run one after the other (four would need 720 MiB
// of live values), the process's peak stays under what two would take, and
// another tenant's program with a small budget completes meanwhile. A budget
// over the whole script memory is refused.
func TestScriptMemoryPeak(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	s := devstacktest.Start(t)
	c := devstacktest.Client(t, s)
	const queue = "program-memory-peak"
	scriptMemory := int64(300 << 20)
	if os.Getenv("SCRIPT_MEMORY_OFF") != "" { // to measure the peak without a ceiling
		scriptMemory = -1
	}
	w := startScriptWorker(t, s.Temporal.Address(), s.Namespace(), queue, scriptMemory, "450MiB")
	before := w.peak(t)
	// 180 distinct strings of 1 MiB, kept while the script computes on.
	const fill = `keep = ["x" * ((1 << 20) + i) for i in range(180)]
n = 0
for i in range(300000):
    n += 1
result = len(keep)
`
	ins := []program.Input{{ProgramID: "tenant", Source: tenantSource, Limits: program.Limits{MaxMemoryBytes: 16 << 20}},
		{ProgramID: "too-big", Source: "result = 1", Limits: program.Limits{MaxMemoryBytes: 512 << 20}}}
	for i := range 4 {
		ins = append(ins, program.Input{ProgramID: fmt.Sprintf("fill-%d", i), Source: fill,
			Limits: program.Limits{MaxSteps: program.MaxSteps}})
	}
	res := runAll(t, c, queue, ins)
	peak := w.peak(t)
	last := time.Duration(0)
	for i := range 4 {
		o := res[fmt.Sprintf("fill-%d", i)]
		if o.err != nil || o.out.ResultJSON != "180" {
			t.Errorf("%s: %v %s", o.id, o.err, o.out.ResultJSON)
		}
		t.Logf("%s completed after %s", o.id, o.at.Round(time.Millisecond))
		last = max(last, o.at)
	}
	if o := res["tenant"]; o.err != nil || o.out.ResultJSON != "2666466670000" {
		t.Errorf("the other tenant's program: %v %s", o.err, o.out.ResultJSON)
	} else {
		t.Logf("the other tenant's program completed after %s (the last filler after %s)", o.at.Round(time.Millisecond), last.Round(time.Millisecond))
		if o.at >= last {
			t.Errorf("the other tenant's program waited for the fillers")
		}
	}
	if scriptMemory > 0 {
		if o := res["too-big"]; o.perr == nil || o.perr.Limit != program.LimitMemory || !strings.Contains(o.perr.Message, "script memory of this replica") {
			t.Errorf("a budget over the script memory: %v, want a max_memory_bytes limit naming the script memory", o.err)
		} else {
			t.Logf("too-big: %s", o.perr.Message)
		}
	}
	t.Logf("worker process VmHWM: %d MiB before the programs, %d MiB after (script memory %d MiB; -1: none)", before>>20, peak>>20, scriptMemory>>20)
	if peak > 560<<20 {
		t.Errorf("the worker process's peak is %d MiB, want under 560 MiB (four programs at once would take over 720 MiB)", peak>>20)
	}
}
