package program

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.temporal.io/sdk/workflow"
)

// parallelBuiltin is parallel(fns, width=0): it calls each zero-argument
// function in its own workflow coroutine, at most width at a time, and returns
// their results in order. The first error (in list order) is raised.
func (r *runner) parallelBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	fns, width, err := r.parallelArgs(th, b, args, kwargs)
	if err != nil {
		return nil, err
	}
	if r.b != nil {
		return r.parallelBounded(th, fns, width)
	}
	return r.parallelLegacy(th, fns, width)
}

// parallelArgs unpacks parallel's functions and width (0 becomes max_width,
// and the width is at most the number of functions). A bounded program takes
// at most MaxParallel functions.
func (r *runner) parallelArgs(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) ([]starlark.Callable, int, error) {
	var seq starlark.Iterable
	width := 0
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "fns", &seq, "width?", &width); err != nil {
		return nil, 0, err
	}
	if err := r.checkDeadline(wctx(th)); err != nil {
		return nil, 0, err
	}
	bounded := r.b != nil
	if n := starlark.Len(seq); bounded && n > MaxParallel {
		return nil, 0, &limitError{limit: LimitParallel, msg: fmt.Sprintf(
			"parallel() takes at most %d functions, got %d; split the work into batches", MaxParallel, n)}
	}
	var fns []starlark.Callable
	it := seq.Iterate()
	defer it.Done()
	var x starlark.Value
	for it.Next(&x) {
		if bounded && len(fns) == MaxParallel {
			return nil, 0, &limitError{limit: LimitParallel, msg: fmt.Sprintf(
				"parallel() takes at most %d functions; split the work into batches", MaxParallel)}
		}
		fn, ok := x.(starlark.Callable)
		if !ok {
			return nil, 0, fmt.Errorf("%s: item %d is a %s, want a function of no arguments (e.g. a lambda)", b.Name(), len(fns), x.Type())
		}
		fns = append(fns, fn)
	}
	switch {
	case width < 0:
		return nil, 0, fmt.Errorf("%s: width %d is negative", b.Name(), width)
	case width > r.lim.MaxWidth:
		return nil, 0, &limitError{limit: LimitWidth, msg: fmt.Sprintf("parallel width %d is over %d", width, r.lim.MaxWidth)}
	case width == 0:
		width = r.lim.MaxWidth
	}
	return fns, min(width, len(fns)), nil
}

// parallelBounded is parallel() of a bounded program: every function runs on
// the program's one step budget as it goes (a function that passes it ends
// the program), instead of each getting the whole remaining budget and the
// total being checked after all of them finished.
func (r *runner) parallelBounded(th *starlark.Thread, fns []starlark.Callable, width int) (starlark.Value, error) {
	ctx := wctx(th)
	if err := r.b.charge(sat(listHeader, mul(ulen(len(fns)), 2*slotBytes)), "parallel()"); err != nil {
		return nil, err
	}

	results := make([]starlark.Value, len(fns))
	errs := make([]error, len(fns))
	next, finished := 0, 0
	stop := false // a function failed or hit a limit: start no more
	for w := range width {
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer func() { finished++ }()
			for next < len(fns) && !stop && !r.stepsHit {
				i := next
				next++
				child := r.newThread(gctx, fmt.Sprintf("%s/parallel-%d-%d", th.Name, w, i), 0)
				results[i], errs[i] = protect(true, func() (starlark.Value, error) { return starlark.Call(child, fns[i], nil, nil) })
				r.b.done(child)
				if errs[i] != nil {
					stop = true
				}
			}
		})
	}
	if err := workflow.Await(ctx, func() bool { return finished == width }); err != nil {
		r.canceled = true
		return nil, errCanceled
	}
	r.b.arm(th)
	for _, err := range errs {
		if err != nil {
			return nil, err // a limit hit inside a function points there
		}
	}
	if r.stepsHit {
		return nil, r.b.stepsError()
	}
	return starlark.NewList(results), nil
}

// parallelLegacy is parallel() of programs recorded before "script-bounds":
// every function gets the thread's whole remaining step budget, and the total
// is checked when all of them finished.
func (r *runner) parallelLegacy(th *starlark.Thread, fns []starlark.Callable, width int) (starlark.Value, error) {
	ctx := wctx(th)
	budget := th.Local(budgetLocal).(uint64)
	remaining := uint64(0)
	if budget > th.Steps {
		remaining = budget - th.Steps
	}
	results := make([]starlark.Value, len(fns))
	errs := make([]error, len(fns))
	var used uint64
	next, finished := 0, 0
	for w := range width {
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer func() { finished++ }()
			for next < len(fns) {
				i := next
				next++
				child := r.newThread(gctx, fmt.Sprintf("%s/parallel-%d-%d", th.Name, w, i), remaining)
				results[i], errs[i] = starlark.Call(child, fns[i], nil, nil)
				used += child.Steps
				r.spent += child.Steps
			}
		})
	}
	if err := workflow.Await(ctx, func() bool { return finished == width }); err != nil {
		r.canceled = true
		return nil, errCanceled
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	// The children's steps count against this thread's budget too.
	if used >= remaining {
		r.stepsHit = true
		return nil, &limitError{limit: LimitSteps, msg: fmt.Sprintf("the program ran more than %d steps", r.lim.MaxSteps)}
	}
	th.SetLocal(budgetLocal, budget-used)
	th.SetMaxExecutionSteps(budget - used)
	return starlark.NewList(results), nil
}
