package program

import (
	"testing"
	"time"

	"go.starlark.net/starlark"
)

// benchSource is pure computation: arithmetic, appends, str(), a join, a
// slice and a dict, the operations the bounded interpreter checks.
const benchSource = `
def f():
    s = 0
    parts = []
    d = {}
    for i in range(20000):
        s = s + i * 2
        parts.append(str(i))
        d[i % 100] = parts[-1:]
    return len(",".join(parts)) + s + len(d)
result = f()
`

// runBench compiles and runs benchSource once, bounded (rewritten, checked
// builtins) or as before, and returns the steps it took and its result.
func runBench(tb testing.TB, bounded bool) (uint64, string) {
	r := &runner{lim: Limits{MaxSteps: MaxSteps, MaxMemoryBytes: DefaultMaxMemoryBytes}}
	d := starlark.StringDict{}
	if bounded {
		r.b = newBounds(r)
		r.b.builtins(d)
	}
	prog, _, err := compile("bench.star", benchSource, d.Has, bounded)
	if err != nil {
		tb.Fatal(err)
	}
	th := &starlark.Thread{Name: "bench"}
	if bounded {
		r.b.thread(th)
	}
	g, err := prog.Init(th, d)
	if err != nil {
		tb.Fatal(err)
	}
	if g["result"] == nil {
		tb.Fatal("no result")
	}
	return th.Steps, g["result"].String()
}

// BenchmarkBoundedInterpreter reports the bounded interpreter's time and
// steps as ratios to the unchecked one, measured in the same run.
func BenchmarkBoundedInterpreter(b *testing.B) {
	var plain, bounded time.Duration
	var plainSteps, boundedSteps uint64
	for b.Loop() {
		start := time.Now()
		plainSteps, _ = runBench(b, false)
		plain += time.Since(start)
		start = time.Now()
		boundedSteps, _ = runBench(b, true)
		bounded += time.Since(start)
	}
	b.ReportMetric(float64(plain.Milliseconds())/float64(b.N), "plain-ms")
	b.ReportMetric(float64(bounded.Milliseconds())/float64(b.N), "bounded-ms")
	b.ReportMetric(float64(bounded)/float64(plain), "time-x")
	b.ReportMetric(float64(boundedSteps)/float64(plainSteps), "steps-x")
}

// TestBenchSource: the benchmark's script gives the same result both ways.
func TestBenchSource(t *testing.T) {
	t.Parallel()
	_, plain := runBench(t, false)
	_, bounded := runBench(t, true)
	if plain != bounded || plain == "" {
		t.Fatalf("results %s and %s differ", plain, bounded)
	}
}
