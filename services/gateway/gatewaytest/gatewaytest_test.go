package gatewaytest_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

func TestToolkit(t *testing.T) {
	t.Parallel()
	gw := gatewaytest.Toolkit(t, tool.Config{Name: "calculator"}, func(w *tool.Worker) {
		calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
	})
	res, err := gw.Call(t.Context(), "Calculator.Add", `{"a": 2, "b": 3}`)
	if err != nil || !res.GetSuccess() || res.GetValue().GetStructValue().AsMap()["result"] != 5.0 {
		t.Fatalf("Calculator.Add 2+3: %v %v", res, err)
	}
	// The contract's rules run in the gateway before the worker sees the input.
	_, err = gw.Call(t.Context(), "Calculator.Evaluate", `{"expression": ""}`)
	if pe := gatewaytest.ParameterErrors(err); pe["expression"] == "" {
		t.Errorf("an empty expression: %v, parameter errors %v, want one on expression", err, pe)
	}
	// The tool's own failure is a result, not an error.
	res, err = gw.Call(t.Context(), "Calculator.Divide", `{"a": 1, "b": 0}`)
	if err != nil || res.GetSuccess() || res.GetError().GetMessage() == "" {
		t.Errorf("Calculator.Divide by 0: %v %v, want an execution error", res, err)
	}
	if _, err := gw.Call(t.Context(), "Calculator.Nope", `{}`); status.Code(err) != codes.NotFound || gatewaytest.ParameterErrors(err) != nil {
		t.Errorf("an unknown tool: %v, want NotFound and no parameter errors", err)
	}
	if _, err := gw.Call(t.Context(), "Calculator.Add", `[1, 2]`); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("a JSON array as input: %v", err)
	}
}
