package jsonq

import (
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// longPath builds a path of 4,194,304 elements in 22 doublings.
const longPath = `[0] | until(length >= 4000000; . + .)`

// TestQueryBombs is a corpus of queries built to take the worker down: each
// must end as an execution error, and this process (which runs them) must live.
// It runs alone and one bomb at a time (no t.Parallel): the memory guard
// measures the heap's growth while a query runs, which parallel bombs would share.
func TestQueryBombs(t *testing.T) {
	svc := New(Config{Timeout: 2 * time.Second})
	bombs := []struct{ name, query string }{
		{"setpath stack bomb (issue 10)", longPath + ` | . as $p | null | setpath($p; 1) | length`},
		{"getpath over a long path", longPath + ` | . as $p | null | getpath($p)`},
		{"delpaths over a long path", longPath + ` | . as $p | {} | delpaths([$p])`},
		{"assignment through a long path", longPath + ` | . as $p | null | getpath($p) |= 1`},
		{"fromstream of a long path", longPath + ` | . as $p | fromstream([$p, 1], [[$p[0]]])`},
		{"calling a guard's builtin by name", `null | _tfguard_setpath([0]; 1)`},
		{"a deep value by reduce", `reduce range(100000000) as $i (null; [.]) | tojson | length`},
		{"endless recursion", `def f: [f]; f`},
		{"a huge array", `[range(1e9)] | length`},
		{"a huge string", `[limit(1000000; repeat("x" * 1000))] | add | length`},
		{"exponential doubling", `"x" | until(length > 1e12; . + .) | length`},
		{"deep result", `reduce range(5000) as $i (0; [.])`},
	}
	for _, b := range bombs {
		t.Run(b.name, func(t *testing.T) {
			_, err := svc.Query(t.Context(), &jsonqv1.QueryRequest{Query: b.query, Input: docJSON(`{"a":[1,2,3]}`)})
			if _, ok := tool.AsToolError(err); !ok {
				t.Fatalf("err = %v (%T), want an execution error", err, err)
			}
		})
	}
}

// TestPathGuards: the path builtins refuse paths over maxPathLength with a
// message a model can act on, and still work below it.
func TestPathGuards(t *testing.T) {
	t.Parallel()
	svc := New(Config{})
	over := `[0] | until(length > 1000; . + .) | . as $p | `
	for _, q := range []string{over + `null | setpath($p; 1)`, over + `null | getpath($p)`, over + `{} | delpaths([$p])`,
		over + `null | getpath($p) |= 1`, over + `fromstream([$p, 1], [[$p[0]]])`} {
		_, err := svc.Query(t.Context(), &jsonqv1.QueryRequest{Query: q, Input: docJSON(`null`)})
		te, ok := tool.AsToolError(err)
		if !ok || !strings.Contains(te.GetMessage(), "the path has more than 1000 elements") {
			t.Errorf("%s: %v, want the path guard's execution error", q, err)
		}
	}
	resp, err := svc.Query(t.Context(), &jsonqv1.QueryRequest{Query: `null | setpath(["a", 0, "b"]; 1) | getpath(["a", 0]) | tojson`, Input: docJSON(`null`)})
	if err != nil || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetStringValue() != `{"b":1}` {
		t.Fatalf("short paths: %v %v", resp, err)
	}
}

// TestMemoryBound: the queries (a recursion that grows the stack, an
// endless array) and single steps that build a huge value end as memory
// errors, and the heap this process grows while each runs stays within the
// documented MaxQueryBytes (256 MiB). The peak is sampled every millisecond;
// the test runs alone so that the heap is the query's.
func TestMemoryBound(t *testing.T) {
	svc := New(Config{Timeout: 10 * time.Second})
	const (
		heap  = "the query used too much memory"
		guard = "the query would build a value over"
	)
	queries := []struct {
		query string
		want  []string
	}{
		// Recursion and endless arrays grow a step at a time: the heap check
		// stops them (or, on a slow machine, the time limit first).
		{`def f: 1 + f; f`, []string{heap, "the query ran longer than"}},
		{`[repeat(1)]`, []string{heap, "the query ran longer than"}},
		// Doubling: the heap check or the guard of +, whichever comes first.
		{`"x" | until(length > 1e12; . + .)`, []string{heap, guard}},
		{`[0] | until(length > 1e9; . + .)`, []string{heap, guard}},
		// One step that would build a huge value: refused before it runs.
		{`"x" * 2000000000`, []string{guard}},
		{`("x" * 100000) as $s | [range(1000) | $s] | add`, []string{guard}},
		{`("x" * 100000) as $s | [range(1000) | $s] | join(",")`, []string{guard}},
		{`("x" * 100000) as $s | [range(1000) | $s] | tojson`, []string{guard}},
		{`("x" * 100000) as $s | [range(1000) | $s] | tostring`, []string{guard}},
		{`("x" * 100000) as $s | [range(1000) | $s] | add(.[])`, []string{guard}},
	}
	for _, q := range queries {
		t.Run(q.query, func(t *testing.T) {
			grown := sampleHeapGrowth()
			start := time.Now()
			_, err := svc.Query(t.Context(), &jsonqv1.QueryRequest{Query: q.query, Input: docJSON(`null`)})
			grew := grown()
			t.Logf("%s: heap grew at most %d MiB in %s: %v", q.query, grew>>20, time.Since(start).Round(time.Millisecond), err)
			te, ok := tool.AsToolError(err)
			if !ok || !slices.ContainsFunc(q.want, func(w string) bool { return strings.Contains(te.GetMessage(), w) }) {
				t.Fatalf("err = %v, want an execution error containing one of %q", err, q.want)
			}
			if grew > DefaultMaxQueryBytes {
				t.Fatalf("the heap grew %d MiB, over the bound of %d MiB", grew>>20, DefaultMaxQueryBytes>>20)
			}
		})
	}
}

// TestGuardedOperators: + and * rewritten into guards give jq's results in
// jq's order, for generators too.
func TestGuardedOperators(t *testing.T) {
	t.Parallel()
	svc := New(Config{})
	for query, want := range map[string]string{
		`[(1,2) + (10,20)]`:                 `[11,12,21,22]`,
		`[(1,2) * (10,20)]`:                 `[10,20,20,40]`,
		`"ab" * 3`:                          `"ababab"`,
		`[1] + [2]`:                         `[1,2]`,
		`{"a":{"b":1}} * {"a":{"c":2}}`:     `{"a":{"b":1,"c":2}}`,
		`[1, 2, 3] | add`:                   `6`,
		`add(1, 2)`:                         `3`,
		`["a", "b"] | join("-")`:            `"a-b"`,
		`{"a": [1]} | tojson`:               `"{\"a\":[1]}"`,
		`[1, "x"] | map(tostring)`:          `["1","x"]`,
		`def f(x): x * 2; [f(1, 2)]`:        `[2,4]`,
		`reduce range(5) as $i (0; . + $i)`: `10`,
	} {
		resp, err := svc.Query(t.Context(), &jsonqv1.QueryRequest{Query: query, Input: docJSON(`null`), MaxResults: 1})
		if err != nil {
			t.Errorf("%s: %v", query, err)
			continue
		}
		if got := resultsJSON(t, resp); got != "["+want+"]" {
			t.Errorf("%s = %s, want [%s]", query, got, want)
		}
	}
}

// sampleHeapGrowth starts sampling the live heap every millisecond (after a
// GC, from the heap it finds then); the returned func stops the sampling and
// returns the largest growth seen.
func sampleHeapGrowth() (stop func() uint64) {
	runtime.GC()
	base, _ := heapBytes()
	var peak atomic.Uint64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if h, _ := heapBytes(); h > peak.Load() {
					peak.Store(h)
				}
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-stopped
		if p := peak.Load(); p > base {
			return p - base
		}
		return 0
	}
}
