package program

import (
	"fmt"
	"math"
	"math/bits"
	"strings"

	"go.starlark.net/lib/json"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
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

// Size model, in bytes.
const (
	slotBytes    = 16 // an interface value: a list or tuple slot
	strHeader    = 16
	listHeader   = 48
	tupleHeader  = 24
	dictHeader   = 96
	entryBytes   = 80 // a dict or set entry
	bigIntHeader = 32
	growSlot     = 2 * slotBytes // append and extend: the slot and the spare capacity
	// jsonDecodeFactor bounds the model size of json.decode's result per
	// byte of text: "[[],[],…]" makes a list of 48+ bytes from 3.
	jsonDecodeFactor = 32
	// scanBytesPerStep is how many bytes a search or comparison may cover
	// per step it is charged.
	scanBytesPerStep = 64
)

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
	// threads are the live interpreter threads: the script's and those of
	// running parallel functions (finished ones are in r.spent).
	threads []*starlark.Thread
}

func newBounds(r *runner) *bounds {
	return &bounds{r: r, maxSteps: r.lim.MaxSteps, budget: uint64(r.lim.MaxMemoryBytes)}
}

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

// charge adds n bytes of the size model to the program, refusing them when
// they would pass the budget. what says what would allocate them.
func (b *bounds) charge(n uint64, what string) error {
	if n > b.budget || b.used > b.budget-n {
		return &limitError{limit: LimitMemory, msg: fmt.Sprintf(
			"the program would use more than %d bytes (%s) of memory: %s needs %s, %s already used",
			b.budget, human(b.budget), what, human(n), human(b.used))}
	}
	b.used += n
	return nil
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

func human(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// sat and mul are saturating: a hostile size never wraps to a small one.
func sat(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

func mul(a, b uint64) uint64 {
	if hi, lo := bits.Mul64(a, b); hi == 0 {
		return lo
	}
	return math.MaxUint64
}

func ulen(n int) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}

func strSize(n uint64) uint64 { return sat(strHeader, n) }

// intSize is the model size of an int of at most nbits bits.
func intSize(nbits uint64) uint64 {
	if nbits < 64 {
		return 0 // small ints live in the slot
	}
	return sat(bigIntHeader, nbits/8)
}

func intBits(x starlark.Value) uint64 {
	i, ok := x.(starlark.Int)
	if !ok {
		return 0
	}
	if _, ok := i.Int64(); ok {
		return 64
	}
	return uint64(i.BigInt().BitLen())
}

// count returns how many int copies n asks for (0 when negative).
func count(n starlark.Value) uint64 {
	i, ok := n.(starlark.Int)
	if !ok {
		return 0
	}
	if v, ok := i.Int64(); ok {
		return ulen(int(max(min(v, math.MaxInt32), -1)))
	}
	if i.Sign() > 0 {
		return math.MaxUint64
	}
	return 0
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

// opCost is what x op y would allocate and the steps it would take. inPlace
// is an augmented assignment (x += y extends a list in place).
func (b *bounds) opCost(th *starlark.Thread, op syntax.Token, x, y starlark.Value, inPlace bool) (uint64, uint64, error) {
	lx, ly := ulen(starlark.Len(x)), ulen(starlark.Len(y))
	switch op {
	case syntax.PLUS:
		switch x.(type) {
		case starlark.String, starlark.Bytes:
			return strSize(sat(lx, ly)), 0, nil
		case *starlark.List:
			if inPlace {
				n, err := b.seqLen(th, y)
				return mul(n, growSlot), 0, err
			}
			return sat(listHeader, mul(sat(lx, ly), slotBytes)), 0, nil
		case starlark.Tuple:
			return sat(tupleHeader, mul(sat(lx, ly), slotBytes)), 0, nil
		case starlark.Int:
			return intSize(max(intBits(x), intBits(y)) + 1), 0, nil
		}
	case syntax.STAR:
		seq, n := x, y
		if _, ok := x.(starlark.Int); ok {
			seq, n = y, x
		}
		k := count(n)
		ls := ulen(starlark.Len(seq))
		switch seq.(type) {
		case starlark.String, starlark.Bytes:
			return strSize(mul(ls, k)), 0, nil
		case *starlark.List:
			return sat(listHeader, mul(mul(ls, k), slotBytes)), 0, nil
		case starlark.Tuple:
			return sat(tupleHeader, mul(mul(ls, k), slotBytes)), 0, nil
		case starlark.Int:
			return intSize(sat(intBits(x), intBits(y))), 0, nil
		}
	case syntax.PERCENT:
		if s, ok := x.(starlark.String); ok {
			r, steps := b.maxRender(y, b.budget)
			return strSize(sat(ulen(len(s)), mul(uint64(strings.Count(string(s), "%")), r))), steps, nil
		}
		return intSize(max(intBits(x), intBits(y))), 0, nil
	case syntax.PIPE, syntax.AMP, syntax.CIRCUMFLEX, syntax.MINUS:
		switch x.(type) {
		case *starlark.Dict, *starlark.Set:
			if inPlace {
				return mul(ly, entryBytes), ly, nil
			}
			return sat(dictHeader, mul(sat(lx, ly), entryBytes)), sat(lx, ly), nil
		}
		return intSize(max(intBits(x), intBits(y)) + 1), 0, nil
	case syntax.LTLT:
		return intSize(sat(intBits(x), count(y))), 0, nil
	case syntax.IN, syntax.NOT_IN:
		switch y := y.(type) {
		case *starlark.List, starlark.Tuple:
			return 0, ly, nil
		case starlark.String, starlark.Bytes:
			return 0, ly / scanBytesPerStep, nil
		case *starlark.Dict, *starlark.Set:
			_ = y
			return 0, ulen(starlark.Len(x)) / scanBytesPerStep, nil
		}
	case syntax.EQL, syntax.NEQ, syntax.LT, syntax.GT, syntax.LE, syntax.GE:
		switch x.(type) {
		case *starlark.List, starlark.Tuple, *starlark.Dict, *starlark.Set:
			return 0, min(lx, ly), nil
		case starlark.String, starlark.Bytes:
			return 0, min(lx, ly) / scanBytesPerStep, nil
		}
	}
	return 0, 0, nil
}

// maxRender is the largest rendered size among the values a format may
// insert: the items of a tuple, the values of a dict, or x itself.
func (b *bounds) maxRender(x starlark.Value, limit uint64) (uint64, uint64) {
	var worst, visits uint64
	each := func(v starlark.Value) {
		n, c := renderSize(v, limit)
		worst, visits = max(worst, n), sat(visits, c)
	}
	switch x := x.(type) {
	case starlark.Tuple:
		for _, v := range x {
			each(v)
		}
	case *starlark.Dict:
		for _, kv := range x.Items() {
			each(kv[1])
		}
	default:
		each(x)
	}
	return worst, visits
}

// renderSize bounds the length of str(v) or repr(v) (json.encode is no
// longer): a value shared by several containers counts each time it is
// printed, a cycle once (Starlark prints it as [...]). A container's size is
// computed once per walk (so a shared tree costs its distinct nodes, not its
// printed size, to measure), and the walk stops past limit. It also returns
// the values it visited, charged as steps.
func renderSize(v starlark.Value, limit uint64) (size, visits uint64) {
	onPath := map[starlark.Value]bool{}
	memo := map[starlark.Value]uint64{}
	var walk func(v starlark.Value) uint64
	walk = func(v starlark.Value) uint64 {
		visits++
		switch v := v.(type) {
		case starlark.String:
			return sat(mul(ulen(len(v)), 4), 2) // escapes in repr
		case starlark.Bytes:
			return sat(mul(ulen(len(v)), 4), 3)
		case starlark.Int:
			return intBits(v)/3 + 2
		case starlark.Float:
			return 32
		case starlark.NoneType, starlark.Bool:
			return 5
		case starlark.Tuple:
			n := uint64(2)
			for _, x := range v {
				if n > limit {
					break
				}
				n = sat(n, sat(walk(x), 2))
			}
			return n
		case *starlark.List, *starlark.Dict, *starlark.Set, *starlarkstruct.Struct:
			if onPath[v] {
				return 5
			}
			if n, ok := memo[v]; ok {
				return n
			}
			onPath[v] = true
			n := uint64(16)
			switch v := v.(type) {
			case *starlark.Dict:
				for _, kv := range v.Items() {
					if n > limit {
						break
					}
					n = sat(n, sat(sat(walk(kv[0]), walk(kv[1])), 4))
				}
			case *starlarkstruct.Struct:
				for _, name := range v.AttrNames() {
					if n > limit {
						break
					}
					n = sat(n, ulen(len(name)+3))
					if x, _ := v.Attr(name); x != nil {
						n = sat(n, walk(x))
					}
				}
			default:
				iter := v.(starlark.Iterable).Iterate()
				var x starlark.Value
				for n <= limit && iter.Next(&x) {
					n = sat(n, sat(walk(x), 2))
				}
				iter.Done()
			}
			delete(onPath, v)
			memo[v] = n
			return n
		}
		return 64 + ulen(len(v.Type()))
	}
	return walk(v), visits
}

// modelSize is the size model of a value built from JSON (a tree).
func modelSize(v starlark.Value) uint64 {
	switch v := v.(type) {
	case starlark.String:
		return strSize(ulen(len(v)))
	case starlark.Int:
		return intSize(intBits(v))
	case starlark.Float:
		return 8
	case *starlark.List:
		n := sat(listHeader, mul(ulen(v.Len()), slotBytes))
		for i := range v.Len() {
			n = sat(n, modelSize(v.Index(i)))
		}
		return n
	case *starlark.Dict:
		n := sat(dictHeader, mul(ulen(v.Len()), entryBytes))
		for _, kv := range v.Items() {
			n = sat(n, sat(modelSize(kv[0]), modelSize(kv[1])))
		}
		return n
	case *starlarkstruct.Struct:
		n := uint64(dictHeader)
		for _, name := range v.AttrNames() {
			x, _ := v.Attr(name)
			n = sat(n, entryBytes)
			if x != nil {
				n = sat(n, modelSize(x))
			}
		}
		return n
	}
	return 0
}

// builtins adds the checked operators, slices and attributes, and replaces
// the builtins that allocate with checked ones.
func (b *bounds) builtins(d starlark.StringDict) {
	for tok, name := range opNames {
		d["__tf_op_"+name] = starlark.NewBuiltin("operator "+tok.String(), b.binop(tok, false))
		d["__tf_pre_"+name] = starlark.NewBuiltin("operator "+tok.String()+"=", b.binop(tok, true))
	}
	d["__tf_slice"] = starlark.NewBuiltin("slice", b.slice)
	d["__tf_attr"] = starlark.NewBuiltin("attribute", func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
		return b.attr(th, args[0], string(args[1].(starlark.String)))
	})
	for name, cost := range universeCosts {
		orig, ok := starlark.Universe[name].(*starlark.Builtin)
		if !ok {
			continue // not in this version of Starlark
		}
		d[name] = starlark.NewBuiltin(name, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			n, steps, err := cost(b, th, args, kwargs)
			if err != nil {
				return nil, err
			}
			if err := b.cost(th, n, steps, name+"()"); err != nil {
				return nil, err
			}
			v, err := orig.CallInternal(th, args, kwargs)
			if name == "getattr" && err == nil && len(args) > 0 {
				v = b.wrapMethod(args[0], v)
			}
			return v, err
		})
	}
	if fail, ok := d["fail"].(*starlark.Builtin); ok {
		d["fail"] = starlark.NewBuiltin("fail", func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			n, steps := b.renderAll(args)
			if err := b.cost(th, n, steps, "fail()"); err != nil {
				return nil, err
			}
			return fail.CallInternal(th, args, kwargs)
		})
	}
	d["json"] = b.jsonModule()
	// Tool results: charged once decoded (they are bounded by max_value_bytes).
	for name, v := range d {
		if fn, ok := v.(*starlark.Builtin); ok && (name == "call" || isStub(name)) {
			d[name] = starlark.NewBuiltin(fn.Name(), func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
				res, err := fn.CallInternal(th, args, kwargs)
				if err != nil {
					return nil, err
				}
				b.arm(th) // other threads may have run while the call waited
				return res, b.charge(modelSize(res), "the result of "+fn.Name())
			})
		}
	}
}

// isStub reports whether name is a tool stub of d.
func isStub(name string) bool {
	switch name {
	case "call", "parallel", "json", "fail", "args":
		return false
	}
	return !strings.HasPrefix(name, reservedPrefix) && !starlark.Universe.Has(name)
}

// binop is the checked x op y (or the check before x op= y).
func (b *bounds) binop(op syntax.Token, pre bool) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
		x, y := args[0], args[1]
		n, steps, err := b.opCost(th, op, x, y, pre)
		if err != nil {
			return nil, err
		}
		if err := b.cost(th, n, steps, fmt.Sprintf("%s %s %s", x.Type(), op, y.Type())); err != nil {
			return nil, err
		}
		if pre {
			return y, nil
		}
		switch op {
		case syntax.EQL, syntax.NEQ, syntax.LT, syntax.GT, syntax.LE, syntax.GE:
			ok, err := starlark.Compare(op, x, y)
			if err != nil {
				return nil, err
			}
			return starlark.Bool(ok), nil
		}
		return starlark.Binary(op, x, y)
	}
}

// slice is x[lo:hi:step] with Starlark's index rules, charged for the copy.
func (b *bounds) slice(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
	x, lo, hi, st := args[0], args[1], args[2], args[3]
	s, ok := x.(starlark.Sliceable)
	if !ok {
		return nil, fmt.Errorf("invalid slice operand %s", x.Type())
	}
	n := s.Len()
	step := 1
	if st != starlark.None {
		var err error
		if step, err = starlark.AsInt32(st); err != nil {
			return nil, fmt.Errorf("invalid slice step: %s", err)
		}
		if step == 0 {
			return nil, fmt.Errorf("zero is not a valid slice step")
		}
	}
	index := func(v starlark.Value, def int, what string) (int, error) {
		if v == starlark.None {
			return def, nil
		}
		i, err := starlark.AsInt32(v)
		if err != nil {
			return 0, fmt.Errorf("invalid %s index: %s", what, err)
		}
		if i < 0 {
			i += n
		}
		return i, nil
	}
	var start, end int
	var err error
	if step > 0 {
		if start, err = index(lo, 0, "start"); err != nil {
			return nil, err
		}
		if end, err = index(hi, n, "end"); err != nil {
			return nil, err
		}
		start, end = min(max(start, 0), n), min(max(end, 0), n)
		end = max(end, start)
	} else {
		if start, err = index(lo, n-1, "start"); err != nil {
			return nil, err
		}
		if end, err = index(hi, -1, "end"); err != nil {
			return nil, err
		}
		start, end = min(start, n-1), max(end, -1)
		start = max(start, end)
	}
	k := uint64(0)
	if step > 0 {
		k = uint64((end - start + step - 1) / step)
	} else {
		k = uint64((start - end - step - 1) / -step)
	}
	var size uint64
	switch x.(type) {
	case *starlark.List:
		size = sat(listHeader, mul(k, slotBytes))
	case starlark.Tuple:
		size = sat(tupleHeader, mul(k, slotBytes))
	case starlark.String, starlark.Bytes:
		size = strSize(k)
	}
	if err := b.charge(size, "a slice of a "+x.Type()); err != nil {
		return nil, err
	}
	return s.Slice(start, end, step), nil
}

// attr is x.name, with methods that allocate wrapped in checks.
func (b *bounds) attr(_ *starlark.Thread, x starlark.Value, name string) (starlark.Value, error) {
	o, ok := x.(starlark.HasAttrs)
	if !ok {
		return nil, fmt.Errorf("%s has no .%s field or method", x.Type(), name)
	}
	v, err := o.Attr(name)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("%s has no .%s field or method", x.Type(), name)
	}
	return b.wrapMethod(x, v), nil
}

// wrapMethod returns method v of x checked by its cost, if it has one.
func (b *bounds) wrapMethod(x, v starlark.Value) starlark.Value {
	m, ok := v.(*starlark.Builtin)
	if !ok || m.Receiver() != x {
		return v
	}
	var cost methodCost
	switch x.(type) {
	case starlark.String:
		cost = stringCosts[m.Name()]
	case *starlark.List:
		cost = listCosts[m.Name()]
	case *starlark.Dict:
		cost = dictCosts[m.Name()]
	case *starlark.Set:
		cost = setCosts[m.Name()]
	}
	if cost == nil {
		return v
	}
	return starlark.NewBuiltin(m.Name(), func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		n, steps, err := cost(b, th, x, args, kwargs)
		if err != nil {
			return nil, err
		}
		if err := b.cost(th, n, steps, x.Type()+"."+m.Name()+"()"); err != nil {
			return nil, err
		}
		return m.CallInternal(th, args, kwargs)
	}).BindReceiver(x)
}

type methodCost func(b *bounds, th *starlark.Thread, recv starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error)

func arg(args starlark.Tuple, kwargs []starlark.Tuple, i int, name string) starlark.Value {
	if i >= 0 && i < len(args) {
		return args[i]
	}
	for _, kv := range kwargs {
		if k, ok := kv[0].(starlark.String); ok && string(k) == name {
			return kv[1]
		}
	}
	return nil
}

func str(v starlark.Value) string {
	s, _ := starlark.AsString(v)
	return s
}

// scan is a method whose time grows with the receiver's length.
func scan(_ *bounds, _ *starlark.Thread, recv starlark.Value, _ starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
	return 0, ulen(starlark.Len(recv)) / scanBytesPerStep, nil
}

// walk is a method whose time grows with the receiver's length, per element.
func walkSteps(_ *bounds, _ *starlark.Thread, recv starlark.Value, _ starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
	return 0, ulen(starlark.Len(recv)), nil
}

// copyOf is a method that makes a string as long as (twice, for case
// changes) the receiver.
func copyOf(_ *bounds, _ *starlark.Thread, recv starlark.Value, _ starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
	n := ulen(starlark.Len(recv))
	return strSize(mul(n, 2)), n / scanBytesPerStep, nil
}

func pieces(n uint64) uint64 { return sat(listHeader, mul(n, slotBytes+strHeader)) }

var stringCosts = map[string]methodCost{
	"join": func(b *bounds, th *starlark.Thread, recv starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		if len(args) != 1 {
			return 0, 0, nil
		}
		it, ok := args[0].(starlark.Iterable)
		if !ok {
			return 0, 0, nil
		}
		sep := ulen(len(str(recv)))
		var total, n uint64
		iter := it.Iterate()
		defer iter.Done()
		var x starlark.Value
		for iter.Next(&x) {
			if n > 0 {
				total = sat(total, sep)
			}
			if s, ok := x.(starlark.String); ok {
				total = sat(total, ulen(len(s)))
			}
			n++
		}
		return strSize(total), n, nil
	},
	"replace": func(_ *bounds, _ *starlark.Thread, recv starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error) {
		s, old, repl := str(recv), str(arg(args, kwargs, 0, "old")), str(arg(args, kwargs, 1, "new"))
		n := uint64(strings.Count(s, old))
		if c := arg(args, kwargs, 2, "count"); c != nil {
			if k, err := starlark.AsInt32(c); err == nil && k >= 0 {
				n = min(n, uint64(k))
			}
		}
		grow := uint64(0)
		if len(repl) > len(old) {
			grow = mul(n, uint64(len(repl)-len(old)))
		}
		return strSize(sat(ulen(len(s)), grow)), ulen(len(s)) / scanBytesPerStep, nil
	},
	"format": func(b *bounds, _ *starlark.Thread, recv starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error) {
		s := str(recv)
		var worst, visits uint64
		for _, a := range args {
			n, c := renderSize(a, b.budget)
			worst, visits = max(worst, n), sat(visits, c)
		}
		for _, kv := range kwargs {
			n, c := renderSize(kv[1], b.budget)
			worst, visits = max(worst, n), sat(visits, c)
		}
		return strSize(sat(ulen(len(s)), mul(uint64(strings.Count(s, "{")), worst))), visits, nil
	},
	"split": splitCost, "rsplit": splitCost,
	"splitlines": func(_ *bounds, _ *starlark.Thread, recv starlark.Value, _ starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		s := str(recv)
		return pieces(uint64(strings.Count(s, "\n") + 1)), ulen(len(s)) / scanBytesPerStep, nil
	},
	"upper": copyOf, "lower": copyOf, "title": copyOf, "capitalize": copyOf,
	"strip": scan, "lstrip": scan, "rstrip": scan,
	"count": scan, "find": scan, "rfind": scan, "index": scan, "rindex": scan,
	"startswith": scan, "endswith": scan, "isalnum": scan, "isalpha": scan, "isdigit": scan,
	"islower": scan, "isspace": scan, "istitle": scan, "isupper": scan,
	"partition": scan, "rpartition": scan, "removeprefix": scan, "removesuffix": scan,
}

func splitCost(_ *bounds, _ *starlark.Thread, recv starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error) {
	s := str(recv)
	n := ulen(len(s)/2 + 1) // split on whitespace
	if sep := arg(args, kwargs, 0, "sep"); sep != nil && sep != starlark.None {
		if p := str(sep); p != "" {
			n = uint64(strings.Count(s, p) + 1)
		}
	}
	if m := arg(args, kwargs, 1, "maxsplit"); m != nil {
		if k, err := starlark.AsInt32(m); err == nil && k >= 0 {
			n = min(n, uint64(k)+1)
		}
	}
	return pieces(n), ulen(len(s)) / scanBytesPerStep, nil
}

// grow is a method that adds the elements of its first argument.
func grow(per uint64) methodCost {
	return func(b *bounds, th *starlark.Thread, _ starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error) {
		var n uint64
		for _, a := range args {
			k, err := b.seqLen(th, a)
			if err != nil {
				return 0, 0, err
			}
			n = sat(n, k)
		}
		n = sat(n, ulen(len(kwargs)))
		return mul(n, per), n, nil
	}
}

// fixed is a method that adds one element.
func fixed(per uint64) methodCost {
	return func(_ *bounds, _ *starlark.Thread, recv starlark.Value, _ starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		return per, 0, nil
	}
}

// copyAll is a method that copies the receiver's elements at per bytes each.
func copyAll(per, header uint64) methodCost {
	return func(_ *bounds, _ *starlark.Thread, recv starlark.Value, _ starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		n := ulen(starlark.Len(recv))
		return sat(header, mul(n, per)), n, nil
	}
}

var listCosts = map[string]methodCost{
	"append": fixed(growSlot),
	"extend": grow(growSlot),
	"insert": func(_ *bounds, _ *starlark.Thread, recv starlark.Value, _ starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		return growSlot, ulen(starlark.Len(recv)), nil
	},
	"index": walkSteps, "remove": walkSteps, "pop": walkSteps,
}

var dictCosts = map[string]methodCost{
	"items":      copyAll(slotBytes+tupleHeader+2*slotBytes, listHeader),
	"keys":       copyAll(slotBytes, listHeader),
	"values":     copyAll(slotBytes, listHeader),
	"update":     grow(entryBytes),
	"setdefault": fixed(entryBytes),
}

var setCosts = map[string]methodCost{
	"add":    fixed(entryBytes),
	"update": grow(entryBytes),
	"union": func(b *bounds, th *starlark.Thread, recv starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error) {
		n, steps, err := grow(entryBytes)(b, th, recv, args, kwargs)
		k := ulen(starlark.Len(recv))
		return sat(sat(n, mul(k, entryBytes)), dictHeader), sat(steps, k), err
	},
	"intersection": walkSteps, "difference": walkSteps, "symmetric_difference": walkSteps,
	"issubset": walkSteps, "issuperset": walkSteps,
}

type builtinCost func(b *bounds, th *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error)

// elements is a builtin that makes a container of its first argument's
// elements at per bytes each (plus header), walking them once.
func elements(per, header uint64) builtinCost {
	return func(b *bounds, th *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error) {
		var n uint64
		if len(args) > 0 {
			var err error
			if n, err = b.seqLen(th, args[0]); err != nil {
				return 0, 0, err
			}
		}
		n = sat(n, ulen(len(kwargs)))
		return sat(header, mul(n, per)), n, nil
	}
}

// walks is a builtin that walks its first argument without keeping it.
func walks(b *bounds, th *starlark.Thread, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
	if len(args) != 1 {
		return 0, ulen(len(args)), nil
	}
	n, err := b.seqLen(th, args[0])
	return 0, n, err
}

// renderAll is the cost of rendering args as print or fail do.
func (b *bounds) renderAll(args starlark.Tuple) (uint64, uint64) {
	var size, visits uint64
	for _, a := range args {
		if s, ok := a.(starlark.String); ok {
			size = sat(size, ulen(len(s)+1))
			continue
		}
		n, c := renderSize(a, b.budget)
		size, visits = sat(size, sat(n, 1)), sat(visits, c)
	}
	return strSize(size), visits
}

var universeCosts = map[string]builtinCost{
	"list":      elements(slotBytes, listHeader),
	"tuple":     elements(slotBytes, tupleHeader),
	"reversed":  elements(slotBytes, listHeader),
	"set":       elements(entryBytes, dictHeader),
	"dict":      elements(entryBytes, dictHeader),
	"enumerate": elements(slotBytes+tupleHeader+2*slotBytes, listHeader),
	"sorted": func(b *bounds, th *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error) {
		n, steps, err := elements(2*slotBytes, listHeader)(b, th, args, kwargs)
		k := steps
		return n, mul(k, uint64(bits.Len64(k)+1)), err
	},
	"zip": func(b *bounds, th *starlark.Thread, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		shortest := uint64(math.MaxUint64)
		for _, a := range args {
			k, err := b.seqLen(th, a)
			if err != nil {
				return 0, 0, err
			}
			shortest = min(shortest, k)
		}
		if len(args) == 0 {
			shortest = 0
		}
		return sat(listHeader, mul(shortest, slotBytes+tupleHeader+mul(ulen(len(args)), slotBytes))), shortest, nil
	},
	"str": func(b *bounds, _ *starlark.Thread, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		if len(args) != 1 {
			return 0, 0, nil
		}
		if _, ok := args[0].(starlark.String); ok {
			return 0, 0, nil
		}
		n, visits := renderSize(args[0], b.budget)
		return strSize(n), visits, nil
	},
	"repr": func(b *bounds, _ *starlark.Thread, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		if len(args) != 1 {
			return 0, 0, nil
		}
		n, visits := renderSize(args[0], b.budget)
		return strSize(n), visits, nil
	},
	"print": func(b *bounds, _ *starlark.Thread, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		n, visits := b.renderAll(args)
		return n, visits, nil
	},
	"bytes": func(b *bounds, th *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error) {
		if len(args) == 1 {
			if s, ok := args[0].(starlark.String); ok {
				return strSize(ulen(len(s))), 0, nil
			}
		}
		return elements(1, strHeader)(b, th, args, kwargs)
	},
	"min": walks, "max": walks, "any": walks, "all": walks,
	"hash": func(_ *bounds, _ *starlark.Thread, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		if len(args) == 1 {
			return 0, ulen(starlark.Len(args[0])) / scanBytesPerStep, nil
		}
		return 0, 0, nil
	},
	"getattr": func(*bounds, *starlark.Thread, starlark.Tuple, []starlark.Tuple) (uint64, uint64, error) {
		return 0, 0, nil
	},
}

// jsonModule is Starlark's json module with encode, decode and indent
// checked.
func (b *bounds) jsonModule() starlark.Value {
	mod := json.Module
	members := starlark.StringDict{}
	for name, v := range mod.Members {
		members[name] = v
	}
	wrap := func(name string, cost builtinCost) {
		orig := mod.Members[name].(*starlark.Builtin)
		members[name] = starlark.NewBuiltin(orig.Name(), func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			n, steps, err := cost(b, th, args, kwargs)
			if err != nil {
				return nil, err
			}
			if err := b.cost(th, n, steps, "json."+name+"()"); err != nil {
				return nil, err
			}
			return orig.CallInternal(th, args, kwargs)
		})
	}
	wrap("encode", func(b *bounds, _ *starlark.Thread, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		if len(args) != 1 {
			return 0, 0, nil
		}
		n, visits := renderSize(args[0], b.budget)
		return strSize(n), visits, nil
	})
	wrap("decode", func(_ *bounds, _ *starlark.Thread, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		if len(args) == 0 {
			return 0, 0, nil
		}
		n := ulen(len(str(args[0])))
		return mul(n, jsonDecodeFactor), n / scanBytesPerStep, nil
	})
	wrap("indent", func(_ *bounds, _ *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error) {
		if len(args) == 0 {
			return 0, 0, nil
		}
		s := str(args[0])
		per := ulen(len(str(arg(nil, kwargs, -1, "prefix"))) + len(str(arg(nil, kwargs, -1, "indent"))) + 1)
		if arg(nil, kwargs, -1, "indent") == nil {
			per += 1 // the default indent is a tab
		}
		depth, maxDepth, tokens := uint64(0), uint64(0), uint64(1)
		for i := 0; i < len(s); i++ {
			switch s[i] {
			case '[', '{':
				depth++
				maxDepth = max(maxDepth, depth)
				tokens++
			case ']', '}':
				depth = max(depth, 1) - 1
				tokens++
			case ',':
				tokens++
			}
		}
		return strSize(sat(ulen(len(s)), mul(tokens, mul(per, maxDepth+1)))), ulen(len(s)) / scanBytesPerStep, nil
	})
	return &starlarkstruct.Module{Name: mod.Name, Members: members}
}
