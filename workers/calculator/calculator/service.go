// Package calculator implements the Calculator toolkit
// (proto/tools/calculator/v1): the four operations and Evaluate, an evaluator of
// arithmetic expressions.
package calculator

import (
	"context"
	"math"
	"strconv"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// Service implements calculatorv1.CalculatorServiceServer.
type Service struct {
	calculatorv1.UnimplementedCalculatorServiceServer
}

// New returns the Calculator service.
func New() *Service { return &Service{} }

// Add returns a + b.
func (*Service) Add(_ context.Context, req *calculatorv1.AddRequest) (*calculatorv1.AddResponse, error) {
	r, err := finite(req.GetA() + req.GetB())
	return &calculatorv1.AddResponse{Result: r}, err
}

// Subtract returns a - b.
func (*Service) Subtract(_ context.Context, req *calculatorv1.SubtractRequest) (*calculatorv1.SubtractResponse, error) {
	r, err := finite(req.GetA() - req.GetB())
	return &calculatorv1.SubtractResponse{Result: r}, err
}

// Multiply returns a * b.
func (*Service) Multiply(_ context.Context, req *calculatorv1.MultiplyRequest) (*calculatorv1.MultiplyResponse, error) {
	r, err := finite(req.GetA() * req.GetB())
	return &calculatorv1.MultiplyResponse{Result: r}, err
}

// Divide returns a / b; a zero divisor is an execution error.
func (*Service) Divide(_ context.Context, req *calculatorv1.DivideRequest) (*calculatorv1.DivideResponse, error) {
	if req.GetB() == 0 {
		return nil, tool.NewError("cannot divide by zero",
			tool.WithPromptHint("The divisor b was 0. Division by zero is undefined; ask for a non-zero divisor instead of retrying."))
	}
	r, err := finite(req.GetA() / req.GetB())
	return &calculatorv1.DivideResponse{Result: r}, err
}

// Evaluate computes an arithmetic expression (see [Eval] for the language).
func (*Service) Evaluate(ctx context.Context, req *calculatorv1.EvaluateRequest) (*calculatorv1.EvaluateResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, err := Eval(req.GetExpression())
	if err != nil {
		return nil, tool.NewError(err.Error(),
			tool.WithPromptHint("Use numbers, + - * / % ** ^, parentheses, the constants pi and e, and the functions "+functionList()+"."))
	}
	return &calculatorv1.EvaluateResponse{Result: v}, nil
}

// finite turns an overflow or undefined result into an execution error: JSON has
// no Infinity or NaN.
func finite(v float64) (float64, error) {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, tool.NewError("the result is not a finite number (" + strconv.FormatFloat(v, 'g', -1, 64) + ")")
	}
	return v, nil
}
