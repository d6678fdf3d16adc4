package program

import (
	"fmt"

	"go.starlark.net/starlark"
)

// Script bounds (workflow version "script-bounds" 1): one step budget for the
// whole program, checked as it runs, and a memory budget.
//
// The memory budget is counted, not measured: the Go heap is shared by every
// workflow of the worker and changes with the garbage collector, so a replay
// would not reach the same verdict. Every operation that can allocate more than
// a few words in one step — operators, slices, methods, builtins, json, tool
// results — is checked BEFORE it runs against a fixed size model of what it
// would create (a string is 16 bytes plus its length, a list slot 16 bytes, a
// dict entry 80, …), and the model's bytes are added up over the program's
// life, freed values included. Since the interpreter has no hooks for its own
// operators, the script is rewritten before it is compiled (rewrite.go) so
// that they go through checked builtins. What is not counted is what one
// interpreter step can allocate by itself (a comprehension's next slot, a call
// frame): that is bounded by the step budget.
//
// Operations whose time grows with their operands (x in list, comparisons,
// str.find, sorted, …) add their work to the step count, so that a step
// budget also bounds the time a script computes.

const scriptBoundsChangeID = "script-bounds"

// The bounds are split by concern:
//
//	budget_steps.go   the program's one step budget, across its threads
//	budget_memory.go  the size model and the memory budget it is charged to
//	budget_ints.go    the bound on big ints and the steps their work costs
//	guards.go         the checked operators, slices, attributes and builtins
//	guards_costs.go   what each method and builtin costs in bytes and steps

// crashError is a Go panic of the interpreter or a builtin, turned into the
// program's failure: the same script panics again on every replay, so a
// panic left to Temporal would fail the workflow task on every worker,
// forever.
type crashError struct{ msg string }

func (e *crashError) Error() string {
	return "the script crashed the interpreter (" + e.msg + "); this is a bug of toolfleet, please report it with the script"
}

// protect runs fn, turning its panic into a *crashError when on.
func protect[T any](on bool, fn func() (T, error)) (v T, err error) {
	if on {
		defer func() {
			if p := recover(); p != nil {
				err = &crashError{msg: fmt.Sprint(p)}
			}
		}()
	}
	return fn()
}

// bounds is the program-wide step and memory accounting of a bounded runner.
type bounds struct {
	r        *runner
	maxSteps uint64
	budget   uint64
	used     uint64
	// ints bounds big ints and charges their work (budget_ints.go).
	ints bool
	// threads are the live interpreter threads: the script's and those of
	// running parallel functions (finished ones are in r.spent).
	threads []*starlark.Thread
	// yieldedAt is the program's step count when it last gave its workflow
	// task back to Temporal (budget_steps.go, yield); yields is whether it
	// does (the "script-yield" version), asked at the first yield.
	yieldedAt uint64
	yields    *bool
}

func newBounds(r *runner) *bounds {
	return &bounds{r: r, maxSteps: r.lim.MaxSteps, budget: uint64(r.lim.MaxMemoryBytes), ints: r.ints}
}

// cost charges bytes and steps for th.
func (b *bounds) cost(th *starlark.Thread, n, steps uint64, what string) error {
	if n > 0 {
		if err := b.charge(n, what); err != nil {
			return err
		}
	}
	if steps > 0 {
		return b.addSteps(th, steps)
	}
	return nil
}
