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

// guards shadows the path builtins with versions that refuse over-long paths
// and then call the builtin. A jq definition sees only the definitions before
// it, so each _tfguard_ function calls the real builtin, and the query — whose
// definitions come after these — sees only the guarded names.
var guards = mustParse(fmt.Sprintf(`
def %[1]serr: error("the path has more than %[2]d elements; jq paths in this tool are limited to %[2]d");
def %[1]ssetpath($p; $v): setpath($p; $v);
def %[1]sgetpath($p): getpath($p);
def %[1]sdelpaths($ps): delpaths($ps);
def %[1]sfromstream(f): fromstream(f);
def setpath($p; $v): if ($p | length) > %[2]d then %[1]serr else %[1]ssetpath($p; $v) end;
def getpath($p): if ($p | length) > %[2]d then %[1]serr else %[1]sgetpath($p) end;
def delpaths($ps): if any($ps[]; length > %[2]d) then %[1]serr else %[1]sdelpaths($ps) end;
def fromstream(f): %[1]sfromstream(f | if (.[0] | length) > %[2]d then %[1]serr else . end);
.`, guardPrefix, maxPathLength))

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
