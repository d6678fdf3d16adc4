// Package contract turns toolkit contracts (proto services annotated with the
// toolfleet.v1 options) into tool definitions.
//
// Descriptors come from the binary ([LinkedContracts]) or from any gRPC server
// through server reflection ([Fetch]); [Definitions] derives one
// toolfleetv1.ToolDefinition per unary method, with model-facing names, hints with
// the MCP defaults, policy and JSON Schemas (package sdk/schema). Version helpers
// ([ParseVersion], [ParseToolRef], [Resolve]) implement the resolution rules of
// tool ids: "@x.y.z" exact, "@x" = x.0.0, none = the latest served.
//
// A gateway's path from a worker address to a validated call:
//
//	contracts, err := contract.Fetch(ctx, conn)      // reflection
//	defs, err := contracts.Definitions()             // tools, schemas, policy
//	def, err := contract.Resolve(ref, defs)          // ref from contract.ParseToolRef
//	md, _ := contracts.Method(def.GetGrpcMethod())
//	in, verr, err := tool.DecodeInput(md.Input(), input)
//	out := dynamicpb.NewMessage(md.Output())
//	err = conn.Invoke(tool.OutgoingCallContext(ctx, callID, traceparent), def.GetGrpcMethod(), in, out)
package contract
