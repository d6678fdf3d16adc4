package jsonq

import (
	"strings"
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
