package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
)

// The tool list, kept in step with the backend: the poller while clients
// watch, the tools not loaded yet, and the sync that adds and removes tools.

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
				if err := s.unknownTool(p.Name); err != nil {
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

// unknownTool answers a tools/call of a name the list does not have (after
// notLoaded): invalid params naming the closest listed tools, ranked as the
// gateway ranks them for every other surface (registry.Closest); nil for a
// listed name or a built-in task tool.
func (s *Server) unknownTool(name string) error {
	if _, builtin := builtinKind(name); builtin && s.tasks() != nil {
		return nil
	}
	s.mu.Lock()
	_, known := s.tools[name]
	cs := make([]registry.Candidate, 0, len(s.tools))
	for n, t := range s.tools {
		c := registry.Candidate{Name: n}
		if id, _ := t.Meta[MetaToolID].(string); id != "" {
			base, _, _ := strings.Cut(id, "@")
			c.Aliases = []string{base}
			_, c.Short, _ = strings.Cut(base, ".")
		}
		cs = append(cs, c)
	}
	s.mu.Unlock()
	if known {
		return nil
	}
	msg := fmt.Sprintf("unknown tool %q", name)
	if names := registry.Closest(name, cs, 3); len(names) > 0 {
		msg += "; closest tools: " + strings.Join(names, ", ")
	} else {
		msg += "; no tools are served right now"
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
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
	if c := d.GetRequirements().GetCredential(); c != nil {
		t.Meta[MetaCredential] = credentialMeta(c)
	}
	if a := e.Annotations; a != nil {
		// One title: a client shows either field, so both carry the same
		// (the version says which contract a UI is showing).
		t.Annotations = &sdk.ToolAnnotations{Title: t.Title, ReadOnlyHint: a.ReadOnlyHint,
			DestructiveHint: &a.DestructiveHint, IdempotentHint: a.IdempotentHint, OpenWorldHint: &a.OpenWorldHint}
	}
	return t, nil
}

// credentialMeta is MetaCredential's value: plain JSON types, so listings
// compare equal across syncs.
func credentialMeta(c *toolfleetv1.ToolCredential) map[string]any {
	m := map[string]any{"provider": c.GetProvider(), "scopes": slices.Clone(c.GetScopes())}
	if m["scopes"] == nil {
		m["scopes"] = []string{}
	}
	if a := c.GetAudience(); a != "" {
		m["audience"] = a
	}
	return m
}

// versionedTitle is "Toolkit.Tool@x.y.z", after the contract's own title when it has one.
func versionedTitle(d *toolfleetv1.ToolDefinition) string {
	if t := d.GetTitle(); t != "" && t != d.GetName() {
		return t + " (" + d.GetId() + ")"
	}
	return d.GetId()
}
