package jsonq

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Single steps of a query run in Go and do not look at the context: a step
// that builds a 1 GB string runs to its end, however late, and holds the
// memory (issue 32: "x" * 8e7 | [$s, …] | @base64 went on for 11 s after the
// caller's deadline and grew the worker by 2.7 GB). So every builtin that can
// build a value much bigger than its input, or work much longer than its
// input is big, is shadowed by a guard (guards.go) that first asks
// _tfguard_check how big the result would be and raises an error instead of
// running it when it is over the bounds below. Every remaining step is then
// linear in a value of at most maxValue bytes, so the context check between
// steps stops the query within milliseconds of its deadline.

// valueLimits are the bounds _tfguard_check enforces.
type valueLimits struct {
	maxValue int // bytes of a string (or of a value's JSON) one step may build
	maxElems int // elements of an array one step may build
	// maxMatches bounds a global regular-expression match, and maxScan the
	// bytes gojq's match scans: it counts runes from the string's start for
	// every match, so its time is the matches times the string's length.
	maxMatches int
	maxScan    int
	// maxCompare bounds the element comparisons of array -, indices, index.
	maxCompare int
	maxPattern int // bytes of a regular expression or a strftime format
}

func limitsFor(maxValue int) valueLimits {
	return valueLimits{
		maxValue:   maxValue,
		maxElems:   maxValue / 8,
		maxMatches: max(maxValue/128, 1000),
		maxScan:    1 << 30,
		maxCompare: 50_000_000,
		maxPattern: 64 << 10,
	}
}

// limitError is the error of a refused step; the message is shown to the model.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

func (l valueLimits) tooBig(what string, size int) error {
	return &limitError{fmt.Sprintf("the query would build a value over %d bytes (%s of about %d bytes); values in this tool are limited to %d bytes",
		l.maxValue, what, size, l.maxValue)}
}

func (l valueLimits) tooMany(what string, n int) error {
	return &limitError{fmt.Sprintf("the query would build more than %d elements (%s of at least %d); arrays built in one step are limited to %d",
		l.maxElems, what, n, l.maxElems)}
}

// checkFunction is _tfguard_check($op) and _tfguard_check($op; $arg): the
// input when the builtin $op may run on it, an error when it would build too
// much. Inputs of the wrong type pass: the builtin reports them.
func (l valueLimits) checkFunction(cache map[[2]string]*regexp.Regexp) func(any, []any) any {
	return func(v any, args []any) any {
		op, _ := args[0].(string)
		var arg any
		if len(args) > 1 {
			arg = args[1]
		}
		if err := l.check(op, v, arg, cache); err != nil {
			return err
		}
		return v
	}
}

func (l valueLimits) check(op string, v, arg any, cache map[[2]string]*regexp.Regexp) error {
	switch op {
	case "format":
		name, _ := arg.(string)
		return l.check("@"+name, v, nil, cache)
	case "tostring", "@text":
		if _, ok := v.(string); ok {
			return nil
		}
		return l.sized(op, v, 1)
	case "tojson", "@json", "add", "join":
		return l.sized(op, v, 1)
	case "@html", "@uri", "@csv", "@tsv", "@sh":
		return l.sized(op, v, 1)
	case "@base64":
		return l.sized(op, v, 2) // the text, its bytes and its encoding live at once
	case "@base64d":
		if _, ok := v.(string); ok {
			return nil
		}
		return l.sized(op, v, 1)
	case "explode":
		if s, ok := v.(string); ok {
			if n := utf8.RuneCountInString(s); n > l.maxElems {
				return l.tooMany("explode", n)
			}
		}
	case "split", "/":
		s, ok1 := v.(string)
		sep, ok2 := arg.(string)
		if ok1 && ok2 {
			n := 1
			if sep == "" {
				n = utf8.RuneCountInString(s)
			} else {
				n += strings.Count(s, sep)
			}
			if n > l.maxElems {
				return l.tooMany("split", n)
			}
		}
	case "indices", "index", "rindex":
		return l.indices(op, v, arg)
	case "-":
		a, ok1 := v.([]any)
		b, ok2 := arg.([]any)
		if ok1 && ok2 && len(a)*len(b) > l.maxCompare {
			return &limitError{fmt.Sprintf("array - array compares every pair: %d × %d elements is over the limit of %d comparisons", len(a), len(b), l.maxCompare)}
		}
	case "flatten":
		if n, over := countLeaves(v, l.maxElems); over {
			return l.tooMany("flatten", n)
		}
	case "transpose":
		if rows, ok := v.([]any); ok {
			longest := 0
			for _, r := range rows {
				if r, ok := r.([]any); ok {
					longest = max(longest, len(r))
				}
			}
			if n := len(rows) * longest; longest > 0 && n/longest != len(rows) || n > l.maxElems {
				return l.tooMany("transpose", n)
			}
		}
	case "fromjson":
		if s, ok := v.(string); ok && len(s) > l.maxValue/4 {
			return &limitError{fmt.Sprintf("fromjson of %d bytes: the text is over the limit of %d bytes (parsed JSON takes many times its text)", len(s), l.maxValue/4)}
		}
	case "strftime":
		if s, ok := arg.(string); ok && len(s) > l.maxPattern {
			return &limitError{fmt.Sprintf("the strftime format is %d bytes, over the limit of %d", len(s), l.maxPattern)}
		}
	case "path":
		return l.path(arg)
	case "match":
		return l.match(v, arg, cache)
	}
	return nil
}

// sized refuses op when factor times the size of its output would be over maxValue.
func (l valueLimits) sized(op string, v any, factor int) error {
	limit := l.maxValue / factor
	if size, over := formatSize(op, v, limit); over {
		return l.tooBig(op, size*factor)
	}
	return nil
}

func (l valueLimits) indices(op string, v, arg any) error {
	switch v := v.(type) {
	case string:
		x, ok := arg.(string)
		if !ok || x == "" || op != "indices" {
			return nil // index and rindex of a string find one position
		}
		n := 0
		for i := 0; i < len(v); {
			j := strings.Index(v[i:], x)
			if j < 0 {
				break
			}
			if n++; n > l.maxElems {
				return l.tooMany(op, n)
			}
			i += j + 1
		}
	case []any:
		m := 1
		if x, ok := arg.([]any); ok {
			m = len(x)
		}
		if len(v)*m > l.maxCompare {
			return &limitError{fmt.Sprintf("%s compares %d × %d elements, over the limit of %d comparisons", op, len(v), m, l.maxCompare)}
		}
	}
	return nil
}

// path refuses a path that indexes an array past maxElems: setpath would
// allocate the array up to that index in one step (null | .[5e8] = 1 is 8 GB).
func (l valueLimits) path(p any) error {
	elems, ok := p.([]any)
	if !ok {
		return nil
	}
	for _, e := range elems {
		switch e := e.(type) {
		case map[string]any:
			for _, k := range []string{"start", "end"} {
				if f, ok := toFloat(e[k]); ok && f > float64(l.maxElems) {
					return l.pathIndex(f)
				}
			}
		default:
			if f, ok := toFloat(e); ok && f > float64(l.maxElems) {
				return l.pathIndex(f)
			}
		}
	}
	return nil
}

func (l valueLimits) pathIndex(f float64) error {
	return &limitError{fmt.Sprintf("array index %.0f is over the limit of %d: setting it would build an array that long", f, l.maxElems)}
}

func toFloat(v any) (float64, bool) {
	switch v := v.(type) {
	case int:
		return float64(v), true
	case float64:
		return v, true
	default:
		if f, ok := v.(interface{ Float64() (float64, error) }); ok { // json.Number
			x, err := f.Float64()
			return x, err == nil
		}
		if n, ok := v.(interface{ Sign() int }); ok && n.Sign() > 0 { // *big.Int: huge
			return math.Inf(1), true
		}
	}
	return 0, false
}

// match checks a global match before gojq runs it: gojq builds every match
// as an object, and counts the runes before each match from the string's
// start, so a string of 20 MB with 20 million matches takes hours.
func (l valueLimits) match(v, arg any, cache map[[2]string]*regexp.Regexp) error {
	s, ok := v.(string)
	args, ok2 := arg.([]any)
	if !ok || !ok2 || len(args) != 2 {
		return nil
	}
	re, ok := args[0].(string)
	if !ok {
		return nil
	}
	if len(re) > l.maxPattern {
		return &limitError{fmt.Sprintf("the regular expression is %d bytes, over the limit of %d", len(re), l.maxPattern)}
	}
	flags, _ := args[1].(string)
	if !strings.ContainsRune(flags, 'g') || s == "" {
		return nil // one match at most
	}
	key := [2]string{re, flags}
	r, ok := cache[key]
	if !ok {
		src := re
		if strings.ContainsRune(flags, 'i') {
			src = "(?i)" + src
		}
		if strings.ContainsRune(flags, 'm') {
			src = "(?s)" + src
		}
		var err error
		if r, err = regexp.Compile(src); err != nil {
			return nil // gojq reports it
		}
		cache[key] = r
	}
	limit := min(l.maxMatches, max(l.maxScan/len(s), 1))
	// Every match but the last may add one empty match after it (gojq's
	// probe), so limit/2 + 1 standard matches can already be too many.
	if n := len(r.FindAllStringIndex(s, limit/2+1)); n > limit/2 {
		return &limitError{fmt.Sprintf("the regular expression matches the %d-byte string more than %d times; "+
			"global matches (match/scan/splits/sub/gsub with \"g\") are limited to %d on a string this long — for a fixed separator use split(\",\")",
			len(s), limit/2, limit/2)}
	}
	return nil
}

// countLeaves counts the elements flatten would build, walking at most limit
// of them (an array shared by many counts each time, as flatten copies it).
func countLeaves(v any, limit int) (int, bool) {
	n := 0
	stack := []any{v}
	for len(stack) > 0 && n <= limit {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if xs, ok := x.([]any); ok {
			stack = append(stack, xs...)
			continue
		}
		n++
	}
	return n - 1, n > limit // the input itself is not a leaf when it is an array
}

// formatSize estimates the bytes of op's output on v (a format, tostring or
// tojson), walking at most about limit bytes; over reports it is more.
func formatSize(op string, v any, limit int) (size int, over bool) {
	stack := []any{v}
	top := true
	for len(stack) > 0 && size <= limit {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch x := x.(type) {
		case string:
			if top && op != "tojson" && op != "@json" || op == "@csv" || op == "@tsv" || op == "@sh" {
				size += escapedSize(op, x) // the text itself, escaped for the format
			} else {
				size += escapedSize("@json", x)
			}
		case []any:
			size += 2 + len(x)
			stack = append(stack, x...)
		case map[string]any:
			size += 2
			for k, e := range x {
				size += escapedSize("@json", k) + 2
				stack = append(stack, e)
			}
		default:
			size += 24 // numbers, booleans, null
		}
		top = false
	}
	if factor := escapeFactor(op); factor > 1 && !isRowFormat(op) {
		// A JSON text run through @html or @uri escapes its quotes and brackets too.
		if _, ok := v.(string); !ok {
			size *= factor
		}
	}
	return size, size > limit
}

func isRowFormat(op string) bool { return op == "@csv" || op == "@tsv" || op == "@sh" }

func escapeFactor(op string) int {
	switch op {
	case "@html":
		return 6
	case "@uri":
		return 3
	}
	return 1
}

// escapedSize is the length of s once op escapes it.
func escapedSize(op string, s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch op {
		case "@json", "tojson", "tostring", "@text":
			if b < ' ' || b == '"' || b == '\\' || b == 0x7f {
				n += 5
			} else if b >= utf8.RuneSelf {
				n += 2 // invalid bytes become U+FFFD
			}
		case "@html":
			switch b {
			case '<', '>':
				n += 3
			case '&':
				n += 4
			case '\'', '"':
				n += 5
			}
		case "@uri":
			if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.' || b == '~') {
				n += 2
			}
		case "@csv":
			if b == '"' || b == 0 {
				n++
			}
		case "@tsv":
			if b == '\t' || b == '\r' || b == '\n' || b == '\\' || b == 0 {
				n++
			}
		case "@sh":
			if b == '\'' {
				n += 3
			} else if b == 0 {
				n++
			}
		}
	}
	switch op {
	case "@json", "tojson", "@csv", "@sh":
		n += 2
	}
	return n
}
