package program

import (
	"math"
	"math/bits"
	"strings"

	"go.starlark.net/lib/json"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

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
			n, c := renderSize(a, b.budget, b.ints)
			worst, visits = max(worst, n), sat(visits, c)
		}
		for _, kv := range kwargs {
			n, c := renderSize(kv[1], b.budget, b.ints)
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
		n, c := renderSize(a, b.budget, b.ints)
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
		n, visits := renderSize(args[0], b.budget, b.ints)
		return strSize(n), visits, nil
	},
	"repr": func(b *bounds, _ *starlark.Thread, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		if len(args) != 1 {
			return 0, 0, nil
		}
		n, visits := renderSize(args[0], b.budget, b.ints)
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
	"int": intCost,
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
		n, visits := renderSize(args[0], b.budget, b.ints)
		return strSize(n), visits, nil
	})
	wrap("decode", func(b *bounds, _ *starlark.Thread, args starlark.Tuple, _ []starlark.Tuple) (uint64, uint64, error) {
		if len(args) == 0 {
			return 0, 0, nil
		}
		s := str(args[0])
		n := ulen(len(s))
		var conv uint64
		if b.ints {
			var err error
			if conv, err = checkJSONDigits(s, "json.decode()'s text"); err != nil {
				return 0, 0, err
			}
		}
		return mul(n, jsonDecodeFactor), sat(n/scanBytesPerStep, conv), nil
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
