package jsonq

import (
	"context"
	"fmt"
	"math"
	"reflect"

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
// they run: the query's + and * are rewritten into guarded functions that
// refuse a string or an array over maxValue (a third of the bound), and add,
// join, tojson and tostring are shadowed by guards (guards.go).

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

// guardOperators rewrites every + and * of q (and of its definitions) into
// calls of the guards _tfguard_add and _tfguard_mul, which check the size of
// what they would build first. gojq compiles an operator as a call of its
// internal function with the same two arguments, so the rewrite keeps the
// order in which jq produces results.
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
				name := ""
				switch q.Op {
				case gojq.OpAdd:
					name = guardPrefix + "add"
				case gojq.OpMul:
					name = guardPrefix + "mul"
				}
				if name != "" {
					call := &gojq.Func{Name: name, Args: []*gojq.Query{q.Left, q.Right}}
					*q = gojq.Query{Term: &gojq.Term{Type: gojq.TermTypeFunc, Func: call}}
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

// encodedSizeOver reports whether v's JSON is longer than limit bytes,
// walking at most limit values (a value shared by many arrays counts each
// time, as its JSON repeats it).
func encodedSizeOver(v any, limit int) bool {
	size := 0
	stack := []any{v}
	for len(stack) > 0 && size <= limit {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		size++
		switch x := x.(type) {
		case string:
			size += len(x) + 2
		case []any:
			size += 2 + len(x)
			stack = append(stack, x...)
		case map[string]any:
			size += 2
			for k, e := range x {
				size += len(k) + 4
				stack = append(stack, e)
			}
		default:
			size += 24 // numbers, booleans, null
		}
	}
	return size > limit
}

// sizeFunction is _tfguard_big($limit): whether the input's JSON is over $limit bytes.
func sizeFunction(v any, args []any) any {
	limit, ok := args[0].(int)
	if !ok {
		limit = math.MaxInt
	}
	return encodedSizeOver(v, limit)
}
