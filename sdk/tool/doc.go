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
//
// # Exactly once
//
// A worker with a NATS connection keeps the call journal (package
// sdk/tool/journal; docs/gateway.md, "Exactly once") by itself and announces
// it (WorkerAnnouncement.call_journal). For a call the gateway sends with a
// claim, it records the start before the tool runs (and refuses the call
// without running it when a retry took it over, or when NATS does not
// answer), heartbeats while the tool runs, and records the answer, whatever
// it is, when it returns; and the tool's context is not cancelled when the
// caller goes away (only at its deadline), so a gateway that dies mid-call
// does not cut a side effect in half, and a retry gets the recorded answer
// instead of running the tool again. A retry whose earlier attempt may have
// run (its worker went away mid-call) is refused as "may have run" — unless
// the tool declares (toolfleet.v1.tool).deduplicates_call_id = true: it
// promises to do its work at most once per [CallID] itself (e.g. a unique
// key in its own store), and such a retry is sent to it again.
package tool
