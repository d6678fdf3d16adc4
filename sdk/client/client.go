package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/sdk/retry"
)

// Client calls a toolfleet gateway. It is safe for concurrent use; create one
// per gateway and Close it when done.
type Client struct {
	rpc       rpc
	opts      options
	contracts contracts
	close     func() error
}

// headers are what a call sends besides its message: the bearer token and the
// delegation metadata.
type headers struct {
	auth       string
	delegation delegation
}

// each calls set for every header to send.
func (h headers) each(set func(k, v string)) {
	if h.auth != "" {
		set("authorization", h.auth)
	}
	if h.delegation.subject != "" {
		set(HeaderOnBehalfOf, h.delegation.subject)
		set(HeaderOnBehalfScopes, h.delegation.scopes)
	}
}

// rpc is the gateway API over one protocol (gRPC or Connect).
type rpc interface {
	ListTools(ctx context.Context, auth headers, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error)
	GetTool(ctx context.Context, auth headers, req *toolfleetv1.GetToolRequest) (*toolfleetv1.GetToolResponse, error)
	SearchTools(ctx context.Context, auth headers, req *toolfleetv1.SearchToolsRequest) (*toolfleetv1.SearchToolsResponse, error)
	CallTool(ctx context.Context, auth headers, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error)
	CallTools(ctx context.Context, auth headers, req *toolfleetv1.CallToolsRequest) (*toolfleetv1.CallToolsResponse, error)
	// FetchResult opens the stream of a result's chunks: recv returns the next
	// chunk, or io.EOF after the last; closing ctx ends the stream.
	FetchResult(ctx context.Context, auth headers, req *toolfleetv1.FetchResultRequest) (recv func() ([]byte, error), err error)
}

// New returns a client of the gateway at target: "host:port" for gRPC (any
// grpc-go target works, e.g. "dns:///gateway:8080"), or with [WithConnect] a
// URL or host:port. No connection is made until the first call.
func New(target string, opts ...Option) (*Client, error) {
	if target == "" {
		return nil, errors.New("client: empty gateway target")
	}
	o := options{timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	c := &Client{opts: o, close: func() error { return nil }}
	if o.connect {
		hc := o.httpClient
		if hc == nil {
			hc = http.DefaultClient
		}
		base := target
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		c.rpc = connectRPC{toolfleetv1connect.NewToolGatewayServiceClient(hc, strings.TrimSuffix(base, "/"))}
		return c, nil
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, o.dialOpts...)
	cc, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("client: gateway %s: %w", target, err)
	}
	c.rpc = grpcRPC{toolfleetv1.NewToolGatewayServiceClient(cc)}
	c.close = cc.Close
	return c, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.close() }

// bound applies the default timeout when ctx has no deadline.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.opts.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.opts.timeout)
}

// auth returns the headers of one attempt: the Authorization value (none
// without a token) and the delegation of ctx ([OnBehalfOf]).
func (c *Client) auth(ctx context.Context) (headers, error) {
	var h headers
	h.delegation, _ = delegationOf(ctx)
	if c.opts.token == nil {
		return h, nil
	}
	tok, err := c.opts.token(ctx)
	if err != nil {
		return h, fmt.Errorf("client: token source: %w", err)
	}
	if tok != "" {
		h.auth = "Bearer " + tok
	}
	return h, nil
}

// ListTools returns one page of tool definitions (see the request's filters,
// page_size and page_token); [Client.Tools] walks every page.
func (c *Client) ListTools(ctx context.Context, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	auth, err := c.auth(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.ListTools(ctx, auth, req)
	return resp, fromRPC(ctx, err, "")
}

// GetTool returns one tool definition; toolID resolves like a call's tool_id
// ("Calculator.Add", "Calculator.Add@1", "Calculator_Add").
func (c *Client) GetTool(ctx context.Context, toolID string) (*toolfleetv1.ToolDefinition, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	auth, err := c.auth(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.GetTool(ctx, auth, &toolfleetv1.GetToolRequest{ToolId: toolID})
	if err != nil {
		return nil, fromRPC(ctx, err, "")
	}
	return resp.GetTool(), nil
}

// SearchTools ranks the served tools for a natural-language query.
func (c *Client) SearchTools(ctx context.Context, req *toolfleetv1.SearchToolsRequest) (*toolfleetv1.SearchToolsResponse, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	auth, err := c.auth(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.SearchTools(ctx, auth, req)
	return resp, fromRPC(ctx, err, "")
}

// Tools returns every tool definition matching req's filters, walking all pages.
// A nil req lists the latest version of every tool.
func (c *Client) Tools(ctx context.Context, req *toolfleetv1.ListToolsRequest) ([]*toolfleetv1.ToolDefinition, error) {
	page := &toolfleetv1.ListToolsRequest{}
	if req != nil {
		page = &toolfleetv1.ListToolsRequest{Toolkit: req.GetToolkit(), Filter: req.GetFilter(),
			PageSize: req.GetPageSize(), PageToken: req.GetPageToken(), AllVersions: req.GetAllVersions()}
	}
	var defs []*toolfleetv1.ToolDefinition
	for {
		resp, err := c.ListTools(ctx, page)
		if err != nil {
			return nil, err
		}
		defs = append(defs, resp.GetTools()...)
		if resp.GetNextPageToken() == "" {
			return defs, nil
		}
		page.PageToken = resp.GetNextPageToken()
	}
}

// Result is the outcome of a call that reached the tool: a value, or an
// execution error (Success false, Error set).
type Result struct {
	// CallID is the call's id (the caller's, or the one the client generated).
	CallID string
	// ToolID is the resolved tool id, e.g. "Calculator.Add@1.0.0".
	ToolID string
	// Success is true when the tool returned a value.
	Success bool
	// Value is the result as JSON (the tool's output message in protojson form);
	// nil when Handle is set.
	Value *structpb.Value
	// Handle names a result over the tool's inline limit that the gateway kept
	// (only when the call allowed it, see [WithResultHandles]); read it with
	// [Client.FetchResult] before Handle.ExpiresAt.
	Handle *toolfleetv1.ResultHandle
	// Error is the execution error when Success is false.
	Error *toolfleetv1.ToolError
	// Duration is the execution's wall time as the gateway measured it.
	Duration time.Duration
	// Attempts counts the attempts made, retries included.
	Attempts int
	// InputRequired is set (with Success false and no Error) when the tool
	// asks its caller for input: repeat the call with the same tool and input,
	// CallToolRequest.input_responses keyed as its requests are, and its
	// request_state. Only callers that set CallToolRequest.client_input get it.
	InputRequired *toolfleetv1.InputRequired
	// Logs are the lines the tool logged for its caller during the call
	// (tool.CallerLogger), oldest first; LogsDropped counts those over the
	// bounds, not relayed.
	Logs        []*toolfleetv1.ToolLog
	LogsDropped uint32
}

// Err returns nil for a success, else the execution error as an *[ExecutionError].
func (r *Result) Err() error {
	if r.Success {
		return nil
	}
	if r.InputRequired != nil {
		return &ExecutionError{ToolID: r.ToolID, CallID: r.CallID, Message: "the tool asks its caller for input (Result.InputRequired): answer and repeat the call"}
	}
	e := r.Error
	return &ExecutionError{ToolID: r.ToolID, CallID: r.CallID, Message: e.GetMessage(),
		DeveloperMessage: e.GetDeveloperMessage(), CanRetry: e.GetCanRetry(),
		RetryAfter: time.Duration(e.GetRetryAfterMs()) * time.Millisecond, AdditionalPromptContent: e.GetAdditionalPromptContent()}
}

// Response returns the result as the gateway's CallToolResponse.
func (r *Result) Response() *toolfleetv1.CallToolResponse {
	resp := &toolfleetv1.CallToolResponse{CallId: r.CallID, ToolId: r.ToolID, Success: r.Success, Logs: r.Logs, LogsDropped: r.LogsDropped}
	if r.Duration > 0 {
		resp.Duration = durationOf(r.Duration)
	}
	switch {
	case r.InputRequired != nil:
		resp.InputRequired = r.InputRequired
	case r.Handle != nil:
		resp.ResultHandle = r.Handle
	case r.Success:
		resp.Outcome = &toolfleetv1.CallToolResponse_Value{Value: r.Value}
	default:
		resp.Outcome = &toolfleetv1.CallToolResponse_Error{Error: r.Error}
	}
	return resp
}

func resultOf(resp *toolfleetv1.CallToolResponse, attempts int) *Result {
	return &Result{CallID: resp.GetCallId(), ToolID: resp.GetToolId(), Success: resp.GetSuccess(),
		Value: resp.GetValue(), Handle: resp.GetResultHandle(), Error: resp.GetError(), Duration: resp.GetDuration().AsDuration(), Attempts: attempts,
		InputRequired: resp.GetInputRequired(), Logs: resp.GetLogs(), LogsDropped: resp.GetLogsDropped()}
}

// Call calls toolID with input: a map, a struct (encoded as JSON), a
// json.RawMessage or []byte holding a JSON object, a *structpb.Struct, or nil
// for no fields. See [Client.CallTool] for the outcomes.
func (c *Client) Call(ctx context.Context, toolID string, input any) (*Result, error) {
	in, err := InputOf(input)
	if err != nil {
		return nil, err
	}
	return c.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: toolID, Input: in})
}

// CallTool runs one call. It returns a *[ServerError] or a *[ValidationError]
// when the call failed before the tool ran, else a [Result] (which may be an
// execution error).
//
// Retries follow the tool contract's retry policy (field by field over the
// client's [RetryPolicy]) with jittered exponential backoff: an execution error
// marked can_retry is retried after the tool's retry_after_ms (or the backoff),
// an Unavailable server error (gateway, worker or idempotency store away)
// is retried when that is safe, and a call refused over a rate limit or
// quota (ResourceExhausted with a retry delay) is retried after that delay
// when it is within the policy's MaxBackoff (else returned at once: the
// *[ServerError] carries RetryAfter). A call_id is sent only where it buys something:
// the caller's own, or a generated one when the client may retry a tool that is
// neither read-only nor idempotent, so that a repeat of a call whose answer was
// lost returns the stored result instead of running the tool twice. Retries stop
// early when the context's deadline leaves no room for the wait.
func (c *Client) CallTool(ctx context.Context, req *toolfleetv1.CallToolRequest) (*Result, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := c.planFor(ctx, req.GetToolId())
	return c.attempts(ctx, prepare(req, p, c.opts.handles), p, nil, nil)
}

// attempts runs req until an outcome is final: a success, an error that may not
// be retried, the last allowed attempt, or no time left. prev and prevErr are an
// outcome already received (from CallTools), or both nil.
func (c *Client) attempts(ctx context.Context, req *toolfleetv1.CallToolRequest, p plan, prev *Result, prevErr error) (*Result, error) {
	b := p.policy.Backoff()
	res, err := prev, prevErr
	if prev == nil && prevErr == nil {
		res, err = c.attempt(ctx, req, 1)
	}
	for {
		var suggested time.Duration
		var se *ServerError
		switch {
		case err != nil && retryableServerError(err, req, p):
			if errors.As(err, &se) && rateLimited(se) {
				if se.RetryAfter > p.policy.WithDefaults().MaxBackoff {
					return nil, err // longer than this client waits: the caller decides
				}
				suggested = se.RetryAfter
			}
		case err != nil:
			return nil, err
		case res.Success || !res.Error.GetCanRetry():
			return res, nil
		default:
			suggested = time.Duration(res.Error.GetRetryAfterMs()) * time.Millisecond
		}
		wait, ok := b.Next(suggested)
		if dl, has := ctx.Deadline(); !ok || has && time.Until(dl) <= wait {
			return res, err // attempts spent, or no time left for the wait and another attempt
		}
		if retry.Sleep(ctx, wait) != nil {
			return res, err // the caller's context ended during the wait: the last outcome stands
		}
		res, err = c.attempt(ctx, req, b.Attempts())
	}
}

// attempt makes attempt number n of req.
func (c *Client) attempt(ctx context.Context, req *toolfleetv1.CallToolRequest, n int) (*Result, error) {
	auth, err := c.auth(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.CallTool(ctx, auth, req)
	if err != nil {
		return nil, fromRPC(ctx, err, req.GetCallId())
	}
	return resultOf(resp, n), nil
}

// Outcome is one call's outcome in [Client.CallTools]: a Result, or Err (a
// *[ServerError] or *[ValidationError]).
type Outcome struct {
	Result *Result
	Err    error
}

// CallTools runs several calls in one request: the gateway runs read-only and
// idempotent tools in parallel, the others one after another in the given
// order. Outcomes come back in the order of reqs; calls get a call_id and are
// retried one by one as [Client.CallTool] does.
// The error is non-nil only when the whole request failed.
func (c *Client) CallTools(ctx context.Context, reqs ...*toolfleetv1.CallToolRequest) ([]Outcome, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	calls := make([]*toolfleetv1.CallToolRequest, len(reqs))
	plans := make([]plan, len(reqs))
	for i, r := range reqs {
		plans[i] = c.planFor(ctx, r.GetToolId())
		calls[i] = prepare(r, plans[i], c.opts.handles)
	}
	auth, err := c.auth(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.CallTools(ctx, auth, &toolfleetv1.CallToolsRequest{Calls: calls})
	if err != nil {
		return nil, fromRPC(ctx, err, "")
	}
	if len(resp.GetOutcomes()) != len(calls) {
		return nil, fmt.Errorf("client: CallTools: %d outcomes for %d calls", len(resp.GetOutcomes()), len(calls))
	}
	out := make([]Outcome, len(calls))
	for i, o := range resp.GetOutcomes() {
		if f := o.GetFailure(); f != nil {
			if f.GetCallId() == "" {
				f.CallId = calls[i].GetCallId()
			}
			res, err := c.attempts(ctx, calls[i], plans[i], nil, fromFailure(f))
			out[i] = Outcome{Result: res, Err: err}
			continue
		}
		res, err := c.attempts(ctx, calls[i], plans[i], resultOf(o.GetResponse(), 1), nil)
		out[i] = Outcome{Result: res, Err: err}
	}
	return out, nil
}

// NewCallID returns a random call id (128 bits, hex).
func NewCallID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// grpcRPC is the gateway API over grpc-go.
type grpcRPC struct {
	c toolfleetv1.ToolGatewayServiceClient
}

func withAuth(ctx context.Context, h headers) context.Context {
	var kv []string
	h.each(func(k, v string) { kv = append(kv, k, v) })
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func (g grpcRPC) ListTools(ctx context.Context, auth headers, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	return g.c.ListTools(withAuth(ctx, auth), req)
}

func (g grpcRPC) GetTool(ctx context.Context, auth headers, req *toolfleetv1.GetToolRequest) (*toolfleetv1.GetToolResponse, error) {
	return g.c.GetTool(withAuth(ctx, auth), req)
}

func (g grpcRPC) SearchTools(ctx context.Context, auth headers, req *toolfleetv1.SearchToolsRequest) (*toolfleetv1.SearchToolsResponse, error) {
	return g.c.SearchTools(withAuth(ctx, auth), req)
}

func (g grpcRPC) CallTool(ctx context.Context, auth headers, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	return g.c.CallTool(withAuth(ctx, auth), req)
}

func (g grpcRPC) CallTools(ctx context.Context, auth headers, req *toolfleetv1.CallToolsRequest) (*toolfleetv1.CallToolsResponse, error) {
	return g.c.CallTools(withAuth(ctx, auth), req)
}

func (g grpcRPC) FetchResult(ctx context.Context, auth headers, req *toolfleetv1.FetchResultRequest) (func() ([]byte, error), error) {
	stream, err := g.c.FetchResult(withAuth(ctx, auth), req)
	if err != nil {
		return nil, err
	}
	return func() ([]byte, error) {
		m, err := stream.Recv()
		return m.GetChunk(), err
	}, nil
}

// connectRPC is the gateway API over connect-go.
type connectRPC struct {
	c toolfleetv1connect.ToolGatewayServiceClient
}

func connectCall[Req, Resp any](ctx context.Context, auth headers, req *Req,
	fn func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) (*Resp, error) {
	r := connect.NewRequest(req)
	auth.each(r.Header().Set)
	resp, err := fn(ctx, r)
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func (c connectRPC) ListTools(ctx context.Context, auth headers, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	return connectCall(ctx, auth, req, c.c.ListTools)
}

func (c connectRPC) GetTool(ctx context.Context, auth headers, req *toolfleetv1.GetToolRequest) (*toolfleetv1.GetToolResponse, error) {
	return connectCall(ctx, auth, req, c.c.GetTool)
}

func (c connectRPC) SearchTools(ctx context.Context, auth headers, req *toolfleetv1.SearchToolsRequest) (*toolfleetv1.SearchToolsResponse, error) {
	return connectCall(ctx, auth, req, c.c.SearchTools)
}

func (c connectRPC) CallTool(ctx context.Context, auth headers, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	return connectCall(ctx, auth, req, c.c.CallTool)
}

func (c connectRPC) CallTools(ctx context.Context, auth headers, req *toolfleetv1.CallToolsRequest) (*toolfleetv1.CallToolsResponse, error) {
	return connectCall(ctx, auth, req, c.c.CallTools)
}

func (c connectRPC) FetchResult(ctx context.Context, auth headers, req *toolfleetv1.FetchResultRequest) (func() ([]byte, error), error) {
	r := connect.NewRequest(req)
	auth.each(r.Header().Set)
	stream, err := c.c.FetchResult(ctx, r)
	if err != nil {
		return nil, err
	}
	// Client.FetchResult cancels ctx on Close; that releases the HTTP response too.
	context.AfterFunc(ctx, func() { _ = stream.Close() })
	return func() ([]byte, error) {
		if stream.Receive() {
			return stream.Msg().GetChunk(), nil
		}
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}, nil
}
