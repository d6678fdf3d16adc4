// Command calculator serves the Calculator toolkit: exact arithmetic and a safe
// evaluator of arithmetic expressions.
//
//	go run ./workers/calculator --listen 127.0.0.1:19101
//	grpcurl -plaintext 127.0.0.1:19101 list
//	grpcurl -plaintext -d '{"a": 2, "b": 3}' 127.0.0.1:19101 tools.calculator.v1.CalculatorService/Add
//
// Flags and environment are those of every worker (see sdk/tool.Main).
package main

import (
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

func main() {
	tool.Main("calculator", func(w *tool.Worker) error {
		calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
		return nil
	})
}
