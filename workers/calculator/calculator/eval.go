package calculator

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/parser"
)

// Limits of [Eval].
const (
	// MaxExpressionLength bounds the input, in bytes (the contract allows 1000).
	MaxExpressionLength = 1000
	// MaxNodes bounds the syntax tree, and with it the work: evaluation visits each
	// node once, there are no loops, variables or user functions.
	MaxNodes = 500
)

// Errors of [Eval]; the messages are written for a model.
var (
	ErrTooLong       = fmt.Errorf("the expression is longer than %d characters", MaxExpressionLength)
	ErrNotArithmetic = errors.New("only numbers, arithmetic operators, parentheses and math functions are allowed")
)

type function struct {
	arity int // -1 = one or more
	fn    func(args []float64) float64
}

var functions = map[string]function{
	"abs":   {1, func(a []float64) float64 { return math.Abs(a[0]) }},
	"sqrt":  {1, func(a []float64) float64 { return math.Sqrt(a[0]) }},
	"cbrt":  {1, func(a []float64) float64 { return math.Cbrt(a[0]) }},
	"exp":   {1, func(a []float64) float64 { return math.Exp(a[0]) }},
	"ln":    {1, func(a []float64) float64 { return math.Log(a[0]) }},
	"log":   {1, func(a []float64) float64 { return math.Log(a[0]) }},
	"log2":  {1, func(a []float64) float64 { return math.Log2(a[0]) }},
	"log10": {1, func(a []float64) float64 { return math.Log10(a[0]) }},
	"sin":   {1, func(a []float64) float64 { return math.Sin(a[0]) }},
	"cos":   {1, func(a []float64) float64 { return math.Cos(a[0]) }},
	"tan":   {1, func(a []float64) float64 { return math.Tan(a[0]) }},
	"asin":  {1, func(a []float64) float64 { return math.Asin(a[0]) }},
	"acos":  {1, func(a []float64) float64 { return math.Acos(a[0]) }},
	"atan":  {1, func(a []float64) float64 { return math.Atan(a[0]) }},
	"atan2": {2, func(a []float64) float64 { return math.Atan2(a[0], a[1]) }},
	"floor": {1, func(a []float64) float64 { return math.Floor(a[0]) }},
	"ceil":  {1, func(a []float64) float64 { return math.Ceil(a[0]) }},
	"round": {1, func(a []float64) float64 { return math.Round(a[0]) }},
	"trunc": {1, func(a []float64) float64 { return math.Trunc(a[0]) }},
	"pow":   {2, func(a []float64) float64 { return math.Pow(a[0], a[1]) }},
	"hypot": {2, func(a []float64) float64 { return math.Hypot(a[0], a[1]) }},
	"min": {-1, func(a []float64) float64 {
		m := a[0]
		for _, v := range a[1:] {
			m = math.Min(m, v)
		}
		return m
	}},
	"max": {-1, func(a []float64) float64 {
		m := a[0]
		for _, v := range a[1:] {
			m = math.Max(m, v)
		}
		return m
	}},
}

var constants = map[string]float64{"pi": math.Pi, "e": math.E}

func functionList() string {
	names := make([]string, 0, len(functions))
	for n := range functions {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Eval computes an arithmetic expression in float64, e.g. "(2 + 3) * 4 / 7" or
// "sqrt(2) ** 2". It uses expr's parser but its own evaluator over a whitelist of
// syntax: numbers, unary + and -, binary + - * / % ** ^, parentheses, the constants
// pi and e and the functions in the functions table. Anything else (variables,
// strings, member access, comparisons, ranges, builtins) is rejected before any
// evaluation. A result that is not finite (1/0, sqrt(-1)) is an error.
func Eval(expression string) (float64, error) {
	if len(expression) > MaxExpressionLength {
		return 0, ErrTooLong
	}
	if strings.TrimSpace(expression) == "" {
		return 0, errors.New("the expression is empty")
	}
	cfg := conf.CreateNew()
	cfg.MaxNodes = MaxNodes
	cfg.Disabled = map[string]bool{}
	for name := range cfg.Builtins {
		cfg.Disabled[name] = true // builtins would parse as BuiltinNode; we want plain calls
	}
	tree, err := parser.ParseWithConfig(expression, cfg)
	if err != nil {
		return 0, fmt.Errorf("cannot parse the expression: %s", firstLine(err.Error()))
	}
	v, err := eval(tree.Node)
	if err != nil {
		return 0, err
	}
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, errors.New("the result is not a finite number (division by zero, overflow or a value outside a function's domain)")
	}
	return v, nil
}

func eval(n ast.Node) (float64, error) {
	switch n := n.(type) {
	case *ast.IntegerNode:
		return float64(n.Value), nil
	case *ast.FloatNode:
		return n.Value, nil
	case *ast.IdentifierNode:
		if c, ok := constants[n.Value]; ok {
			return c, nil
		}
		return 0, fmt.Errorf("unknown name %q: %w", n.Value, ErrNotArithmetic)
	case *ast.UnaryNode:
		x, err := eval(n.Node)
		if err != nil {
			return 0, err
		}
		switch n.Operator {
		case "-":
			return -x, nil
		case "+":
			return x, nil
		}
		return 0, fmt.Errorf("operator %q: %w", n.Operator, ErrNotArithmetic)
	case *ast.BinaryNode:
		op, ok := binary[n.Operator]
		if !ok {
			return 0, fmt.Errorf("operator %q: %w", n.Operator, ErrNotArithmetic)
		}
		l, err := eval(n.Left)
		if err != nil {
			return 0, err
		}
		r, err := eval(n.Right)
		if err != nil {
			return 0, err
		}
		return op(l, r)
	case *ast.CallNode:
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok {
			return 0, ErrNotArithmetic
		}
		f, ok := functions[id.Value]
		if !ok {
			return 0, fmt.Errorf("unknown function %q (known: %s)", id.Value, functionList())
		}
		if f.arity >= 0 && len(n.Arguments) != f.arity || f.arity < 0 && len(n.Arguments) == 0 {
			want := fmt.Sprint(f.arity)
			if f.arity < 0 {
				want = "at least 1"
			}
			return 0, fmt.Errorf("%s takes %s argument(s), got %d", id.Value, want, len(n.Arguments))
		}
		args := make([]float64, len(n.Arguments))
		for i, a := range n.Arguments {
			v, err := eval(a)
			if err != nil {
				return 0, err
			}
			args[i] = v
		}
		return f.fn(args), nil
	}
	return 0, ErrNotArithmetic
}

var binary = map[string]func(l, r float64) (float64, error){
	"+": func(l, r float64) (float64, error) { return l + r, nil },
	"-": func(l, r float64) (float64, error) { return l - r, nil },
	"*": func(l, r float64) (float64, error) { return l * r, nil },
	"/": func(l, r float64) (float64, error) {
		if r == 0 {
			return 0, errors.New("division by zero")
		}
		return l / r, nil
	},
	"%": func(l, r float64) (float64, error) {
		if r == 0 {
			return 0, errors.New("modulo by zero")
		}
		return math.Mod(l, r), nil
	},
	"**": func(l, r float64) (float64, error) { return math.Pow(l, r), nil },
	"^":  func(l, r float64) (float64, error) { return math.Pow(l, r), nil },
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
