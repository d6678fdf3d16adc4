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
// lim (limits.go).
//
// They shadow the path builtins with versions that refuse over-long paths
// and then call the builtin; add, join and every builtin that can build a
// value much bigger than its input (tostring, tojson, the @formats, split,
// explode, flatten, transpose, indices, fromjson, the regular-expression
// family) with versions that first ask _tfguard_check (a Go function) and
// refuse what would be too big; _tfguard_add, _tfguard_mul, _tfguard_sub,
// _tfguard_div and the assignment guards replace the query's operators
// (guardOperators). A jq definition sees only the definitions before it, so
// each _tfguard_ alias calls the real builtin, and the query — whose
// definitions come after these — sees only the guarded names. gojq's own
// builtins (sub, splits, pick, ...) call the unguarded functions, so those
// that reach a guarded one are defined again here (library), after the
// guards, and their operators are rewritten like the query's.
func guardsFor(lim valueLimits) *gojq.Query {
	core := mustParse(fmt.Sprintf(`
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
def %[1]sformat($f): format($f);
def %[1]ssplit($s): split($s);
def %[1]sexplode: explode;
def %[1]sindices($i): indices($i);
def %[1]sindex($i): index($i);
def %[1]srindex($i): rindex($i);
def %[1]sflatten: flatten;
def %[1]sflatten($d): flatten($d);
def %[1]stranspose: transpose;
def %[1]sfromjson: fromjson;
def %[1]sstrftime($f): strftime($f);
def %[1]sstrflocaltime($f): strflocaltime($f);
def %[1]smatch($re; $flags; $test): _match($re; $flags; $test);
def %[1]sadd(a; b): b as $b | a as $a |
  if (($a|type) == "string" and ($b|type) == "string" and ($a|utf8bytelength) + ($b|utf8bytelength) > %[3]d)
    or (($a|type) == "array" and ($b|type) == "array" and ($a|length) + ($b|length) > %[4]d)
  then %[1]sbig else $a + $b end;
def %[1]smul(a; b): b as $b | a as $a |
  if (($a|type) == "string" and ($b|type) == "number" and ($a|utf8bytelength) * $b > %[3]d)
    or (($b|type) == "string" and ($a|type) == "number" and ($b|utf8bytelength) * $a > %[3]d)
  then %[1]sbig else $a * $b end;
def %[1]ssub(a; b): b as $b | a as $a | $a | %[1]scheck("-"; $b) | $a - $b;
def %[1]sdiv(a; b): b as $b | a as $a | $a | %[1]scheck("/"; $b) | $a / $b;
def %[1]spaths(p): reduce path(p) as $q (.; %[1]scheck("path"; $q));
def %[1]sassign(p; $x): %[1]spaths(p) | _assign(p; $x);
def %[1]smodify(p; f): %[1]spaths(p) | _modify(p; f);
def %[1]supdate_add(p; v): v as $x | %[1]smodify(p; %[1]sadd(.; $x));
def %[1]supdate_sub(p; v): v as $x | %[1]smodify(p; %[1]ssub(.; $x));
def %[1]supdate_mul(p; v): v as $x | %[1]smodify(p; %[1]smul(.; $x));
def %[1]supdate_div(p; v): v as $x | %[1]smodify(p; %[1]sdiv(.; $x));
def %[1]supdate_mod(p; v): v as $x | %[1]smodify(p; . %% $x);
def %[1]supdate_alt(p; v): v as $x | %[1]smodify(p; . // $x);
def setpath($p; $v): if ($p | length) > %[2]d then %[1]serr else %[1]scheck("path"; $p) | %[1]ssetpath($p; $v) end;
def getpath($p): if ($p | length) > %[2]d then %[1]serr else %[1]sgetpath($p) end;
def delpaths($ps): if any($ps[]; length > %[2]d) then %[1]serr else %[1]sdelpaths($ps) end;
def fromstream(f): %[1]sfromstream(f | if (.[0] | length) > %[2]d then %[1]serr else %[1]scheck("path"; .[0]) end);
def add: %[1]scheck("add") | %[1]sadd0;
def add(f): [f] | add;
def join($x): %[1]scheck("join") | %[1]sjoin($x);
def tojson: %[1]scheck("tojson") | %[1]stojson;
def tostring: %[1]scheck("tostring") | %[1]stostring;
def format($f): %[1]scheck("format"; $f) | %[1]sformat($f);
def _tohtml: format("html");
def _touri: format("uri");
def _tourid: format("urid");
def _tocsv: format("csv");
def _totsv: format("tsv");
def _tosh: format("sh");
def _tobase64: format("base64");
def _tobase64d: format("base64d");
def split($s): %[1]scheck("split"; $s) | %[1]ssplit($s);
def explode: %[1]scheck("explode") | %[1]sexplode;
def indices($i): %[1]scheck("indices"; $i) | %[1]sindices($i);
def index($i): %[1]scheck("index"; $i) | %[1]sindex($i);
def rindex($i): %[1]scheck("rindex"; $i) | %[1]srindex($i);
def flatten: %[1]scheck("flatten") | %[1]sflatten;
def flatten($d): %[1]scheck("flatten") | %[1]sflatten($d);
def transpose: %[1]scheck("transpose") | %[1]stranspose;
def fromjson: %[1]scheck("fromjson") | %[1]sfromjson;
def strftime($f): %[1]scheck("strftime"; $f) | %[1]sstrftime($f);
def strflocaltime($f): %[1]scheck("strftime"; $f) | %[1]sstrflocaltime($f);
def _match($re; $flags; $test): %[1]scheck("match"; [$re, $flags]) | %[1]smatch($re; $flags; $test);
.`, guardPrefix, maxPathLength, lim.maxValue, lim.maxElems))
	// The builtins that reach a guarded one, defined again over the guarded
	// names (gojq's own bind to the unguarded functions). Each must answer as
	// gojq's does: TestGuardedLibraryAgreesWithGojq.
	library := mustParse(`
def _global($flags): ($flags // "") + "g";
def match($re): if ($re | type) == "array" then match($re[0]; $re[1]) else match($re; null) end;
def match($re; $flags): _match($re; $flags; false)[];
def test($re): if ($re | type) == "array" then test($re[0]; $re[1]) else test($re; null) end;
def test($re; $flags): _match($re; $flags; true);
def capture($re): if ($re | type) == "array" then capture($re[0]; $re[1]) else capture($re; null) end;
def capture($re; $flags): match($re; $flags) | .captures | _captures;
def scan($re): scan($re; null);
def scan($re; $flags):
  match($re; _global($flags))
  | if (.captures | length) > 0 then [.captures[] | .string] else .string end;
def splits($re; $flags): . as $s
  | [0, (match($re; _global($flags)) | .offset, .offset + .length), ($s | length)] as $cuts
  | range(0; $cuts | length; 2) as $i
  | $s[$cuts[$i]:$cuts[$i + 1]];
def splits($re): splits($re; null);
def split($re; $flags): [splits($re; $flags)];
def sub($re; str): sub($re; str; null);
def sub($re; str; $flags): . as $s
  # One result per output of str: the k-th result takes str's k-th output at
  # every match (a result started at a later match lacks the text before it).
  | reduce match($re; $flags) as $m ({out: [], at: 0};
      [$m | .captures | _captures | str] as $reps
      | $s[.at:$m.offset] as $gap
      | .out |= [range([length, ($reps | length)] | max) as $k
          | if $k < ($reps | length) then (.[$k] // "") + $gap + $reps[$k] else .[$k] end]
      | .at = $m.offset + $m.length)
  | if .out == [] then $s else .out[] + $s[.at:] end;
def gsub($re; str): sub($re; str; "g");
def gsub($re; str; $flags): sub($re; str; _global($flags));
def pick(f): . as $v | reduce path(f) as $p (null; setpath($p; $v | getpath($p)));
.`)
	guardOperators(library)
	core.FuncDefs = append(core.FuncDefs, library.FuncDefs...)
	return core
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
