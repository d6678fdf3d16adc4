// Package tool turns grpc-go services into toolfleet toolkit workers.
//
// A toolkit is a proto service annotated with the options in
// proto/toolfleet/v1/options.proto; each unary method is a tool. A [Worker] serves the
// generated service registrations with everything the fleet expects of a worker:
// gRPC server reflection (the gateway loads contracts through it), grpc.health.v1,
// protovalidate checks of every request before the handler runs, panic recovery,
// the contract's timeout and result-size limit, call metadata (call id, W3C trace
// context, OpenTelemetry parent span), a metrics hook, slog logging, graceful stop
// and, when a NATS URL is configured, heartbeats on toolfleet.registry.announce.
//
// A worker binary's main is one call:
//
//	func main() {
//		tool.Main("calculator", func(w *tool.Worker) error {
//			calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
//			return nil
//		})
//	}
//
// Tools report execution errors (the tool ran and failed) as values built with
// [NewError]; callers read them back with [AsToolError]. Input that breaks the
// contract is rejected with codes.InvalidArgument and a toolfleetv1.ValidationError
// detail before the tool runs; [DecodeInput] performs the same checks on JSON input
// for callers such as the gateway.
package tool
