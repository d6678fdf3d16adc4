package program

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.temporal.io/sdk/workflow"
)

// parallelBounded is parallel(fns, width=0) of a bounded program: at most
// MaxParallel functions, and every function runs on the program's one step
// budget as it goes (a function that passes it ends the program), instead of
// each getting the whole remaining budget and the total being checked after
// all of them finished.
func (r *runner) parallelBounded(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var seq starlark.Iterable
	width := 0
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "fns", &seq, "width?", &width); err != nil {
		return nil, err
	}
	ctx := wctx(th)
	if err := r.checkDeadline(ctx); err != nil {
		return nil, err
	}
	if n := starlark.Len(seq); n > MaxParallel {
		return nil, &limitError{limit: LimitParallel, msg: fmt.Sprintf(
			"parallel() takes at most %d functions, got %d; split the work into batches", MaxParallel, n)}
	}
	var fns []starlark.Callable
	it := seq.Iterate()
	defer it.Done()
	var x starlark.Value
	for it.Next(&x) {
		if len(fns) == MaxParallel {
			return nil, &limitError{limit: LimitParallel, msg: fmt.Sprintf(
				"parallel() takes at most %d functions; split the work into batches", MaxParallel)}
		}
		fn, ok := x.(starlark.Callable)
		if !ok {
			return nil, fmt.Errorf("%s: item %d is a %s, want a function of no arguments (e.g. a lambda)", b.Name(), len(fns), x.Type())
		}
		fns = append(fns, fn)
	}
	switch {
	case width < 0:
		return nil, fmt.Errorf("%s: width %d is negative", b.Name(), width)
	case width > r.lim.MaxWidth:
		return nil, &limitError{limit: LimitWidth, msg: fmt.Sprintf("parallel width %d is over %d", width, r.lim.MaxWidth)}
	case width == 0:
		width = r.lim.MaxWidth
	}
	width = min(width, len(fns))
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
				r.b.thread(child)
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
