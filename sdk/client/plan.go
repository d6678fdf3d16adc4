package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/retry"
)

// Bounds of the contract cache: a client calls few distinct tools, and a
// contract rarely changes while a process runs.
const (
	contractTTL   = time.Minute
	maxContracts  = 1024
	contractFetch = 5 * time.Second
)

// contracts caches tool definitions by the tool id a caller used, so that each
// call knows its tool's retry policy and hints without asking the gateway again.
type contracts struct {
	mu   sync.Mutex
	defs map[string]cachedContract
}

type cachedContract struct {
	def   *toolfleetv1.ToolDefinition
	until time.Time
}

// contract returns the definition of toolID, or nil when the gateway does not
// know it (the call itself then reports why).
func (c *Client) contract(ctx context.Context, toolID string) *toolfleetv1.ToolDefinition {
	c.contracts.mu.Lock()
	cached, ok := c.contracts.defs[toolID]
	c.contracts.mu.Unlock()
	if ok && time.Now().Before(cached.until) {
		return cached.def
	}
	ctx, cancel := context.WithTimeout(ctx, contractFetch)
	defer cancel()
	def, err := c.GetTool(ctx, toolID)
	if err != nil {
		return nil
	}
	c.contracts.mu.Lock()
	defer c.contracts.mu.Unlock()
	if c.contracts.defs == nil || len(c.contracts.defs) >= maxContracts {
		c.contracts.defs = make(map[string]cachedContract)
	}
	c.contracts.defs[toolID] = cachedContract{def: def, until: time.Now().Add(contractTTL)}
	return def
}

// plan is how one call is made: its retry policy and whether it needs a call_id.
type plan struct {
	policy retry.Policy
	// harmless: the tool is read-only or idempotent, so running it twice changes
	// nothing and a retry needs no call_id.
	harmless bool
}

// mayRetry reports whether the plan allows a second attempt.
func (p plan) mayRetry() bool { return p.policy.MaxAttempts > 1 }

// planFor derives the plan of a call of toolID from its contract and the
// client's options. An unknown contract counts as neither read-only nor
// idempotent, with the client's policy.
func (c *Client) planFor(ctx context.Context, toolID string) plan {
	if c.opts.retry.MaxAttempts == 1 {
		return plan{policy: retry.Policy{MaxAttempts: 1}.WithDefaults()}
	}
	def := c.contract(ctx, toolID)
	hints := def.GetHints()
	return plan{
		policy:   retry.FromProto(def.GetRequirements().GetRetry()).Or(c.opts.retry).WithDefaults(),
		harmless: hints.GetReadOnly() || hints.GetIdempotent(),
	}
}

// prepare returns req with a generated call_id when, and only when, the call
// buys something with it: the client may retry it and the tool is neither
// read-only nor idempotent, so a retry of a call whose answer was lost must not
// run it twice. The gateway stores results only under caller-given ids, so an
// id sent without a reason would only cost a store round trip. With handles
// (WithResultHandles) the request allows a result handle.
func prepare(req *toolfleetv1.CallToolRequest, p plan, handles bool) *toolfleetv1.CallToolRequest {
	newID := req.GetCallId() == "" && p.mayRetry() && !p.harmless
	allow := req.GetAllowResultHandle() || handles
	if !newID && allow == req.GetAllowResultHandle() {
		return req
	}
	callID := req.GetCallId()
	if newID {
		callID = NewCallID()
	}
	return &toolfleetv1.CallToolRequest{CallId: callID, ToolId: req.GetToolId(), Input: req.GetInput(),
		TraceId: req.GetTraceId(), Context: req.GetContext(), Approval: req.GetApproval(), AllowResultHandle: allow}
}

// retryableServerError reports a failure before the tool ran that another
// attempt may fix (the gateway, a worker or the idempotency store was
// unavailable) and that may be retried safely: the call either carries a
// call_id (the gateway answers a repeat from its store) or is harmless.
func retryableServerError(err error, req *toolfleetv1.CallToolRequest, p plan) bool {
	var se *ServerError
	if !errors.As(err, &se) || se.cause != nil {
		return false
	}
	if rateLimited(se) {
		return true // refused before it ran: a retry after the delay is always safe
	}
	return se.Code == codes.Unavailable && (req.GetCallId() != "" || p.harmless)
}

// rateLimited reports a refusal over a rate limit or quota that says when to
// try again.
func rateLimited(se *ServerError) bool {
	return se.Code == codes.ResourceExhausted && se.RetryAfter > 0
}
