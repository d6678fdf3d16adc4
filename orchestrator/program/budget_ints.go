package program

import (
	"fmt"
	"math"
	"math/bits"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// Big integers (workflow version "script-ints" 1). Starlark's ints have no
// size limit, and the time of one operation on them grows with its operands
// (quadratically for *, //, % and the conversions to and from decimal
// text): `x = 3; for i in range(27): x = x * x` is 27 interpreter steps that
// take minutes and gigabytes. So, like Python's limit on the digits of
// int("…") but for every operation:
//
//   - an int has at most MaxIntBits bits: an operation whose result could be
//     longer is refused before it runs (a limit error, max_int_bits), and so
//     is int("…"), json.decode or a JSON value (args, tool results) with a
//     number of more than MaxIntDigits digits;
//   - every operation on an int of more than one word adds its work to the
//     step count before it runs, by the size of its operands (a word is 64
//     bits): linear operations one step per intWordsPerStep words,
//     multiplication, division and the conversions to and from text one step
//     per intWordOpsPerStep products of words.
//
// Both depend on the operands only, so a replay reaches the same verdict,
// and one operation is at most a fraction of a millisecond: the step budget
// bounds a workflow task's time well inside the deadlock detector's.

// MaxIntBits is the largest int a program may compute, in bits.
const MaxIntBits = 1 << 16

// MaxIntDigits is the most decimal digits of an int a program may read from
// text: the digits of the largest decimal number of MaxIntBits bits (19,728).
const MaxIntDigits = 19_728

const (
	intWordsPerStep   = 64
	intWordOpsPerStep = 64
)

// LimitInt names the bound on ints in errors.
const LimitInt = "max_int_bits"

// bitLen is the number of bits of |x|.
func bitLen(x starlark.Int) uint64 {
	if v, ok := x.Int64(); ok {
		if v < 0 {
			if v == math.MinInt64 {
				return 64
			}
			v = -v
		}
		return uint64(bits.Len64(uint64(v)))
	}
	return uint64(x.BigInt().BitLen())
}

func words(nbits uint64) uint64 { return max((nbits+63)/64, 1) }

func intLimitError(what string, n uint64) error {
	return &limitError{limit: LimitInt, msg: fmt.Sprintf(
		"%s would make an int of up to %d bits, over the limit of %d bits (%d decimal digits)", what, n, MaxIntBits, MaxIntDigits)}
}

// intOpCost is the steps of x op y on ints and the largest number of bits
// its result may have; ok is false when the operation is not one on ints.
func intOpCost(op syntax.Token, x, y starlark.Value) (steps, nbits uint64, ok bool) {
	xi, ok1 := x.(starlark.Int)
	yi, ok2 := y.(starlark.Int)
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	bx, by := bitLen(xi), bitLen(yi)
	wx, wy := words(bx), words(by)
	linear := (wx + wy) / intWordsPerStep
	quadratic := sat(linear, mul(wx, wy)/intWordOpsPerStep)
	switch op {
	case syntax.PLUS, syntax.MINUS, syntax.PIPE, syntax.AMP, syntax.CIRCUMFLEX:
		return linear, max(bx, by) + 1, true
	case syntax.STAR:
		return quadratic, sat(bx, by), true
	case syntax.SLASHSLASH, syntax.PERCENT:
		return quadratic, max(bx, by), true
	case syntax.SLASH:
		return quadratic, 0, true
	case syntax.LTLT:
		n := count(y) // Starlark refuses a shift of 512 or more
		return sat(linear, n/64/intWordsPerStep), sat(bx, n), true
	case syntax.GTGT:
		return linear, bx, true
	}
	return linear, 0, true // comparisons
}

// checkIntOp refuses x op y on ints when its result could pass MaxIntBits,
// and returns the steps it takes.
func checkIntOp(op syntax.Token, x, y starlark.Value) (uint64, error) {
	steps, nbits, ok := intOpCost(op, x, y)
	if !ok {
		return 0, nil
	}
	if nbits > MaxIntBits {
		return 0, intLimitError(fmt.Sprintf("int %s int", op), nbits)
	}
	return steps, nil
}

// intTextSteps is the steps of converting an int of nbits bits to or from
// text.
func intTextSteps(nbits uint64) uint64 {
	w := words(nbits)
	if w <= 1 {
		return 0
	}
	return sat(w/intWordsPerStep, mul(w, w)/intWordOpsPerStep)
}

// digitBits is the bits an int may need per digit of base b (2..36),
// rounded up.
func digitBits(base int) uint64 {
	if base < 2 {
		base = 10
	}
	return uint64(math.Ceil(math.Log2(float64(base)) * 1024))
}

// intCost is int(x, base): a string of more digits than MaxIntBits allows is
// refused, and the conversion is charged by its length.
func intCost(b *bounds, _ *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (uint64, uint64, error) {
	if !b.ints {
		return 0, 0, nil
	}
	s, ok := starlark.AsString(arg(args, kwargs, 0, "x"))
	if !ok {
		return 0, 0, nil
	}
	base := 10
	if v := arg(args, kwargs, 1, "base"); v != nil {
		if n, err := starlark.AsInt32(v); err == nil && n >= 2 && n <= 36 {
			base = n
		} else if err == nil && n == 0 {
			base = 16 // 0x… is the densest prefix base 0 accepts
		}
	}
	digits := ulen(len(strings.TrimLeft(s, "+-")))
	nbits := mul(digits, digitBits(base)) / 1024
	if nbits > MaxIntBits+64 { // a sign and a base prefix do not count
		return 0, 0, &limitError{limit: LimitInt, msg: fmt.Sprintf(
			"int() of a string of %d digits would make an int over the limit of %d bits (%d decimal digits)", digits, MaxIntBits, MaxIntDigits)}
	}
	return intSize(nbits), intTextSteps(nbits), nil
}

// longestDigits is the longest run of decimal digits outside strings in
// JSON text s, and the steps of converting the runs of more than one word.
func longestDigits(s string) (longest, steps uint64) {
	run := uint64(0)
	end := func() {
		longest = max(longest, run)
		if run > 19 {
			steps = sat(steps, intTextSteps(run*digitBits(10)/1024))
		}
		run = 0
	}
	inString, escaped := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c >= '0' && c <= '9':
			run++
			continue
		case c == '"':
			inString = true
		}
		end()
	}
	end()
	return longest, steps
}

// checkJSONDigits refuses JSON text with a number longer than MaxIntDigits
// and returns the steps of converting its numbers.
func checkJSONDigits(s, what string) (uint64, error) {
	n, steps := longestDigits(s)
	if n > MaxIntDigits {
		return 0, &limitError{limit: LimitInt, msg: fmt.Sprintf(
			"%s has a number of %d digits, over the limit of %d digits (ints have at most %d bits)", what, n, MaxIntDigits, MaxIntBits)}
	}
	return steps, nil
}
