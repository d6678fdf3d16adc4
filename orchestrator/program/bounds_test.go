package program_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/orchestrator/program"
)

// bombs are scripts written to take the orchestrator's memory: each must end
// as a max_memory_bytes limit, before it allocates far beyond the budget.
var bombs = []struct{ name, src string }{
	{"join of a repeated big string (issue 21)", `result = len("".join(["x" * (1 << 27)] * 64))`},
	{"doubling a string", "s = 'x'\nfor i in range(40):\n    s = s + s\n"},
	{"doubling a string in place", "s = 'x'\nfor i in range(40):\n    s += s\n"},
	{"doubling a list in place", "l = [0]\nfor i in range(40):\n    l += l\n"},
	{"doubling a list by extend", "l = [0]\nfor i in range(40):\n    l.extend(l)\n"},
	{"repeating a list", "l = [0] * (1 << 30)\n"},
	{"materialising a range", "l = list(range(1 << 30))\n"},
	{"sorting a range", "l = sorted(range(1 << 30))\n"},
	{"keeping copies", "l = list(range(1 << 18))\nkeep = [l[:] for i in range(1000)]\n"},
	{"keeping big strings", "keep = ['x' * 100000 for i in range(1000)]\n"},
	{"printing a shared tree", "a = [1]\nfor i in range(40):\n    a = [a, a]\ns = str(a)\n"},
	{"formatting a shared tree", "a = [1]\nfor i in range(40):\n    a = [a, a]\ns = '%s' % (a,)\n"},
	{"format with a shared tree", "a = [1]\nfor i in range(40):\n    a = [a, a]\ns = '{}{}'.format(a, a)\n"},
	{"json of a shared tree", "a = [1]\nfor i in range(40):\n    a = [a, a]\ns = json.encode(a)\n"},
	{"replace", "s = ('x' * 1000000).replace('x', 'y' * 1000)\n"},
	{"split", "l = (',' * 1000000).split(',')\n"},
	{"dict items", "d = {i: i for i in range(20000)}\nkeep = [d.items() for i in range(1000)]\n"},
	{"json indent", "s = json.indent('[' * 1000 + ']' * 1000, indent=' ' * 100000)\n"},
	{"json decode", "s = '[' + '[],' * 100000 + '[]]'\nkeep = [json.decode(s) for i in range(1000)]\n"},
	{"tool results", "keep = [Blob_Get(n=200000).value for i in range(1000)]\n"},
}

// TestMemoryBombs: every bomb ends as a limit error naming the budget.
func TestMemoryBombs(t *testing.T) {
	t.Parallel()
	for _, b := range bombs {
		t.Run(b.name, func(t *testing.T) {
			// One at a time: on a busy machine, parallel bombs under -race
			// could pass the 10 s deadlock detection of the test worker.
			e := newEnv(t)
			_, perr := e.run(t, program.Input{Source: b.src, Limits: program.Limits{MaxMemoryBytes: 8 << 20, MaxToolCalls: 1000}})
			if perr == nil || perr.Kind != "limit" || perr.Limit != program.LimitMemory ||
				!strings.Contains(perr.Message, "max_memory_bytes") || perr.Position == "" {
				t.Fatalf("error %+v, want a max_memory_bytes limit with a position", perr)
			}
		})
	}
}

// TestMemoryBombAllocates measures what the bomb allocates in this
// process with the default budget: far below the 8 GiB it asks for. It runs
// alone (no t.Parallel) so that the measure is its own.
func TestMemoryBombAllocates(t *testing.T) {
	e := newEnv(t)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, perr := e.run(t, program.Input{Source: `result = len("".join(["x" * (1 << 27)] * 64))`})
	runtime.ReadMemStats(&after)
	if perr == nil || perr.Limit != program.LimitMemory {
		t.Fatalf("error %+v, want max_memory_bytes", perr)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("the bomb allocated %d MiB in total (default budget %d MiB); %s", allocated>>20, program.DefaultMaxMemoryBytes>>20, perr.Message)
	if allocated > program.DefaultMaxMemoryBytes+64<<20 {
		t.Fatalf("the bomb allocated %d MiB, over the budget of %d MiB plus 64 MiB", allocated>>20, program.DefaultMaxMemoryBytes>>20)
	}
}

// TestBoundedScripts: the checked operators, slices and methods compute what
// Starlark does.
func TestBoundedScripts(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, src, want string }{
		{"operators", `result = [1 + 2, "a" + "b", [1] + [2], (1,) + (2,), 7 - 2, 3 * 4, "ab" * 2, 2 * [0], 7 // 2, 7 % 3, "%d-%s" % (1, "x"),
    6 & 3, 6 | 3, 6 ^ 3, 1 << 4, 32 >> 2, 1 in [1], 2 not in [1], 1 == 1, 1 != 1, 1 < 2, 2 > 1, 1 <= 1, 2 >= 3, 7 / 2]`,
			`[3,"ab",[1,2],[1,2],5,12,"abab",[0,0],3,1,"1-x",2,7,5,16,8,true,true,true,false,true,true,true,false,3.5]`},
		{"sets and dicts", `result = [sorted(set([1, 2]) | set([3])), sorted(set([1, 2]) & set([2])), sorted(set([1, 2]) - set([2])), sorted(set([1, 2]) ^ set([2, 3])), {"a": 1} | {"b": 2}]`,
			`[[1,2,3],[2],[1],[1,3],{"a":1,"b":2}]`},
		{"augmented assignments keep in-place semantics", `
a = [1]
b = a
a += [2]
s = "x"
s += "y"
d = {"k": [1]}
d["k"] += [2]
n = 5
n -= 1
n *= 3
result = [b, s, d, n]
`, `[[1,2],"xy",{"k":[1,2]},12]`},
		{"slices", `s = "hello"
l = [0, 1, 2, 3, 4]
result = [s[1:3], s[::-1], s[-2:], l[::2], l[3:1:-1], l[:-1], l[10:], l[:], (1, 2, 3)[1:], l[-100:100], l[4::-2]]`,
			`["el","olleh","lo",[0,2,4],[3,2],[0,1,2,3],[],[0,1,2,3,4],[2,3],[0,1,2,3,4],[4,2,0]]`},
		{"methods", `l = []
l.append(1)
l.extend([2, 3])
l.insert(0, 0)
d = {}
d.update(a=1)
d.setdefault("b", 2)
f = ",".join
result = [l, d, f(["a", "b"]), "a b".split(), "x-y".replace("-", "+"), "{}{}".format(1, 2), sorted(d.items()), "AB".lower(), getattr("a,b", "split")(",")]`,
			`[[0,1,2,3],{"a":1,"b":2},"a,b",["a","b"],"x+y","12",[["a",1],["b",2]],"ab",["a","b"]]`},
		{"attributes and errors stay Starlark's", `r = Calculator_Add(a=1, b=2)
result = [r.ok, r.value["result"], hasattr(r, "nope"), str([1, "a"]), repr("a"), json.decode(json.encode({"x": [1]}))]`,
			`[true,3,false,"[1, \"a\"]","\"a\"",{"x":[1]}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			out, perr := e.run(t, program.Input{Source: tt.src})
			if perr != nil {
				t.Fatalf("program failed: %v", perr)
			}
			if out.ResultJSON != tt.want {
				t.Fatalf("result\n%s\nwant\n%s", out.ResultJSON, tt.want)
			}
		})
	}
}

// TestBoundedErrors: errors of the checked operations read as Starlark's, and
// the reserved names are refused.
func TestBoundedErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, src, kind, position, message string }{
		{"a bad operand", "x = 1 + 'a'\n", "runtime", "program.star:1:7", "unknown binary op: int + string"},
		{"a missing attribute", "x = 'a'.nope\n", "runtime", "program.star:1:8", "string has no .nope field or method"},
		{"a bad slice", "x = 'abc'[::0]\n", "runtime", "program.star:1:10", "zero is not a valid slice step"},
		{"a reserved name", "__tf_op_add = 1\n", "syntax", "program.star:1:1", "reserved"},
		{"an augmented assignment through a call", "def f():\n    return {}\nf()['k'] += 1\n", "syntax", "program.star:3:10", "augmented assignment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			_, perr := e.run(t, program.Input{Source: tt.src})
			if perr == nil || perr.Kind != tt.kind || !strings.HasPrefix(perr.Position, tt.position) || !strings.Contains(perr.Message, tt.message) {
				t.Fatalf("error %+v, want kind %s at %s with %q", perr, tt.kind, tt.position, tt.message)
			}
		})
	}
}

// TestParallelSteps: parallel() runs on the program's one step budget, as it
// goes: 300 functions that each spin, then call a tool, stop once the budget
// is spent instead of all running (issue 21: 75 times the budget).
func TestParallelSteps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := `
def work():
    x = 0
    for i in range(1000):
        x += i
    return Calculator_Add(a=x, b=1)
parallel([work for _ in range(300)])
`
	_, perr := e.run(t, program.Input{Source: src, Limits: program.Limits{MaxSteps: 50_000, MaxToolCalls: 1000}})
	if perr == nil || perr.Limit != program.LimitSteps {
		t.Fatalf("error %+v, want max_steps", perr)
	}
	// About 5,000 steps a function: at most ten finish within 50,000 steps.
	if n := e.gw.runs("Calculator.Add"); n > 12 {
		t.Fatalf("%d functions called their tool, want at most 12 within the budget", n)
	}
}

// TestParallelBound: parallel() takes at most MaxParallel functions.
func TestParallelBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, perr := e.run(t, program.Input{Source: "parallel([lambda: 1] * 1001)\n"})
	if perr == nil || perr.Limit != program.LimitParallel || !strings.Contains(perr.Message, "at most 1000") {
		t.Fatalf("error %+v, want max_parallel", perr)
	}
	e = newEnv(t)
	out, perr := e.run(t, program.Input{Source: "result = len(parallel([lambda: 1] * 1000))\n"})
	if perr != nil || out.ResultJSON != "1000" {
		t.Fatalf("1000 functions: %v %+v", out, perr)
	}
}
