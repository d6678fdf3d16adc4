package calculator_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// startCalculator serves the calculator as a worker on loopback, as its binary does.
func startCalculator(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn := tooltest.Serve(t, tool.Config{Name: "calculator"}, func(w *tool.Worker) {
		calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
	})
	return conn
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCalculatorOverGRPC(t *testing.T) {
	t.Parallel()
	c := calculatorv1.NewCalculatorServiceClient(startCalculator(t))
	tests := []struct {
		name string
		call func() (float64, error)
		want float64
	}{
		{"add", func() (float64, error) {
			r, err := c.Add(ctx(t), &calculatorv1.AddRequest{A: 2, B: 3})
			return r.GetResult(), err
		}, 5},
		{"subtract", func() (float64, error) {
			r, err := c.Subtract(ctx(t), &calculatorv1.SubtractRequest{A: 2, B: 3})
			return r.GetResult(), err
		}, -1},
		{"multiply", func() (float64, error) {
			r, err := c.Multiply(ctx(t), &calculatorv1.MultiplyRequest{A: 2.5, B: 4})
			return r.GetResult(), err
		}, 10},
		{"divide", func() (float64, error) {
			r, err := c.Divide(ctx(t), &calculatorv1.DivideRequest{A: 1, B: 4})
			return r.GetResult(), err
		}, 0.25},
		{"evaluate", func() (float64, error) {
			r, err := c.Evaluate(ctx(t), &calculatorv1.EvaluateRequest{Expression: "(2 + 3) * 4"})
			return r.GetResult(), err
		}, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.call()
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestCalculatorFailures(t *testing.T) {
	t.Parallel()
	c := calculatorv1.NewCalculatorServiceClient(startCalculator(t))

	_, err := c.Divide(ctx(t), &calculatorv1.DivideRequest{A: 1, B: 0})
	te, ok := tool.AsToolError(err)
	if !ok || te.GetMessage() != "cannot divide by zero" || te.GetAdditionalPromptContent() == "" || te.GetCanRetry() {
		t.Fatalf("divide by zero = %v (tool error %v)", err, te)
	}
	_, err = c.Multiply(ctx(t), &calculatorv1.MultiplyRequest{A: 1e308, B: 10})
	if te, ok := tool.AsToolError(err); !ok || te.GetMessage() != "the result is not a finite number (+Inf)" {
		t.Fatalf("overflow = %v", err)
	}
	_, err = c.Evaluate(ctx(t), &calculatorv1.EvaluateRequest{Expression: "x * 2"})
	if te, ok := tool.AsToolError(err); !ok || te.GetAdditionalPromptContent() == "" {
		t.Fatalf("evaluate with a variable = %v", err)
	}
	// The contract's rule (min_len 1) stops an empty expression before the tool.
	_, err = c.Evaluate(ctx(t), &calculatorv1.EvaluateRequest{})
	ve, ok := tool.AsValidationError(err)
	if status.Code(err) != codes.InvalidArgument || !ok ||
		ve.GetParameterErrors()["expression"] != "must be at least 1 character" || len(ve.GetParameterErrors()) != 1 {
		t.Fatalf("empty expression = %v (%v)", err, ve)
	}
}

// TestCalculatorByReflection is what the gateway does: load the contract by
// reflection, derive the tools, call one.
func TestCalculatorByReflection(t *testing.T) {
	t.Parallel()
	conn := startCalculator(t)
	contracts, err := contract.Fetch(ctx(t), conn)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	defs, err := contracts.Definitions()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := contract.ParseToolRef("Calculator_Add")
	if err != nil {
		t.Fatal(err)
	}
	add, err := contract.Resolve(ref, defs)
	if err != nil {
		t.Fatal(err)
	}
	if add.GetId() != "Calculator.Add@1.0.0" || len(defs) != 5 {
		t.Fatalf("resolved %s among %d tools", add.GetId(), len(defs))
	}
	md, ok := contracts.Method(add.GetGrpcMethod())
	if !ok {
		t.Fatalf("no method %s", add.GetGrpcMethod())
	}
	in, ve, err := tool.DecodeInput(md.Input(), []byte(`{"a": 2, "b": 40}`))
	if err != nil || ve != nil {
		t.Fatalf("DecodeInput: %v %v", err, ve)
	}
	var out calculatorv1.AddResponse
	if err := conn.Invoke(ctx(t), add.GetGrpcMethod(), in, &out); err != nil {
		t.Fatalf("invoke: %v", err)
	}
	if out.GetResult() != 42 {
		t.Fatalf("result = %v", out.GetResult())
	}
}
