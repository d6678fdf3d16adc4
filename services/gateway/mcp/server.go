package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/telemetry"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// Backend is what the MCP surface needs of a gateway. CallTool returns a
// response (a success or an execution error) or an error carrying a gRPC status
// (a GRPCStatus method, as gateway.CallError and sdk/client's errors have) with
// a toolfleetv1.ServerError or toolfleetv1.ValidationError detail; its only
// FAILED_PRECONDITION is "this tool needs an approval". A request whose
// Approval has no approver was approved through MCP (input_required): the
// backend names the approver (the gateway: the caller's subject).
type Backend interface {
	ListTools(ctx context.Context, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error)
	CallTool(ctx context.Context, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error)
}

// Defaults of [Options].
const (
	DefaultPollInterval     = 2 * time.Second
	DefaultMaxStaleness     = 500 * time.Millisecond
	DefaultProgressInterval = time.Second
	DefaultPageSize         = 100
	DefaultSessionTimeout   = 30 * time.Minute
	DefaultMaxRequestBytes  = 4 << 20
	DefaultMaxInputValues   = 100_000
	DefaultListTTL          = 2 * time.Second
	DefaultLongCall         = 30 * time.Second
	DefaultTaskTTL          = 24 * time.Hour
	DefaultTaskPollInterval = time.Second
	DefaultTaskResultWait   = 5 * time.Minute
	DefaultTaskPageSize     = 50
)

// Meta keys toolfleet adds to MCP messages.
const (
	// MetaToolID carries a listed tool's full id with version ("Calculator.Add@1.0.0").
	MetaToolID = "toolfleet/id"
	// MetaCallID carries a call's idempotency key: optional in a tools/call
	// request, always set on the result.
	MetaCallID = "toolfleet/callId"
	// MetaApprover names who approved a tools/call of a tool whose contract
	// requires approval (the caller needs the tools:approve scope).
	MetaApprover = "toolfleet/approver"
	// metaContent marks, until the tool is added, a tool whose result is
	// content blocks (ToolDefinition.content_result); never sent.
	metaContent = "toolfleet/content"
)

// Options configure a [Server]; zero values take the defaults.
type Options struct {
	// Name and Version describe the server to clients. Default "toolfleet", "dev".
	Name, Version string
	// PollInterval is how often the tool list is re-read while a client is
	// connected, to notify list changes. Default [DefaultPollInterval].
	PollInterval time.Duration
	// MaxStaleness bounds the age of the tool list a tools/list answer is built
	// from. Default [DefaultMaxStaleness].
	MaxStaleness time.Duration
	// ProgressInterval is the period of progress notifications of a running
	// call that asked for them. Default [DefaultProgressInterval].
	ProgressInterval time.Duration
	// PageSize is the number of tools per tools/list page. Default [DefaultPageSize].
	PageSize int
	// SessionTimeout is unused: [Server.Handler] is stateless and keeps no
	// sessions.
	//
	// Deprecated: it has no effect; kept for source compatibility.
	SessionTimeout time.Duration
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// MaxRequestBytes bounds one POSTed message (or batch), read before it is
	// decoded. Default [DefaultMaxRequestBytes].
	MaxRequestBytes int64
	// MaxInputValues bounds the JSON values of one POSTed body, counted before
	// it is decoded. Default [DefaultMaxInputValues].
	MaxInputValues int
	// ListTTL is the cache hint (ttlMs) of tools/list and server/discover
	// results at 2026-07-28. Default [DefaultListTTL].
	ListTTL time.Duration
	// LongCall is the contract timeout from which a tools/call of a client
	// that declared the 2026-07-28 tasks extension runs as a task. Default
	// [DefaultLongCall].
	LongCall time.Duration
	// TaskTTL is the ttl reported for tasks: how long after its creation a
	// task stays readable (Temporal's retention must be at least this).
	// Default [DefaultTaskTTL].
	TaskTTL time.Duration
	// TaskPollInterval is the pollInterval suggested to clients. Default
	// [DefaultTaskPollInterval].
	TaskPollInterval time.Duration
	// TaskResultWait bounds one tasks/result. Default [DefaultTaskResultWait].
	TaskResultWait time.Duration
	// TaskPageSize bounds a tasks/list page. Default [DefaultTaskPageSize].
	TaskPageSize int
	// Tasks runs MCP tasks (tasks.go, docs/mcp.md "Tasks"). Default nil: no
	// tasks (no task methods, no run tools, every call answered inline).
	Tasks Tasks
}

func (o *Options) defaults() {
	if o.Name == "" {
		o.Name = "toolfleet"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.MaxStaleness <= 0 {
		o.MaxStaleness = DefaultMaxStaleness
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.PageSize <= 0 {
		o.PageSize = DefaultPageSize
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.MaxInputValues <= 0 {
		o.MaxInputValues = DefaultMaxInputValues
	}
	if o.ListTTL <= 0 {
		o.ListTTL = DefaultListTTL
	}
	if o.LongCall <= 0 {
		o.LongCall = DefaultLongCall
	}
	if o.TaskTTL <= 0 {
		o.TaskTTL = DefaultTaskTTL
	}
	if o.TaskPollInterval <= 0 {
		o.TaskPollInterval = DefaultTaskPollInterval
	}
	if o.TaskResultWait <= 0 {
		o.TaskResultWait = DefaultTaskResultWait
	}
	if o.TaskPageSize <= 0 || o.TaskPageSize > 500 {
		o.TaskPageSize = DefaultTaskPageSize
	}
}

// Server is an MCP server over a [Backend]. Serve it over streamable HTTP with
// [Server.Handler] or over one transport (stdio) with [Server.Serve].
type Server struct {
	backend Backend
	opts    Options
	log     *slog.Logger
	mcp     *sdk.Server

	syncMu sync.Mutex // one sync at a time
	// listMu is held for writing while a sync changes the SDK's tools and
	// for reading while tools/list reads them, so a list never sees half a
	// sync (the SDK notifies list_changed after its first change, and a
	// client that lists at once would otherwise miss the rest).
	listMu sync.RWMutex
	mu     sync.Mutex
	tools  map[string]*sdk.Tool // by MCP name, as last added
	// longCalls are the names whose contract timeout is at least LongCall.
	longCalls map[string]bool
	// taskOnly are the names MCP clients call only as tasks (the contract's
	// mcp_task_required).
	taskOnly map[string]bool
	// contentIDs are the tool ids (exact versions) whose results are content
	// blocks, for rendering a task's result as the call would have.
	contentIDs map[string]bool
	lastSync   time.Time

	watchMu  sync.Mutex
	watchers int
	stop     context.CancelFunc
	polling  sync.WaitGroup

	hooksMu sync.Mutex
	hooked  map[*http.Server]bool
}

// New returns a server over b. It reads the tool list lazily (on the first
// tools/list or while clients are connected), so it does no I/O here.
func New(b Backend, opts Options) *Server {
	opts.defaults()
	s := &Server{backend: b, opts: opts, log: opts.Logger.With("component", "mcp"), tools: map[string]*sdk.Tool{}, hooked: map[*http.Server]bool{}}
	caps := &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true},
		Prompts: &sdk.PromptCapabilities{}, Resources: &sdk.ResourceCapabilities{}}
	if s.tasks() != nil {
		caps.AddExtension(TasksExtension, nil)
	}
	s.mcp = sdk.NewServer(&sdk.Implementation{Name: opts.Name, Title: "toolfleet", Version: opts.Version}, &sdk.ServerOptions{
		PageSize: opts.PageSize,
		Instructions: "Tools served by a toolfleet gateway. Tool titles carry the exact version " +
			"(Toolkit.Tool@x.y.z); a failed call returns isError with a message to act on.",
		// Prompts and resources are declared because the SDK answers their
		// list methods (with empty lists): a server must not handle a feature
		// it does not declare (SEP-2575).
		Capabilities: caps,
		SetCacheable: s.cacheable,
	})
	// freshList(scopedList(SDK)): the list is refreshed, listed, then filtered
	// for the caller.
	s.mcp.AddReceivingMiddleware(s.freshList, s.scopedList, s.taskCaps)
	s.addBuiltins() // tasks.go
	return s
}

// Handler serves MCP over streamable HTTP, stateless: no session is kept
// between requests, so any replica of the gateway answers any request. The
// Authorization header of each request is passed to the backend with the call
// (see [Authorization]); authentication itself is the backend's job (the
// gateway answers 401 before this handler runs when auth is on).
//
// Clients at 2026-07-28 (server/discover, per-request _meta) get the whole
// revision; clients at 2025-11-25 and older initialize as before, get no
// Mcp-Session-Id, and a GET for a notification stream is answered 405 (the
// spec lets a server offer none), so they see list changes by listing again.
func (s *Server) Handler() http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.mcp },
		&sdk.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true,
			Logger: s.log, MaxRequestBodyBytes: s.opts.MaxRequestBytes})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(context.WithValue(r.Context(), statelessKey{}, true))
		if r.Method == http.MethodPost {
			body := checkBody(w, r, s.opts.MaxRequestBytes, s.opts.MaxInputValues)
			if body == nil {
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if s.routeTasks(w, r, body) { // tasks.go
				return
			}
		}
		s.closeOnShutdown(r)
		// Poll the registry while requests (notably the notification stream) are open.
		release := s.watch()
		defer release()
		h.ServeHTTP(w, r)
	})
}

// closeOnShutdown makes the http.Server serving r close every MCP session when
// it shuts down: a session's notification stream is a request that never ends
// by itself and would hold a graceful shutdown until its deadline.
func (s *Server) closeOnShutdown(r *http.Request) {
	hs, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if !ok {
		return
	}
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	if s.hooked[hs] {
		return
	}
	s.hooked[hs] = true
	hs.RegisterOnShutdown(func() {
		for ss := range s.mcp.Sessions() {
			_ = ss.Close()
		}
	})
}

// Serve runs one MCP session over t (e.g. &mcp.StdioTransport{}) until the
// client disconnects or ctx is done.
func (s *Server) Serve(ctx context.Context, t sdk.Transport) error {
	release := s.watch()
	defer release()
	if err := s.Sync(ctx); err != nil {
		s.log.Warn("tool list not read; retrying while the session runs", "error", err)
	}
	return s.mcp.Run(ctx, t)
}

// watch keeps a poller running until the returned release is called (counted:
// the poller stops when the last watcher leaves).
func (s *Server) watch() (release func()) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	s.watchers++
	if s.watchers == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		s.polling.Go(func() { s.poll(ctx) })
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.watchMu.Lock()
			defer s.watchMu.Unlock()
			s.watchers--
			if s.watchers == 0 {
				s.stop()
				s.polling.Wait()
			}
		})
	}
}

// poll re-reads the tool list every PollInterval until ctx is done.
func (s *Server) poll(ctx context.Context) {
	t := time.NewTicker(s.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("tool list not refreshed", "error", err)
		}
	}
}

// freshList keeps the tool list fresh where a session needs it: after
// initialize, before tools/list when the list is stale, and before a
// tools/call of a name not known yet (a tool that appeared since the last read).
func (s *Server) freshList(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		var refresh bool
		switch method {
		case "initialize", "server/discover", "tools/list":
			refresh = s.stale()
		case "tools/call":
			if p, ok := req.GetParams().(*sdk.CallToolParamsRaw); ok {
				s.mu.Lock()
				_, known := s.tools[p.Name]
				s.mu.Unlock()
				refresh = !known && s.stale()
			}
		}
		if refresh {
			if err := s.syncIfStale(ctx); err != nil {
				if method != "tools/list" {
					s.log.Warn("tool list not refreshed", "error", err)
				} else {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the tool list is not available; try again shortly"}
				}
			}
		}
		if method == "tools/call" {
			if p, ok := req.GetParams().(*sdk.CallToolParamsRaw); ok {
				if err := s.notLoaded(ctx, p.Name); err != nil {
					return nil, err
				}
			}
		}
		if method == "tools/list" {
			s.listMu.RLock()
			defer s.listMu.RUnlock()
		}
		return next(ctx, method, req)
	}
}

// Loading is implemented by a backend that may not have loaded every tool yet
// (a gateway that is starting, or a worker that is joining). NotLoaded is asked
// about a tool name the list does not have: served when the backend serves it
// by now (the list is only behind), else a retryable error (a gRPC status,
// UNAVAILABLE) when it may be served in a moment, else neither (unknown).
type Loading interface {
	NotLoaded(ctx context.Context, name string) (served bool, err error)
}

// notLoaded answers a tools/call of a name the list does not have: the
// backend's retryable error while the tool may only not be loaded yet (an
// "unknown tool" would not be retried), after reading the list again when
// the backend serves it by now; nil to go on.
func (s *Server) notLoaded(ctx context.Context, name string) error {
	l, ok := s.backend.(Loading)
	if !ok {
		return nil
	}
	if _, builtin := builtinKind(name); builtin && s.tasks() != nil {
		return nil
	}
	s.mu.Lock()
	_, known := s.tools[name]
	s.mu.Unlock()
	if known {
		return nil
	}
	served, err := l.NotLoaded(ctx, name)
	if err != nil {
		return rpcError(ctx, name, err)
	}
	if served {
		if err := s.Sync(ctx); err != nil {
			s.log.Warn("tool list not refreshed", "error", err)
		}
	}
	return nil
}

// stale reports a tool list older than MaxStaleness.
func (s *Server) stale() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.lastSync) > s.opts.MaxStaleness
}

// syncIfStale syncs unless another request's sync made the list fresh while
// this one waited for it.
func (s *Server) syncIfStale(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if !s.stale() {
		return nil
	}
	return s.syncLocked(ctx)
}

// Sync reads the backend's tool list (bounded by 10s) and updates the served
// tools; the SDK notifies sessions of a change.
func (s *Server) Sync(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	return s.syncLocked(ctx)
}

// syncLocked is Sync with syncMu held.
func (s *Server) syncLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var defs []*toolfleetv1.ToolDefinition
	req := &toolfleetv1.ListToolsRequest{PageSize: 500}
	for {
		resp, err := s.backend.ListTools(ctx, req)
		if err != nil {
			return fmt.Errorf("mcp: list tools: %w", err)
		}
		defs = append(defs, resp.GetTools()...)
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	next := make(map[string]*sdk.Tool, len(defs))
	long, taskOnly, contentIDs := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, d := range defs {
		t, err := toolOf(d)
		if err != nil {
			s.log.Warn("tool not shown to MCP clients", "tool", d.GetId(), "error", err)
			continue
		}
		next[t.Name] = t
		long[t.Name] = d.GetRequirements().GetTimeout().AsDuration() >= s.opts.LongCall
		if d.GetMcpTaskRequired() {
			taskOnly[t.Name] = true
		}
		if d.GetContentResult() {
			contentIDs[d.GetId()] = true
		}
	}
	// The SDK's set changes first and the list is marked fresh last: a
	// tools/list that finds the list fresh (and so does not wait for this
	// sync) must find every tool of it in the SDK, not a half-added set.
	s.listMu.Lock()
	defer s.listMu.Unlock()
	s.mu.Lock()
	prev := s.tools
	s.mu.Unlock()
	var gone []string
	for name := range prev {
		if _, ok := next[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		s.mcp.RemoveTools(gone...)
	}
	for _, name := range slices.Sorted(maps.Keys(next)) {
		t := next[name]
		if old, ok := prev[name]; ok && reflect.DeepEqual(old, t) {
			continue
		}
		s.addTool(t)
	}
	s.mu.Lock()
	s.tools = next
	s.longCalls, s.taskOnly, s.contentIDs = long, taskOnly, contentIDs
	s.lastSync = time.Now()
	s.mu.Unlock()
	return nil
}

// addTool adds or replaces t. The SDK panics on a tool it deems malformed; one
// odd contract must not take the gateway down, so such a tool is logged once
// (it stays in s.tools, so it is retried only when its definition changes).
func (s *Server) addTool(t *sdk.Tool) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Warn("tool not shown to MCP clients", "tool", t.Meta[MetaToolID], "error", r)
		}
	}()
	// The served copy drops metaContent; t (kept for comparison) keeps it.
	served := *t
	served.Meta = maps.Clone(t.Meta)
	_, content := served.Meta[metaContent]
	delete(served.Meta, metaContent)
	required, _ := served.Meta[metaClientInput].([]string)
	delete(served.Meta, metaClientInput)
	s.mcp.AddTool(&served, s.handler(t.Meta[MetaToolID].(string), content, required))
}

// toolOf renders a definition as an MCP tool (see the package doc for names,
// titles and versions).
func toolOf(d *toolfleetv1.ToolDefinition) (*sdk.Tool, error) {
	e := wire.MCPTool(d)
	e.Name = contract.MCPName(d)
	if e.Name == "" {
		return nil, errors.New("no model name")
	}
	in := e.InputSchema
	if in == nil || in["type"] != "object" {
		return nil, fmt.Errorf("input schema of type %v, MCP needs an object", in["type"])
	}
	t := &sdk.Tool{Name: e.Name, Description: e.Description, InputSchema: in,
		Title: versionedTitle(d), Meta: sdk.Meta{MetaToolID: d.GetId()}}
	if d.GetContentResult() {
		// Content blocks, not a value: no outputSchema, no structuredContent.
		t.Meta[metaContent] = true
	} else if e.OutputSchema != nil {
		t.OutputSchema = e.OutputSchema
	}
	if ci := d.GetRequirements().GetClientInput(); len(ci) > 0 {
		var names []string
		for _, c := range ci {
			if n := tool.CapabilityName(c); n != "" && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		t.Meta[metaClientInput] = names
	}
	if a := e.Annotations; a != nil {
		t.Annotations = &sdk.ToolAnnotations{Title: a.Title, ReadOnlyHint: a.ReadOnlyHint,
			DestructiveHint: &a.DestructiveHint, IdempotentHint: a.IdempotentHint, OpenWorldHint: &a.OpenWorldHint}
	}
	return t, nil
}

// versionedTitle is "Toolkit.Tool@x.y.z", after the contract's own title when it has one.
func versionedTitle(d *toolfleetv1.ToolDefinition) string {
	if t := d.GetTitle(); t != "" && t != d.GetName() {
		return t + " (" + d.GetId() + ")"
	}
	return d.GetId()
}

// handler calls toolID (the exact version listed) through the backend;
// required are the client capabilities the tool needs (clientinput.go).
func (s *Server) handler(toolID string, content bool, required []string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		if res, err := checkCapabilities(ctx, req, toolID, required); res != nil || err != nil {
			return res, err
		}
		input := &structpb.Struct{}
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			if err := protojson.Unmarshal(raw, input); err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
					Message: fmt.Sprintf("arguments of %s must be a JSON object: %v", req.Params.Name, err)}
			}
		}
		call := &toolfleetv1.CallToolRequest{ToolId: toolID, Input: input}
		if id, ok := req.Params.Meta[MetaCallID].(string); ok {
			call.CallId = id
		}
		if a, ok := req.Params.Meta[MetaApprover].(string); ok && a != "" {
			call.Approval = &toolfleetv1.Approval{Approver: a}
		}
		call.ClientInput = clientInput(ctx, req)
		carriedApprover, state, carried := carriedApproval(req.Params.RequestState)
		if carried && call.Approval == nil {
			call.Approval = &toolfleetv1.Approval{Approver: carriedApprover}
		}
		responses, err := inputResponses(req.Params)
		if err != nil {
			return nil, err
		}
		call.InputResponses = responses
		answered, approval, err := approvalAnswer(req.Params, toolID, input)
		if err != nil {
			return nil, err
		}
		if !answered {
			call.RequestState = state // the gateway's, for the tool's own questions
		}
		if answered {
			if approval == nil {
				return errorResult(sdk.Meta{MetaToolID: toolID, "toolfleet/code": "FAILED_PRECONDITION"},
					fmt.Sprintf("%s was not run: the approval was declined.", toolID)), nil
			}
			if call.Approval == nil {
				call.Approval = approval
			}
		}
		ctx = withRequest(ctx, req)
		ctx = withTraceMeta(ctx, req.Params.Meta)
		if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
			stop := s.progress(ctx, req.Session, tok, toolID)
			defer stop()
		}
		resp, err := s.backend.CallTool(ctx, call)
		if err != nil {
			if why, ok := approvalRequired(err); ok && ctx.Err() == nil {
				switch {
				case answered:
					return errorResult(sdk.Meta{MetaToolID: toolID, "toolfleet/code": "FAILED_PRECONDITION"},
						fmt.Sprintf("%s was not run: it was approved in the MCP client, but the gateway refused the approval: %s", toolID, why)), nil
				case call.Approval == nil && canAsk(ctx, req):
					if a, ok := s.backend.(Approving); ok && !a.MayApprove(ctx) {
						return errorResult(sdk.Meta{MetaToolID: toolID, "toolfleet/code": "FAILED_PRECONDITION"},
							fmt.Sprintf("%s was not run: it requires an approval, and this caller may not give one (that needs the tools:approve scope).", toolID)), nil
					}
					return approvalQuestion(toolID, input, why), nil
				}
			}
			return failure(ctx, toolID, err)
		}
		s.relayLogs(ctx, req.Session, resp)
		if ir := resp.GetInputRequired(); ir != nil {
			approved := call.Approval != nil && (answered || carried)
			return inputRequired(toolID, ir, call.Approval.GetApprover(), approved), nil
		}
		return result(resp, content)
	}
}

// relayLogs sends the lines the tool logged for its caller as
// notifications/message on the request's stream, before the result; the
// SDK drops those under the client's level (logging/setLevel, or the
// request's _meta log level; "info" for a stateless client at 2025-11-25).
func (s *Server) relayLogs(ctx context.Context, ss *sdk.ServerSession, resp *toolfleetv1.CallToolResponse) {
	if ss == nil {
		return
	}
	send := func(level sdk.LoggingLevel, msg string) bool {
		err := ss.Log(ctx, &sdk.LoggingMessageParams{Level: level, Logger: resp.GetToolId(), Data: msg})
		if err != nil {
			s.log.Debug("log notification not sent", "tool", resp.GetToolId(), "error", err)
		}
		return err == nil
	}
	for _, l := range resp.GetLogs() {
		if !send(sdk.LoggingLevel(tool.LogLevelName(l.GetLevel())), l.GetMessage()) {
			return
		}
	}
	if n := resp.GetLogsDropped(); n > 0 {
		send("notice", fmt.Sprintf("%d more log lines of this call were not relayed (over the bound of %d lines or %d KiB)",
			n, tool.MaxCallerLogLines, tool.MaxCallerLogBytes>>10))
	}
}

// withTraceMeta makes a W3C traceparent (and tracestate) in a request's _meta
// the parent of the call, so the gateway's events, logs and the worker join
// the client's trace. It wins over the HTTP header: _meta names this request.
func withTraceMeta(ctx context.Context, meta sdk.Meta) context.Context {
	tp, _ := meta["traceparent"].(string)
	if tp == "" || len(tp) > 128 {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": tp}
	if ts, _ := meta["tracestate"].(string); ts != "" && len(ts) <= 512 {
		carrier["tracestate"] = ts
	}
	return telemetry.Propagator.Extract(ctx, carrier)
}

// progress sends a notification every ProgressInterval until stop is called.
func (s *Server) progress(ctx context.Context, ss *sdk.ServerSession, token any, toolID string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		t := time.NewTicker(s.opts.ProgressInterval)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			elapsed := time.Since(start).Round(100 * time.Millisecond)
			err := ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(n),
				Message: fmt.Sprintf("%s running for %s", toolID, elapsed)})
			if err != nil && ctx.Err() == nil {
				s.log.Debug("progress notification not sent", "tool", toolID, "error", err)
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// result renders a response: the value (JSON text, plus structuredContent for
// objects) or an execution error as isError.
func result(resp *toolfleetv1.CallToolResponse, content bool) (*sdk.CallToolResult, error) {
	meta := sdk.Meta{MetaCallID: resp.GetCallId(), MetaToolID: resp.GetToolId()}
	if !resp.GetSuccess() {
		text := resp.GetError().GetMessage()
		if hint := resp.GetError().GetAdditionalPromptContent(); hint != "" {
			text += "\n" + hint
		}
		return &sdk.CallToolResult{Meta: meta, IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: text}}}, nil
	}
	if content && resp.GetValue() != nil {
		blocks, err := contentBlocks(resp.GetValue())
		if err != nil {
			return nil, fmt.Errorf("mcp: result of %s: %w", resp.GetToolId(), err)
		}
		return &sdk.CallToolResult{Meta: meta, Content: blocks}, nil
	}
	v := resp.GetValue().AsInterface()
	text, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("mcp: result of %s: %w", resp.GetToolId(), err)
	}
	out := &sdk.CallToolResult{Meta: meta, Content: []sdk.Content{&sdk.TextContent{Text: string(text)}}}
	if _, ok := v.(map[string]any); ok {
		out.StructuredContent = v
	}
	return out, nil
}

type authKey struct{}

// WithAuthorization returns ctx carrying an Authorization header value for the backend.
func WithAuthorization(ctx context.Context, header string) context.Context {
	if header == "" {
		return ctx
	}
	return context.WithValue(ctx, authKey{}, header)
}

// Authorization returns the Authorization header value of the MCP request that
// started the call ("" when none, e.g. over stdio).
func Authorization(ctx context.Context) string {
	v, _ := ctx.Value(authKey{}).(string)
	return v
}

type headerKey struct{}

// WithHeader returns ctx carrying the HTTP header of the MCP request (e.g. for
// the gateway's delegation headers).
func WithHeader(ctx context.Context, h http.Header) context.Context {
	return context.WithValue(ctx, headerKey{}, h)
}

// Header returns the HTTP header of the MCP request that started the call (nil
// when none, e.g. over stdio).
func Header(ctx context.Context) http.Header {
	h, _ := ctx.Value(headerKey{}).(http.Header)
	return h
}
