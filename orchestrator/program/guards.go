package program

import (
	"fmt"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

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
		if b.ints {
			s, err := checkIntOp(op, x, y)
			if err != nil {
				return nil, err
			}
			steps = sat(steps, s)
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
