package program

import (
	"fmt"
	"math"
	"math/bits"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

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

// maxRender is the largest rendered size among the values a format may
// insert: the items of a tuple, the values of a dict, or x itself.
func (b *bounds) maxRender(x starlark.Value, limit uint64) (uint64, uint64) {
	var worst, visits uint64
	each := func(v starlark.Value) {
		n, c := renderSize(v, limit, b.ints)
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
// the values it visited, charged as steps, and with ints the steps of
// converting big ints to decimal.
func renderSize(v starlark.Value, limit uint64, ints bool) (size, visits uint64) {
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
			if ints { // the conversion's time ("script-ints")
				visits = sat(visits, intTextSteps(bitLen(v)))
			}
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
