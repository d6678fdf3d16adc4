package calculator_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

func TestEval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want float64
	}{
		{"1 + 2", 3},
		{"(2 + 3) * 4 / 8", 2.5},
		{"7 / 2", 3.5}, // floats, not integer division
		{"7 % 4", 3},
		{"7.5 % 2", 1.5},
		{"2 ** 10", 1024},
		{"2 ^ 3", 8},
		{"-3 + +2", -1},
		{"-(1 - 4)", 3},
		{"sqrt(16) + abs(-2)", 6},
		{"max(1, 5, 3) - min(4, 2)", 3},
		{"floor(2.7) + ceil(2.1) + round(2.5) + trunc(-2.7)", 6},
		{"atan2(1, 1) * 4", math.Pi},
		{"pi", math.Pi},
		{"ln(e)", 1},
		{"log10(1000) + log2(8)", 6},
		{"9223372036854775807 + 1", 9223372036854775808}, // no integer overflow
		{"1e3 / 4", 250},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			t.Parallel()
			got, err := calculator.Eval(tt.expr)
			if err != nil {
				t.Fatalf("Eval: %v", err)
			}
			if math.Abs(got-tt.want) > 1e-9*math.Max(1, math.Abs(tt.want)) {
				t.Fatalf("Eval = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEvalRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr    string
		want    string // substring of the error
		wantErr error
	}{
		{expr: "x + 1", wantErr: calculator.ErrNotArithmetic},
		{expr: `"a" + "b"`, wantErr: calculator.ErrNotArithmetic},
		{expr: "a.b", wantErr: calculator.ErrNotArithmetic},
		{expr: "1 == 1", wantErr: calculator.ErrNotArithmetic},
		{expr: "1 > 0 ? 1 : 2", wantErr: calculator.ErrNotArithmetic},
		{expr: "1..1000000", wantErr: calculator.ErrNotArithmetic},
		{expr: "[1, 2]", wantErr: calculator.ErrNotArithmetic},
		{expr: "{a: 1}", wantErr: calculator.ErrNotArithmetic},
		{expr: "let x = 1; x", wantErr: calculator.ErrNotArithmetic},
		{expr: "len([1])", want: `unknown function "len"`},
		{expr: "map([1], # * 2)", wantErr: calculator.ErrNotArithmetic},
		{expr: "now()", want: `unknown function "now"`},
		{expr: "sqrt(1, 2)", want: "sqrt takes 1 argument(s), got 2"},
		{expr: "max()", want: "max takes at least 1 argument(s), got 0"},
		{expr: "1 / 0", want: "division by zero"},
		{expr: "5 % 0", want: "modulo by zero"},
		{expr: "sqrt(-1)", want: "not a finite number"},
		{expr: "10 ** 400", want: "not a finite number"},
		{expr: "1 +", want: "cannot parse"},
		{expr: "  ", want: "empty"},
		{expr: strings.Repeat("1+", 600) + "1", wantErr: calculator.ErrTooLong},
		{expr: strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300), want: ""}, // fine: few nodes
		{expr: strings.Repeat("1+", 499) + "1", want: "cannot parse"},               // too many nodes
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			t.Parallel()
			_, err := calculator.Eval(tt.expr)
			if tt.want == "" && tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Eval: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Eval accepted it")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}
