package jsonq

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/internal/procmem"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

// stringBombs are issue 32's single-step bombs (item 5) and their kin: one
// builtin that builds a huge string or array from small operands, which gojq
// runs in Go without looking at the context. Each ends as an execution error
// before the caller's deadline, within the memory bound.
var stringBombs = []struct{ name, query string }{
	// The queries, verbatim (the 80 MB operand is now refused itself).
	{"issue @base64", `("x"*80000000) as $s | [$s,$s,$s,$s,$s,$s,$s,$s,$s,$s] | @base64`},
	{"issue @csv", `("x"*80000000) as $s | [$s,$s,$s,$s,$s,$s,$s,$s,$s,$s] | @csv`},
	{"issue splits 20 MB", `("," * 20000000) | [splits(",")] | length`},
	// The same with operands under the value bound: the limit holds inside
	// the string operation.
	{"@base64 of shared 10 MB strings", `("x"*10000000) as $s | [range(100) | $s] | @base64`},
	{"@csv of shared 10 MB strings", `("x"*10000000) as $s | [range(100) | $s] | @csv`},
	{"@html of quotes", `("\"" * 10000000) | @html`},
	{"@uri", `(" " * 10000000) | @uri`},
	{"format(\"sh\")", `("'" * 10000000) | format("sh")`},
	{"tostring of shared strings", `("x"*10000000) as $s | [range(100) | $s] | tostring`},
	{"tojson of control characters", `("\u0000" * 10000000) | tojson`},
	{"interpolation", `("x"*10000000) as $s | "\($s)\($s)\($s)\($s)\($s)\($s)\($s)\($s)\($s)\($s)" | length`},
	{"@base64 interpolation", `("x"*10000000) as $s | @base64 "\($s)\($s)\($s)\($s)\($s)\($s)\($s)\($s)" | length`},
	{"splits 10 MB", `("," * 10000000) | [splits(",")] | length`},
	{"gsub of every character", `("x" * 10000000) | gsub(""; "yy") | length`},
	{"split by the empty string", `("x" * 10000000) | split("") | length`},
	{"string division", `("," * 10000000) / "," | length`},
	{"explode", `("x" * 10000000) | explode | length`},
	{"indices", `("x" * 10000000) | indices("x") | length`},
	{"flatten of a shared tree", `reduce range(30) as $i ([1]; [., .]) | flatten | length`},
	{"transpose", `[range(3000) | []] + [[range(3000)]] | transpose | length`},
	{"array minus array", `[range(20000)] as $a | $a - $a | length`},
	{"assignment far past the end", `null | .[300000000] = 1 | length`},
	{"update far past the end", `[] | .[300000000] += 1 | length`},
	{"pick far past the end", `[] | pick(.[300000000]) | length`},
	{"fromjson", `("[" + ("0," * 8000000) + "0]") | fromjson | length`},
}

// TestStringBombs runs every bomb in a child process (this test binary, run
// again) with a caller deadline of 1 s and a query time limit of 10 s, as a
// gateway that gives up first would: the child's answer must come by the
// deadline (plus scheduling slack) — the query returns only once gojq has
// stopped, so the worker has stopped computing — and the Go heap must grow
// less than MaxQueryBytes. Without the guards these ran for many seconds
// past the deadline and grew the heap by gigabytes.
func TestStringBombs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	const deadline = time.Second
	for _, b := range stringBombs {
		t.Run(b.name, func(t *testing.T) {
			r := runBombChild(t, b.query, deadline)
			t.Logf("%s: answered in %s, heap grew %d MiB, VmHWM %d MiB: %s", b.query,
				time.Duration(r.Nanos).Round(time.Millisecond), r.HeapGrowth>>20, r.VmHWM>>20, r.Err)
			// An execution error, or (on a slow machine) the caller's deadline.
			if !r.ToolError && !strings.Contains(r.Err, "deadline") {
				t.Errorf("err = %q, want an execution error", r.Err)
			}
			if slack := 2 * time.Second; time.Duration(r.Nanos) > deadline+slack {
				t.Errorf("answered after %s, past the deadline of %s", time.Duration(r.Nanos), deadline)
			}
			if r.HeapGrowth > DefaultMaxQueryBytes {
				t.Errorf("the heap grew %d MiB, over the bound of %d MiB", r.HeapGrowth>>20, DefaultMaxQueryBytes>>20)
			}
		})
	}
}

type bombResult struct {
	Nanos      int64
	HeapGrowth uint64
	VmHWM      uint64
	Err        string
	ToolError  bool
}

const bombEnv = "JSONQ_STRING_BOMB"

// runBombChild runs query in a child process and returns what it measured.
func runBombChild(t *testing.T, query string, deadline time.Duration) bombResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStringBombChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), bombEnv+"="+query, bombEnv+"_DEADLINE="+deadline.String(), "GOGC=100")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	for line := range strings.Lines(out.String()) {
		if rest, ok := strings.CutPrefix(line, "BOMB "); ok {
			var r bombResult
			if jErr := json.Unmarshal([]byte(rest), &r); jErr != nil {
				t.Fatalf("child result %q: %v", rest, jErr)
			}
			return r
		}
	}
	t.Fatalf("child process: %v\n%s", err, out.String())
	return bombResult{}
}

// TestStringBombChild is the child of TestStringBombs: it runs one query and
// prints its measures.
func TestStringBombChild(t *testing.T) {
	query := os.Getenv(bombEnv)
	if query == "" {
		t.Skip("only as the child of TestStringBombs")
	}
	deadline, _ := time.ParseDuration(os.Getenv(bombEnv + "_DEADLINE"))
	svc := New(Config{Timeout: 10 * time.Second})
	grown := sampleHeapGrowth()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	_, err := svc.Query(ctx, &jsonqv1.QueryRequest{Query: query, Input: docJSON(`null`)})
	took := time.Since(start)
	r := bombResult{Nanos: int64(took), HeapGrowth: grown(), VmHWM: vmHWM()}
	if err != nil {
		r.Err = truncateText(err.Error(), 300)
	}
	_, r.ToolError = tool.AsToolError(err)
	b, _ := json.Marshal(r)
	os.Stdout.Write(append(append([]byte("BOMB "), b...), '\n'))
}

// vmHWM is the process's peak resident memory (Linux), for the log; 0 when
// unreadable (the bound is asserted on the Go heap's growth).
func vmHWM() uint64 {
	n, _ := procmem.Peak(0)
	return uint64(max(n, 0))
}

// TestErrorMessageBounded: error("x" * 1e7) comes back, and is logged, cut
// to MaxErrorBytes with a note; error(big value) shows a preview.
func TestErrorMessageBounded(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	conn := tooltest.Serve(t, tool.Config{Name: "jsonq", Logger: logger}, func(w *tool.Worker) {
		jsonqv1.RegisterJSONQueryServiceServer(w, New(Config{}))
	})
	client := jsonqv1.NewJSONQueryServiceClient(conn)
	for _, q := range []string{`error("x" * 10000000)`, `error("é" * 5000000)`, `error({a: ("x" * 10000000)})`, `error([range(100000)])`, `"x" * 10000000 | halt_error`} {
		_, err := client.Query(t.Context(), &jsonqv1.QueryRequest{Query: q, Input: docJSON(`null`)})
		te, ok := tool.AsToolError(err)
		if !ok {
			t.Fatalf("%s: %v, want an execution error", q, err)
		}
		if n := len(te.GetMessage()); n > MaxErrorBytes+200 {
			t.Errorf("%s: the message is %d bytes, over %d", q, n, MaxErrorBytes+200)
		}
		if !strings.Contains(te.GetMessage(), "cut") {
			t.Errorf("%s: the message %q does not say it was cut", q, truncateText(te.GetMessage(), 200))
		}
		if !utf8Valid(te.GetMessage()) {
			t.Errorf("%s: the message is not valid UTF-8", q)
		}
	}
	time.Sleep(100 * time.Millisecond) // the interceptor logs after answering
	for line := range strings.Lines(logs.String()) {
		if len(line) > 3*MaxErrorBytes {
			t.Errorf("a log line of %d bytes: %.200s", len(line), line)
		}
	}
	if !strings.Contains(logs.String(), "tool call failed") {
		t.Errorf("no call was logged:\n%.500s", logs.String())
	}
}

// syncWriter serializes the writes of the server's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func utf8Valid(s string) bool { return utf8.ValidString(s) }
