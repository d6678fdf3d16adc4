package jsonq

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/itchyny/gojq"
)

// The memory bound of a query (Config.MaxQueryBytes) has two parts.
//
// The heap is checked as the query runs, every checkEvery interpreter steps
// (not on a timer: a query that doubles a string needs only a few steps per
// doubling). gojq checks its context before every step, so a context whose
// Done method counts the calls is a step counter. The query is stopped once
// the heap has grown a third of the bound since the query started: a slice
// that grows by appending (a deep recursion's stack, [repeat(1)]'s array)
// reallocates to 1.25 times its size while the old copy is still live, so a
// query stopped at a third never reaches the bound.
//
// Single steps that build a large value from small ones are checked before
// they run: the query's operators are rewritten into guarded functions that
// refuse a string or an array over Config.MaxValueBytes, and the builtins
// that can build one are shadowed by guards (guards.go, limits.go).

// checkEvery is how many interpreter steps pass between two heap checks.
const checkEvery = 16

// meteredContext counts gojq's steps and stops the query when check fails.
type meteredContext struct {
	context.Context
	cancel context.CancelCauseFunc
	check  func() error
	steps  uint64
	err    error
}

// Done is called by gojq before every step of the query.
func (c *meteredContext) Done() <-chan struct{} {
	c.steps++
	if c.steps%checkEvery == 0 && c.err == nil {
		if err := c.check(); err != nil {
			c.err = err
			c.cancel(err) // closes the parent's Done channel before it is returned
		}
	}
	return c.Context.Done()
}

// heapCheck fails once the heap has grown more than limit over baseline.
func heapCheck(baseline, limit uint64) func() error {
	return func() error {
		heap, ok := heapBytes()
		if ok && heap > baseline && heap-baseline > limit {
			return fmt.Errorf("%w: the heap grew %d bytes while the query ran, over %d", errHeapLimit, heap-baseline, limit)
		}
		return nil
	}
}

// guardedOps name the guard each operator is rewritten into.
var guardedOps = map[gojq.Operator]string{
	gojq.OpAdd: "add", gojq.OpMul: "mul", gojq.OpSub: "sub", gojq.OpDiv: "div",
	gojq.OpAssign: "assign", gojq.OpModify: "modify",
	gojq.OpUpdateAdd: "update_add", gojq.OpUpdateSub: "update_sub", gojq.OpUpdateMul: "update_mul",
	gojq.OpUpdateDiv: "update_div", gojq.OpUpdateMod: "update_mod", gojq.OpUpdateAlt: "update_alt",
}

// guardOperators rewrites the operators of q (and of its definitions) that
// can build big values into calls of guards (guardedOps), which check the
// size of what they would build first: + and * of strings and arrays, - of
// arrays, / of strings (a split), and the assignments, whose paths may
// index an array far past its end (.[5e8] = 1). gojq compiles an operator as
// a call of its internal function with the same two arguments, so the
// rewrite keeps the order in which jq produces results. String
// interpolation, which gojq joins with an unguarded +, is rewritten too.
func guardOperators(q *gojq.Query) {
	seen := map[uintptr]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() || seen[v.Pointer()] {
				return
			}
			seen[v.Pointer()] = true
			if q, ok := v.Interface().(*gojq.Query); ok {
				walk(v.Elem())
				if name, ok := guardedOps[q.Op]; ok {
					call := &gojq.Func{Name: guardPrefix + name, Args: []*gojq.Query{q.Left, q.Right}}
					*q = gojq.Query{Term: &gojq.Term{Type: gojq.TermTypeFunc, Func: call}}
				}
				return
			}
			if t, ok := v.Interface().(*gojq.Term); ok {
				formatInterpolation(t) // before its parts are walked
				walk(v.Elem())
				return
			}
			if str, ok := v.Interface().(*gojq.String); ok {
				walk(v.Elem())
				if len(str.Queries) > 1 {
					str.Queries = []*gojq.Query{joinParts(str.Queries, &gojq.Func{Name: "tostring"})}
				}
				return
			}
			walk(v.Elem())
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		}
	}
	walk(reflect.ValueOf(q))
}

// String interpolation ("a\(.x)b", @base64 "\(.x)") is compiled by gojq
// as each part through tostring or the format, the parts joined with its
// internal, unguarded +. guardOperators joins them with the guarded + first:
// an interpolated string (a term, an object key, a pattern) keeps one
// part, the join, which gojq's tostring leaves as it is; a format string
// becomes the join itself.

// formatInterpolation rewrites a format string into the join of its parts.
func formatInterpolation(t *gojq.Term) {
	if t.Type != gojq.TermTypeFormat || t.Str == nil || t.Str.Queries == nil {
		return
	}
	var f *gojq.Func
	switch t.Format {
	case "@text":
		f = &gojq.Func{Name: "tostring"}
	case "@json":
		f = &gojq.Func{Name: "tojson"}
	default:
		name := &gojq.Query{Term: &gojq.Term{Type: gojq.TermTypeString, Str: &gojq.String{Str: strings.TrimPrefix(t.Format, "@")}}}
		f = &gojq.Func{Name: "format", Args: []*gojq.Query{name}}
	}
	q := joinParts(t.Str.Queries, f)
	*t = gojq.Term{Type: gojq.TermTypeQuery, Query: q, SuffixList: t.SuffixList}
}

// joinParts is the guarded join of the parts of an interpolated string, the
// non-literal ones piped through f.
func joinParts(parts []*gojq.Query, f *gojq.Func) *gojq.Query {
	var q *gojq.Query
	for _, e := range parts {
		if e.Term == nil || e.Term.Str == nil {
			e = &gojq.Query{Left: e, Op: gojq.OpPipe, Right: &gojq.Query{Term: &gojq.Term{Type: gojq.TermTypeFunc, Func: f}}}
		}
		if q == nil {
			q = e
		} else {
			q = &gojq.Query{Term: &gojq.Term{Type: gojq.TermTypeFunc, Func: &gojq.Func{Name: guardPrefix + "add", Args: []*gojq.Query{q, e}}}}
		}
	}
	return q
}
