package tool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Asking the caller for input (MCP's multi-round-trip requests, SEP-2322).
//
// A handler that needs something only its caller has — a human's answer
// (elicitation), a completion from the caller's model (sampling), the caller's
// roots — returns [AskInput] as its error. The call ends there: the caller
// sees "input required" with the questions, answers them, and repeats the
// call with the same input and the answers; the handler then runs again from
// the start and reads the answers with [InputResponse]. State the handler
// wants to carry to the next round goes in [InputRequiredError.WithState] and
// comes back with [RequestState]; the gateway seals it (AES-GCM), so the
// caller can neither read nor change it.
//
// The kinds a tool asks for are part of its contract (ToolOptions.client_input
// and client_input_optional); asking for another kind is an execution error.
//
// Wire form (for workers in other languages): the worker answers the call
// with a gRPC status of code FAILED_PRECONDITION carrying a
// toolfleet.v1.WorkerInputRequired detail; the repeated call carries a
// toolfleet.v1.InputAnswers in the binary metadata header [InputAnswersKey].

// InputAnswersKey is the binary metadata header carrying a serialized
// toolfleetv1.InputAnswers on a call of a tool that declares client input.
const InputAnswersKey = "toolfleet-input-bin"

// Bounds of the input protocol.
const (
	// MaxInputAnswersBytes bounds the serialized InputAnswers of one call.
	MaxInputAnswersBytes = 1 << 20
	// MaxInputStateBytes bounds the state a worker carries between rounds.
	MaxInputStateBytes = 64 << 10
	// MaxInputRequests bounds the questions of one round.
	MaxInputRequests = 16
	maxInputKey      = 128
)

// MCP methods of the three kinds of input.
const (
	MethodElicit    = "elicitation/create"
	MethodSample    = "sampling/createMessage"
	MethodListRoots = "roots/list"
)

// InputKindOf returns the kind of input an MCP method asks for
// (CLIENT_CAPABILITY_UNSPECIFIED for an unknown method).
func InputKindOf(method string) toolfleetv1.ClientCapability {
	switch method {
	case MethodElicit:
		return toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ELICITATION
	case MethodSample:
		return toolfleetv1.ClientCapability_CLIENT_CAPABILITY_SAMPLING
	case MethodListRoots:
		return toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ROOTS
	}
	return toolfleetv1.ClientCapability_CLIENT_CAPABILITY_UNSPECIFIED
}

// CapabilityName is the MCP client capability that answers a kind of input
// ("elicitation", "sampling", "roots"), "" for none.
func CapabilityName(c toolfleetv1.ClientCapability) string {
	if c == toolfleetv1.ClientCapability_CLIENT_CAPABILITY_UNSPECIFIED {
		return ""
	}
	if _, known := toolfleetv1.ClientCapability_name[int32(c)]; !known {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(c.String(), "CLIENT_CAPABILITY_"))
}

// InputRequest is one question to the caller, built with [Elicit], [Sample]
// or [ListRoots].
type InputRequest struct {
	key    string
	method string
	params map[string]any
}

// Elicit asks the caller's human: message is shown with a form described by
// schema (a flat JSON Schema object, MCP's requestedSchema). The answer is an
// MCP ElicitResult: {"action": "accept"|"decline"|"cancel", "content": {...}}.
func Elicit(key, message string, schema map[string]any) InputRequest {
	return InputRequest{key: key, method: MethodElicit, params: map[string]any{"message": message, "requestedSchema": schema}}
}

// Sample asks the caller's model for a completion; params are MCP's
// CreateMessageRequest params (messages, maxTokens, …). The answer is an MCP
// CreateMessageResult: {"role": "assistant", "content": {...}, "model": …}.
func Sample(key string, params map[string]any) InputRequest {
	return InputRequest{key: key, method: MethodSample, params: params}
}

// ListRoots asks for the caller's roots. The answer is an MCP ListRootsResult:
// {"roots": [{"uri": "file:///…", "name": …}]}.
func ListRoots(key string) InputRequest {
	return InputRequest{key: key, method: MethodListRoots, params: map[string]any{}}
}

// InputRequiredError is a handler's answer that it needs input from its
// caller; see [AskInput].
type InputRequiredError struct {
	detail *toolfleetv1.WorkerInputRequired
	err    error // a malformed request: sent as Internal, a worker bug
}

// AskInput returns the error a handler returns to ask its caller for input.
// Keys name the answers in the next round: non-empty, unique, at most 128
// bytes; at most [MaxInputRequests] requests.
//
//	func (s *server) Greet(ctx context.Context, _ *pb.GreetRequest) (*pb.GreetResponse, error) {
//		name, ok := tool.InputResponse(ctx, "name")
//		if !ok {
//			return nil, tool.AskInput(tool.Elicit("name", "What is your name?", map[string]any{
//				"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}},
//			}))
//		}
//		content, _ := name["content"].(map[string]any)
//		return &pb.GreetResponse{Text: fmt.Sprintf("Hello, %v!", content["name"])}, nil
//	}
func AskInput(reqs ...InputRequest) *InputRequiredError {
	e := &InputRequiredError{detail: &toolfleetv1.WorkerInputRequired{Requests: map[string]*toolfleetv1.InputRequest{}}}
	if len(reqs) == 0 || len(reqs) > MaxInputRequests {
		e.err = fmt.Errorf("tool.AskInput: %d requests; give 1 to %d", len(reqs), MaxInputRequests)
		return e
	}
	for _, r := range reqs {
		if r.key == "" || len(r.key) > maxInputKey {
			e.err = fmt.Errorf("tool.AskInput: key %q: 1 to %d bytes", r.key, maxInputKey)
			return e
		}
		if _, dup := e.detail.Requests[r.key]; dup {
			e.err = fmt.Errorf("tool.AskInput: key %q given twice", r.key)
			return e
		}
		params, err := structpb.NewStruct(r.params)
		if err != nil {
			e.err = fmt.Errorf("tool.AskInput: params of %q: %w", r.key, err)
			return e
		}
		e.detail.Requests[r.key] = &toolfleetv1.InputRequest{Method: r.method, Params: params}
	}
	return e
}

// WithState attaches state the handler reads back with [RequestState] in the
// next round (at most [MaxInputStateBytes]). The gateway seals it: the caller
// cannot read or change it, and it comes back only for the same caller, tool
// version and input, before it expires.
func (e *InputRequiredError) WithState(state []byte) *InputRequiredError {
	if len(state) > MaxInputStateBytes && e.err == nil {
		e.err = fmt.Errorf("tool.AskInput: state of %d bytes, over %d", len(state), MaxInputStateBytes)
	}
	e.detail.State = slices.Clone(state)
	return e
}

// Error describes the questions (for logs).
func (e *InputRequiredError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	keys := make([]string, 0, len(e.detail.GetRequests()))
	for k, r := range e.detail.GetRequests() {
		keys = append(keys, k+" ("+r.GetMethod()+")")
	}
	slices.Sort(keys)
	return "input required from the caller: " + strings.Join(keys, ", ")
}

// Detail returns the wire form. The caller must not modify it.
func (e *InputRequiredError) Detail() *toolfleetv1.WorkerInputRequired { return e.detail }

// GRPCStatus makes grpc-go send the question as FAILED_PRECONDITION with a
// WorkerInputRequired detail (a malformed one as Internal: a worker bug).
func (e *InputRequiredError) GRPCStatus() *status.Status {
	if e.err != nil {
		return status.New(codes.Internal, e.err.Error())
	}
	st := status.New(codes.FailedPrecondition, e.Error())
	if withDetail, err := st.WithDetails(e.detail); err == nil {
		return withDetail
	}
	return st
}

// AsInputRequired extracts a worker's question from err: an
// [*InputRequiredError] (worker side) or a FAILED_PRECONDITION status with a
// WorkerInputRequired detail (caller side).
func AsInputRequired(err error) (*toolfleetv1.WorkerInputRequired, bool) {
	if err == nil {
		return nil, false
	}
	var ie *InputRequiredError
	if errors.As(err, &ie) {
		return ie.detail, ie.err == nil
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil, false
	}
	for _, d := range st.Details() {
		if v, ok := d.(*toolfleetv1.WorkerInputRequired); ok {
			return v, true
		}
	}
	return nil, false
}

type answersKey struct{}

// answers returns the InputAnswers of the call (nil when none): the one the
// worker's interceptor read, else (a handler on a plain grpc.Server) the
// incoming header itself, ignored when malformed or over the bound.
func answers(ctx context.Context) *toolfleetv1.InputAnswers {
	if a, ok := ctx.Value(answersKey{}).(*toolfleetv1.InputAnswers); ok {
		return a
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vs := md.Get(InputAnswersKey)
	if len(vs) != 1 || len(vs[0]) > MaxInputAnswersBytes {
		return nil
	}
	a := &toolfleetv1.InputAnswers{}
	if proto.Unmarshal([]byte(vs[0]), a) != nil {
		return nil
	}
	return a
}

// InputResponse returns the caller's answer to the request key of the round
// before, as JSON (an MCP ElicitResult, CreateMessageResult or
// ListRootsResult), and whether there is one. The caller may send answers it
// was not asked for; a handler reads only the keys it asked.
func InputResponse(ctx context.Context, key string) (map[string]any, bool) {
	s, ok := answers(ctx).GetResponses()[key]
	if !ok {
		return nil, false
	}
	return s.AsMap(), true
}

// InputResponses returns all of the caller's answers (nil on a first round).
// The caller must not modify them.
func InputResponses(ctx context.Context) map[string]*structpb.Struct {
	return answers(ctx).GetResponses()
}

// RequestState returns the state the handler gave [InputRequiredError.WithState]
// in the round before, and whether the call carries one. A call without
// state is a first round, or a caller that answered without echoing
// request_state: a handler that depends on its state asks again.
func RequestState(ctx context.Context) ([]byte, bool) {
	a := answers(ctx)
	return a.GetState(), a.GetHasState()
}

// CallerCan reports whether the caller can answer input of kind (it declared
// the matching MCP client capability). Check it before asking for a kind the
// contract lists in client_input_optional.
func CallerCan(ctx context.Context, kind toolfleetv1.ClientCapability) bool {
	return slices.Contains(answers(ctx).GetClientInput(), kind)
}

// WithInputAnswers returns ctx as a handler sees it on a call carrying a (for
// tests of handlers, see package tooltest).
func WithInputAnswers(ctx context.Context, a *toolfleetv1.InputAnswers) context.Context {
	return context.WithValue(ctx, answersKey{}, a)
}

// OutgoingInputAnswers returns ctx with a set on the outgoing metadata of a
// call to a worker. It refuses answers over [MaxInputAnswersBytes] with
// InvalidArgument.
func OutgoingInputAnswers(ctx context.Context, a *toolfleetv1.InputAnswers) (context.Context, error) {
	b, err := proto.Marshal(a)
	if err != nil {
		return ctx, status.Errorf(codes.InvalidArgument, "the input answers cannot be encoded: %v", err)
	}
	if len(b) > MaxInputAnswersBytes {
		return ctx, status.Errorf(codes.InvalidArgument, "the input answers are %d bytes, over the limit of %d; answer with less", len(b), MaxInputAnswersBytes)
	}
	return metadata.AppendToOutgoingContext(ctx, InputAnswersKey, string(b)), nil
}

// inputInterceptor reads the InputAnswers of a call into its context; a
// malformed or oversized header is InvalidArgument.
func inputInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		vs := md.Get(InputAnswersKey)
		if len(vs) == 0 {
			return handler(ctx, req)
		}
		if len(vs) > 1 || len(vs[0]) > MaxInputAnswersBytes {
			return nil, status.Errorf(codes.InvalidArgument, "%s: one value of at most %d bytes", InputAnswersKey, MaxInputAnswersBytes)
		}
		a := &toolfleetv1.InputAnswers{}
		if err := proto.Unmarshal([]byte(vs[0]), a); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s: not a toolfleet.v1.InputAnswers: %v", InputAnswersKey, err)
		}
		return handler(WithInputAnswers(ctx, a), req)
	}
}
