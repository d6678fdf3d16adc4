// Package codename names gRPC codes the way the gateway's surfaces write them
// ("NOT_FOUND", "ALREADY_EXISTS"): CallFailure.code of CallTools and OXP, and
// data.code and toolfleet/code of MCP. It is the one table of them; the
// gateway and its MCP server both read it.
package codename

import "google.golang.org/grpc/codes"

// Of is the canonical upper-case name of c, or "" for a code gRPC does not
// define.
func Of(c codes.Code) string { return names[c] }

var names = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}
