package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway/clientinput"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
)

// Tools asking their caller for input (MCP's multi-round-trip requests,
// docs/gateway.md "Tools that ask for input").
//
// A worker answers a call with a question (sdk/tool.AskInput); the gateway
// checks the kinds against the contract (ToolRequirements.client_input and
// client_input_optional) and the caller's CallToolRequest.client_input, seals
// the worker's state with the binding of the call (tool id@version, the
// effective principal, the input's digest) and an expiry, and answers with
// CallToolResponse.input_required. The caller repeats the call with the
// answers and the sealed state; the gateway opens it (a changed, expired or
// foreign state is refused before the worker is called) and passes answers
// and state to the worker in the InputAnswers header. Such an answer is not
// a finished call: nothing is stored for call_id repeats.

func capabilityNames(cs []toolfleetv1.ClientCapability) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = tool.CapabilityName(c)
	}
	return strings.Join(names, ", ")
}

// asksClientInput reports whether def may ask its caller for input.
func asksClientInput(def *toolfleetv1.ToolDefinition) bool {
	r := def.GetRequirements()
	return len(r.GetClientInput()) > 0 || len(r.GetClientInputOptional()) > 0
}

// missingClientInput returns the kinds def needs that the caller of req
// cannot answer.
func missingClientInput(def *toolfleetv1.ToolDefinition, req *toolfleetv1.CallToolRequest) []toolfleetv1.ClientCapability {
	var missing []toolfleetv1.ClientCapability
	for _, c := range def.GetRequirements().GetClientInput() {
		if !slices.Contains(req.GetClientInput(), c) && !slices.Contains(missing, c) {
			missing = append(missing, c)
		}
	}
	return missing
}

// clientInputAnswers is what the worker of def gets on a call: the caller's kinds,
// and on a repeated call its answers and the worker's state, opened from
// req.request_state (refused when it is not valid for this call).
func (g *Gateway) clientInputAnswers(p *Principal, def *toolfleetv1.ToolDefinition, req *toolfleetv1.CallToolRequest) (*toolfleetv1.InputAnswers, *CallError) {
	a := &toolfleetv1.InputAnswers{ClientInput: req.GetClientInput(), Responses: req.GetInputResponses()}
	if req.GetRequestState() == "" {
		return a, nil
	}
	sl := g.sealer.Load()
	if sl == nil {
		return nil, serverError(codes.Unavailable, ErrClientInput, "the input state key is not loaded yet (NATS KV "+clientinput.DefaultBucket+")",
			"the gateway cannot check request_state yet; try again shortly")
	}
	b, ce := g.binding(p, def, req)
	if ce != nil {
		return nil, ce
	}
	state, err := sl.Open(b, req.GetRequestState())
	if err != nil {
		msg := "request_state is not valid for this call: it was changed, or is for another tool, caller or input"
		if !errors.Is(err, clientinput.ErrInvalid) || strings.Contains(err.Error(), "expired") {
			msg = "request_state has expired"
		}
		return nil, serverError(codes.InvalidArgument, ErrClientInput, "",
			"%s was not run: %s; call it again without input_responses and request_state", def.GetId(), msg)
	}
	a.State, a.HasState = state, true
	return a, nil
}

// binding is what a request_state of a call to def by p is sealed for.
func (g *Gateway) binding(p *Principal, def *toolfleetv1.ToolDefinition, req *toolfleetv1.CallToolRequest) (clientinput.Binding, *CallError) {
	digest, err := idempotency.DigestOf(req.GetInput())
	if err != nil {
		return clientinput.Binding{}, serverError(codes.Internal, err, err.Error(), "the gateway could not read the input of %s", def.GetId())
	}
	return clientinput.Binding{Tool: def.GetId(), Principal: p.ID(), Input: digest}, nil
}

// withClientInputAnswers puts a on the outgoing call (InvalidArgument when over
// tool.MaxInputAnswersBytes).
func withClientInputAnswers(ctx context.Context, def *toolfleetv1.ToolDefinition, a *toolfleetv1.InputAnswers) (context.Context, *CallError) {
	out, err := tool.OutgoingInputAnswers(ctx, a)
	if err != nil {
		return ctx, serverError(codes.InvalidArgument, ErrClientInput, "",
			"%s was not run: the input answers are over the limit of %d bytes (protobuf); answer with less", def.GetId(), tool.MaxInputAnswersBytes)
	}
	return out, nil
}

// askClient turns a worker's question into resp.input_required, or into
// an execution error when the question breaks the contract (a worker bug) or
// asks the caller for a kind it cannot answer.
func (g *Gateway) askClient(p *Principal, def *toolfleetv1.ToolDefinition, req *toolfleetv1.CallToolRequest, q *toolfleetv1.WorkerInputRequired, resp *toolfleetv1.CallToolResponse) *CallError {
	r := def.GetRequirements()
	if len(q.GetRequests()) == 0 || len(q.GetRequests()) > tool.MaxInputRequests || len(q.GetState()) > tool.MaxInputStateBytes {
		setToolError(resp, &toolfleetv1.ToolError{Message: fmt.Sprintf("%s asked its caller for input in a malformed way (a bug of the tool)", def.GetId()),
			DeveloperMessage: fmt.Sprintf("%d requests (1 to %d), state of %d bytes (at most %d)", len(q.GetRequests()), tool.MaxInputRequests, len(q.GetState()), tool.MaxInputStateBytes)})
		return nil
	}
	keys := make([]string, 0, len(q.GetRequests()))
	for k := range q.GetRequests() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kind := tool.InputKindOf(q.GetRequests()[k].GetMethod())
		declared := slices.Contains(r.GetClientInput(), kind) || slices.Contains(r.GetClientInputOptional(), kind)
		switch {
		case kind == toolfleetv1.ClientCapability_CLIENT_CAPABILITY_UNSPECIFIED:
			setToolError(resp, &toolfleetv1.ToolError{Message: fmt.Sprintf("%s asked its caller for input with the unknown method %q (a bug of the tool)", def.GetId(), q.GetRequests()[k].GetMethod())})
			return nil
		case !declared:
			setToolError(resp, &toolfleetv1.ToolError{Message: fmt.Sprintf("%s asked its caller for input (%s) its contract does not declare (client_input); this is a bug of the tool", def.GetId(), tool.CapabilityName(kind))})
			return nil
		case !slices.Contains(req.GetClientInput(), kind):
			setToolError(resp, &toolfleetv1.ToolError{Message: fmt.Sprintf("%s asked its caller for input (%s), which this caller cannot answer: it did not declare it (an MCP client without the capability, or a run, program or MCP task that takes no questions)", def.GetId(), tool.CapabilityName(kind))})
			return nil
		}
	}
	sl := g.sealer.Load()
	if sl == nil {
		return serverError(codes.Unavailable, ErrClientInput, "the input state key is not loaded yet (NATS KV "+clientinput.DefaultBucket+")",
			"%s asked its caller for input, and the gateway cannot seal request_state yet; try again shortly", def.GetId())
	}
	b, ce := g.binding(p, def, req)
	if ce != nil {
		return ce
	}
	resp.Success = false
	resp.Outcome = nil
	ttl := g.cfg.ClientInput.TTL
	if p.Via != nil { // a run, program or MCP task asks the person: it waits as long as the run does
		ttl = g.cfg.ClientInput.DelegatedTTL
	}
	resp.InputRequired = &toolfleetv1.InputRequired{Requests: q.GetRequests(), RequestState: sl.Seal(b, q.GetState(), ttl)}
	return nil
}
