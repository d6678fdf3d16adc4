// Package contract turns toolkit contracts (proto services annotated with the
// toolfleet.v1 options) into tool definitions.
//
// Descriptors come from the binary (protoregistry) or from any gRPC server through
// server reflection ([FetchFiles]); [Definitions] derives one
// toolfleetv1.ToolDefinition per unary method, with model-facing names, hints with
// the MCP defaults, policy and JSON Schemas (package sdk/schema). Version helpers
// ([ParseVersion], [ParseToolRef], [Resolve]) implement the resolution rules of
// tool ids: "@x.y.z" exact, "@x" = x.0.0, none = the latest served.
package contract
