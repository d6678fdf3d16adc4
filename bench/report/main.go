// Command report runs toolfleet's benchmarks and rewrites the figures in
// docs/performance.md: every `<!-- bench:NAME -->` … `<!-- /bench:NAME -->`
// block is replaced with the latest run of suite NAME (the command, when it
// ran, and a table of what it reported), and the `machine` block with what
// the numbers were measured on. Text outside the blocks is left alone.
//
//	make bench                                  # every suite (a few minutes on 2 cores)
//	go run ./bench/report -only gateway,code-mode
//	go run ./bench/report -runs 200 -dry        # print the blocks, write nothing
//
// A suite that fails leaves its block as it was; the command then exits 1.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// suite is one benchmark command and how its output becomes a block.
type suite struct {
	name  string // block name in the doc
	pkg   string
	bench string // -bench pattern; empty for a test whose log line is read
	test  string // -run pattern when bench is empty
	time  string // -benchtime
	// env adds variables (the runs of BenchmarkAgentConcurrentRuns).
	env     []string
	timeout time.Duration
	// logMetrics reads metrics from a test's -v output (see parseLog).
	logMetrics []logMetric
}

func suites(runs int) []suite {
	return []suite{
		{name: "gateway", pkg: "./bench", bench: "GatewayCall", time: "5000x", timeout: 10 * time.Minute},
		{name: "journal", pkg: "./bench", bench: "JournaledCall", time: "3000x", timeout: 10 * time.Minute},
		{name: "surfaces", pkg: "./bench", bench: "Surfaces", time: "3000x", timeout: 10 * time.Minute},
		{name: "nats-lock", pkg: "./bench", bench: "NATSRoundTrip", time: "5000x", timeout: 5 * time.Minute},
		{name: "formats", pkg: "./sdk/llm/wire", bench: "ParseVsSDK", time: "2000x", timeout: 5 * time.Minute},
		{name: "agent-step", pkg: "./bench", bench: "AgentStep", time: "5x", timeout: 10 * time.Minute},
		{name: "concurrent-runs", pkg: "./bench", bench: "AgentConcurrentRuns", time: "1x", timeout: 30 * time.Minute,
			env: []string{"TOOLFLEET_BENCH_RUNS=" + strconv.Itoa(runs)}},
		{name: "code-mode", pkg: "./bench", bench: "CodeMode", time: "10x", timeout: 10 * time.Minute},
		{name: "history", pkg: "./orchestrator/agent", test: "^TestHistoryStaysSmall$", timeout: 10 * time.Minute,
			logMetrics: historyMetrics},
	}
}

func main() {
	doc := flag.String("doc", "docs/performance.md", "the document whose bench blocks are rewritten")
	only := flag.String("only", "", "comma-separated suites to run (default: all)")
	runs := flag.Int("runs", 1000, "concurrent runs of the concurrent-runs suite")
	dry := flag.Bool("dry", false, "print the blocks instead of writing the document")
	list := flag.Bool("list", false, "list the suites and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *doc, *only, *runs, *dry, *list); err != nil {
		fmt.Fprintln(os.Stderr, "bench report:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, doc, only string, runs int, dry, list bool) error {
	all := suites(runs)
	if list {
		for _, s := range all {
			fmt.Println(s.name, "\t", s.command())
		}
		return nil
	}
	selected, err := pick(all, only)
	if err != nil {
		return err
	}
	text, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	out := string(text)
	blocks := map[string]string{"machine": machineBlock()}
	var failed []string
	for _, s := range selected {
		fmt.Fprintf(os.Stderr, "== %s: %s\n", s.name, s.command())
		block, err := s.run(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "== %s failed: %v\n", s.name, err)
			failed = append(failed, s.name)
			continue
		}
		blocks[s.name] = block
	}
	for name, block := range blocks {
		if out, err = replaceBlock(out, name, block); err != nil {
			return err
		}
	}
	if dry {
		for _, s := range append([]suite{{name: "machine"}}, selected...) {
			if b, ok := blocks[s.name]; ok {
				fmt.Printf("<!-- bench:%s -->\n%s<!-- /bench:%s -->\n\n", s.name, b, s.name)
			}
		}
	} else if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("suites failed (their blocks were left as they were): %s", strings.Join(failed, ", "))
	}
	return nil
}

func pick(all []suite, only string) ([]suite, error) {
	if only == "" {
		return all, nil
	}
	var out []suite
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, s := range all {
			if s.name == strings.TrimSpace(name) {
				out, found = append(out, s), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no suite %q (see -list)", name)
		}
	}
	return out, nil
}

// args are the go test arguments of the suite.
func (s suite) args() []string {
	a := []string{"test", s.pkg, "-count=1", "-timeout", s.timeout.String()}
	if s.bench != "" {
		return append(a, "-run", "^$", "-bench", s.bench, "-benchtime", s.time)
	}
	return append(a, "-run", s.test, "-v")
}

// command is the suite as a user would type it.
func (s suite) command() string {
	var b strings.Builder
	for _, e := range s.env {
		b.WriteString(e + " ")
	}
	b.WriteString("go")
	for _, a := range s.args() {
		if strings.ContainsAny(a, "^$|* ") {
			a = "'" + a + "'"
		}
		b.WriteString(" " + a)
	}
	return b.String()
}

// run executes the suite, echoing its output, and renders its block.
func (s suite) run(ctx context.Context) (string, error) {
	began := time.Now()
	cmd := exec.CommandContext(ctx, "go", s.args()...)
	cmd.Env = append(os.Environ(), s.env...)
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, os.Stderr)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return "", err
	}
	var rows []result
	if s.bench != "" {
		rows = parseBench(out.String())
	} else {
		rows = parseLog(out.String(), s.logMetrics)
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("the output reported no figures")
	}
	head := fmt.Sprintf("`%s` — %s, %s\n\n", s.command(), began.UTC().Format("2006-01-02 15:04 MST"), time.Since(began).Round(time.Second))
	return head + table(rows), nil
}

// machineBlock says what the figures were measured on, load included: the
// machine is shared, and the ratios are what to compare between runs.
func machineBlock() string {
	cpu := firstField("/proc/cpuinfo", "model name")
	mem := firstField("/proc/meminfo", "MemTotal")
	load, _ := os.ReadFile("/proc/loadavg")
	fields := strings.Fields(string(load))
	if len(fields) > 3 {
		fields = fields[:3]
	}
	return fmt.Sprintf("%d cores (%s), %s memory, %s, %s/%s; load average %s when the run began (%s).\n",
		runtime.NumCPU(), cpu, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH, strings.Join(fields, " "),
		time.Now().UTC().Format("2006-01-02 15:04 MST"))
}

// firstField returns the value of the first "key : value" line of a /proc file.
func firstField(path, key string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
