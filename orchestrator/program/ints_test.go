package program_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/orchestrator/program"
)

// big is a script prefix that makes x, an int of about 32,000 bits, in a
// few steps.
const bigPrefix = "x = 1\nfor i in range(62):\n    x = (x << 511) | 12345\n"

// TestBigIntBombs: the big-int attacks of issue 32 end as limit errors at
// once, before the operation that would take minutes runs.
func TestBigIntBombs(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, src, limit, message string }{
		{"squaring (issue 32)", "x = 3\nfor i in range(27):\n    x = x * x\n", program.LimitInt, "int * int would make an int of up to"},
		{"squaring in place", "x = 3\nfor i in range(27):\n    x *= x\n", program.LimitInt, "int * int"},
		{"shifting", "x = 1\nfor i in range(1000):\n    x = x << 511\n", program.LimitInt, "int << int"},
		{"int() of a long string (issue 32)", `x = int("9" * 1000000)`, program.LimitInt, "int() of a string of 1000000 digits"},
		{"int() of a long binary string", `x = int("0b" + "1" * 70000, 0)`, program.LimitInt, "int() of a string"},
		{"json.decode of a long number", `x = json.decode("[" + "9" * 1000000 + "]")`, program.LimitInt, "a number of 1000000 digits"},
		{"adding up", bigPrefix + "y = x\nfor i in range(100):\n    y = y * x\n", program.LimitInt, "int * int"},
		{"many multiplications", bigPrefix + "for i in range(100000):\n    y = x * x\n", program.LimitSteps, "steps"},
		{"many divisions", bigPrefix + "y = x * x\nfor i in range(100000):\n    z = y // x\n", program.LimitSteps, "steps"},
		{"many conversions", bigPrefix + "y = x * x\nfor i in range(100000):\n    s = str(y)\n", program.LimitSteps, "steps"},
		{"many parses", bigPrefix + "s = str(x * x)\nfor i in range(100000):\n    y = int(s)\n", program.LimitSteps, "steps"},
		{"many formats", bigPrefix + "y = x * x\nfor i in range(100000):\n    s = '%d' % y\n", program.LimitSteps, "steps"},
		{"many decodes", bigPrefix + "s = json.encode([x * x])\nfor i in range(100000):\n    y = json.decode(s)\n", program.LimitSteps, "steps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			start := time.Now()
			_, perr := e.run(t, program.Input{Source: tt.src, Limits: program.Limits{MaxSteps: program.MaxSteps, MaxMemoryBytes: program.MaxMemoryBytes}})
			took := time.Since(start)
			if perr == nil || perr.Kind != "limit" || perr.Limit != tt.limit || !strings.Contains(perr.Message, tt.message) {
				t.Fatalf("error %+v, want a %s limit saying %q", perr, tt.limit, tt.message)
			}
			t.Logf("ended in %s: %s", took.Round(time.Millisecond), perr.Message)
			// A refused operation ends the program at once. The step-bound
			// loops take as long as 10M steps of any kind (the test worker's
			// deadlock detection, 10 s, fails them if a task runs longer).
			if tt.limit == program.LimitInt && took > 5*time.Second {
				t.Errorf("took %s, want well under the deadlock detection (%s)", took, program.DeadlockDetectionTimeout)
			}
		})
	}
}

// TestBigInts: ints up to MaxIntBits compute what Starlark computes.
func TestBigInts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := `
x = 1 << 500
y = x * x * x
big = 1
for i in range(128):
    big = big << 511
big = big << 127
result = [y // x == x * x, y % 7, len(str(y)), int(str(y)) == y, json.decode(json.encode(y)) == y,
          len("%x" % big), -big < 0, int("ff", 16), int("0x" + "f" * 16384, 0) > big,
          str(3 * 3), 7 // 2]
`
	out, perr := e.run(t, program.Input{Source: src})
	if perr != nil {
		t.Fatalf("program failed: %v", perr)
	}
	want := `[true,1,452,true,true,16384,true,255,true,"9",3]`
	if out.ResultJSON != want {
		t.Fatalf("result %s, want %s", out.ResultJSON, want)
	}
}

// TestBigIntArgs: args and tool results with a number over MaxIntDigits are
// refused before they are converted.
func TestBigIntArgs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, perr := e.run(t, program.Input{Source: "result = 1", ArgsJSON: `{"n": ` + strings.Repeat("9", 1000000) + `}`})
	if perr == nil || perr.Limit != program.LimitInt || !strings.Contains(perr.Message, "1000000 digits") {
		t.Fatalf("error %+v, want a max_int_bits limit", perr)
	}
	e = newEnv(t)
	out, perr := e.run(t, program.Input{Source: "result = args['n'] // 7", ArgsJSON: `{"n": ` + strings.Repeat("9", program.MaxIntDigits) + `}`})
	if perr != nil || len(out.ResultJSON) != program.MaxIntDigits {
		t.Fatalf("an int of MaxIntDigits digits: %v", perr)
	}
}
