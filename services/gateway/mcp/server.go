package mcp

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
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
	// MetaCredential describes, on a listed tool, the delegated credential it
	// acts with (ToolOptions.credential): {"provider", "scopes", "audience"}.
	// A caller who has not connected that provider is asked to first.
	MetaCredential = "toolfleet/credential"
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
