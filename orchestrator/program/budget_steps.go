package program

import (
	"fmt"
	"time"

	"go.starlark.net/starlark"
	"go.temporal.io/sdk/workflow"
)

// steps is the program's step count: finished threads and live ones.
func (b *bounds) steps() uint64 {
	n := b.r.spent
	for _, th := range b.threads {
		n += th.Steps
	}
	return n
}

// thread registers a new interpreter thread and arms its step limit.
func (b *bounds) thread(th *starlark.Thread) {
	th.OnMaxSteps = b.onMaxSteps
	b.threads = append(b.threads, th)
	b.arm(th)
}

// done moves a finished thread's steps to r.spent.
func (b *bounds) done(th *starlark.Thread) {
	for i, t := range b.threads {
		if t == th {
			b.threads = append(b.threads[:i], b.threads[i+1:]...)
			b.r.spent += th.Steps
			return
		}
	}
}

// arm lets th run what is left of the program's budget, and at most until the
// program's next yield. Threads interleave only where a builtin waits on the
// workflow (a tool call, parallel), so every such builtin re-arms its thread
// when it resumes.
func (b *bounds) arm(th *starlark.Thread) {
	used := b.steps()
	left := uint64(0)
	if used < b.maxSteps {
		left = b.maxSteps - used
	}
	if b.yields == nil || *b.yields {
		since := used - min(used, b.yieldedAt)
		left = min(left, yieldSteps-min(since, yieldSteps))
	}
	th.SetMaxExecutionSteps(th.Steps + max(left, 1))
}

func (b *bounds) onMaxSteps(th *starlark.Thread) {
	used := b.steps()
	if used >= b.maxSteps {
		b.r.stepsHit = true
		th.Cancel("too many steps")
		return
	}
	if used-min(used, b.yieldedAt) >= yieldSteps {
		if err := b.yield(th); err != nil {
			th.Cancel(err.Error())
			return
		}
	}
	b.arm(th)
}

// yieldSteps is how many steps a program computes, at most, before it gives
// its workflow task back to Temporal. A workflow sees a cancellation (and
// answers queries, updates and signals) only between workflow tasks, and a
// script that computes without calling a tool never ends its task: without
// yields, CancelProgram waited for the whole step budget (10 M steps: seconds,
// tens of them under the race detector or on a busy replica), and the program
// then failed on max_steps instead of ending cancelled. 1 M steps is ~0.1 s
// of plain Starlark (~1 s under -race); a yield costs a 1 ms timer, so a
// program that spends MaxSteps records at most 10.
const yieldSteps = 1 << 20

// yieldChangeID versions the yields: histories recorded before them have no
// timers between tool calls.
const yieldChangeID = "script-yield"

// yield gives the workflow task back to Temporal (a 1 ms timer) and reports
// errCanceled when the program was cancelled meanwhile. The step count decides
// when, so a replay yields at the same points.
func (b *bounds) yield(th *starlark.Thread) error {
	ctx := wctx(th)
	if b.yields == nil {
		v := workflow.GetVersion(ctx, yieldChangeID, workflow.DefaultVersion, 1) >= 1
		b.yields = &v
	}
	if !*b.yields {
		return nil
	}
	b.yieldedAt = b.steps()
	if err := workflow.Sleep(ctx, time.Millisecond); err != nil || ctx.Err() != nil {
		b.r.canceled = true
		return errCanceled
	}
	return nil
}

// stepsError is the error of a program over its step budget.
func (b *bounds) stepsError() error {
	b.r.stepsHit = true
	return &limitError{limit: LimitSteps, msg: fmt.Sprintf("the program ran more than %d steps", b.maxSteps)}
}

// addSteps charges n steps of work done inside a builtin to th.
func (b *bounds) addSteps(th *starlark.Thread, n uint64) error {
	th.Steps = sat(th.Steps, n)
	if b.steps() > b.maxSteps {
		return b.stepsError()
	}
	return nil
}

// seqLen is len(x), counting an iterable without a length by iterating it
// (charged as steps).
func (b *bounds) seqLen(th *starlark.Thread, x starlark.Value) (uint64, error) {
	if n := starlark.Len(x); n >= 0 {
		return uint64(n), nil
	}
	it, ok := x.(starlark.Iterable)
	if !ok {
		return 0, nil
	}
	iter := it.Iterate()
	defer iter.Done()
	var n uint64
	var v starlark.Value
	for iter.Next(&v) {
		n++
		if n%1024 == 0 {
			if err := b.addSteps(th, 1024); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}
