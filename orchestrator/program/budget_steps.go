package program

import (
	"fmt"

	"go.starlark.net/starlark"
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

// arm lets th run what is left of the program's budget. Threads interleave
// only where a builtin waits on the workflow (a tool call, parallel), so
// every such builtin re-arms its thread when it resumes.
func (b *bounds) arm(th *starlark.Thread) {
	used := b.steps()
	left := uint64(0)
	if used < b.maxSteps {
		left = b.maxSteps - used
	}
	th.SetMaxExecutionSteps(th.Steps + max(left, 1))
}

func (b *bounds) onMaxSteps(th *starlark.Thread) {
	if b.steps() >= b.maxSteps {
		b.r.stepsHit = true
		th.Cancel("too many steps")
		return
	}
	b.arm(th)
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
