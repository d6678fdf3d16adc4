package jsonq

import (
	"fmt"

	"github.com/itchyny/gojq"
)

// maxPathLength bounds the paths a query may follow or build. gojq's setpath,
// getpath, delpaths and fromstream recurse in Go once per path element: a path
// of a few million elements, cheap to build by doubling an array
// ([0] | until(length >= 4000000; . + .)), overflows the goroutine stack, which
// Go cannot recover from, and the process dies. Real documents are far
// shallower than this bound.
const maxPathLength = maxDepth

// guardPrefix starts the names of the original builtins the guards call; a
// query may not name them (compile refuses it), so it cannot go around a guard.
const guardPrefix = "_tfguard_"

// guardsFor returns the guards of a service whose values are bounded by
// maxValue bytes (a string's, or an array's at 16 bytes an element).
//
// They shadow the path builtins with versions that refuse over-long paths
// and then call the builtin, and add, join, tojson and tostring with versions
// that refuse to build a value over maxValue (budget.go); _tfguard_add and
// _tfguard_mul replace the query's + and * (guardOperators). A jq definition
// sees only the definitions before it, so each _tfguard_ function calls the
// real builtin, and the query — whose definitions come after these — sees
// only the guarded names.
func guardsFor(maxValue int) *gojq.Query {
	return mustParse(fmt.Sprintf(`
def %[1]serr: error("the path has more than %[2]d elements; jq paths in this tool are limited to %[2]d");
def %[1]sbig: error("the query would build a value over %[3]d bytes; values in this tool are limited to %[3]d bytes");
def %[1]ssetpath($p; $v): setpath($p; $v);
def %[1]sgetpath($p): getpath($p);
def %[1]sdelpaths($ps): delpaths($ps);
def %[1]sfromstream(f): fromstream(f);
def %[1]sadd0: add;
def %[1]sjoin($x): join($x);
def %[1]stojson: tojson;
def %[1]stostring: tostring;
def %[1]sadd(a; b): b as $b | a as $a |
  if (($a|type) == "string" and ($b|type) == "string" and ($a|utf8bytelength) + ($b|utf8bytelength) > %[3]d)
    or (($a|type) == "array" and ($b|type) == "array" and ($a|length) + ($b|length) > %[4]d)
  then %[1]sbig else $a + $b end;
def %[1]smul(a; b): b as $b | a as $a |
  if (($a|type) == "string" and ($b|type) == "number" and ($a|utf8bytelength) * $b > %[3]d)
    or (($b|type) == "string" and ($a|type) == "number" and ($b|utf8bytelength) * $a > %[3]d)
  then %[1]sbig else $a * $b end;
def setpath($p; $v): if ($p | length) > %[2]d then %[1]serr else %[1]ssetpath($p; $v) end;
def getpath($p): if ($p | length) > %[2]d then %[1]serr else %[1]sgetpath($p) end;
def delpaths($ps): if any($ps[]; length > %[2]d) then %[1]serr else %[1]sdelpaths($ps) end;
def fromstream(f): %[1]sfromstream(f | if (.[0] | length) > %[2]d then %[1]serr else . end);
def add: if %[1]ssize(%[3]d) then %[1]sbig else %[1]sadd0 end;
def add(f): [f] | add;
def join($x): if %[1]ssize(%[3]d) then %[1]sbig else %[1]sjoin($x) end;
def tojson: if %[1]ssize(%[3]d) then %[1]sbig else %[1]stojson end;
def tostring: if type != "string" and %[1]ssize(%[3]d) then %[1]sbig else %[1]stostring end;
.`, guardPrefix, maxPathLength, maxValue, maxValue/16))
}

func mustParse(src string) *gojq.Query {
	q, err := gojq.Parse(src)
	if err != nil {
		panic(fmt.Sprintf("jsonq: guards do not parse: %v", err))
	}
	return q
}

// shallow reports whether v is nested at most limit levels deep, without
// recursion (gojq.Marshal, which sizes results, recurses once per level).
func shallow(v any, limit int) bool {
	type item struct {
		v     any
		depth int
	}
	stack := []item{{v, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if it.depth > limit {
			return false
		}
		switch x := it.v.(type) {
		case []any:
			for _, e := range x {
				stack = append(stack, item{e, it.depth + 1})
			}
		case map[string]any:
			for _, e := range x {
				stack = append(stack, item{e, it.depth + 1})
			}
		}
	}
	return true
}
