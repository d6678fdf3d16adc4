package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Routing of the task methods ahead of the SDK: the JSON-RPC request, the
// negotiated revision and its headers, the answer, and the 2025-11-25
// capability patches.

// taskRequest is one JSON-RPC request the task router looks at.
type taskRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// taskParams are the params members the router reads.
type taskParams struct {
	Meta      map[string]json.RawMessage `json:"_meta"`
	TaskID    *string                    `json:"taskId"`
	Cursor    string                     `json:"cursor"`
	Name      string                     `json:"name"`
	Arguments json.RawMessage            `json:"arguments"`
	Task      json.RawMessage            `json:"task"`
	// RequestState is echoed by a client answering a tool's first round
	// inline (askFirst).
	RequestState string `json:"requestState"`
	// InputResponses are read one by one (see updateTask): an answer to no
	// outstanding request is ignored, whatever its shape.
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
}

// revision is what the request negotiated.
type revision struct {
	extension bool // 2026-07-28 or later
	declared  bool // the client declared the tasks extension (2026-07-28)
	// caps are the client capabilities among elicitation, sampling and roots
	// the request declared (2026-07-28); with elicitation the client can
	// answer a tool's questions in a task.
	caps []string
	// urlElicitation: the client declared elicitation.url (url-mode elicitations).
	urlElicitation bool
}

// can reports whether the request declared capability c.
func (r revision) can(c string) bool { return slices.Contains(r.caps, c) }

// routeTasks answers body when it is a task method or a task-creating
// tools/call, and reports whether it did; anything else is the SDK's.
func (s *Server) routeTasks(w http.ResponseWriter, r *http.Request, body []byte) bool {
	tb := s.tasks()
	if tb == nil {
		return false
	}
	var req taskRequest
	if json.Unmarshal(body, &req) != nil || len(req.ID) == 0 || string(req.ID) == "null" {
		return false // a batch, a notification, or a response: the SDK's
	}
	isTaskMethod := false
	switch req.Method {
	case "tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "tasks/update":
		isTaskMethod = true
	case "tools/call":
	default:
		return false
	}
	var p taskParams
	if len(req.Params) > 0 && json.Unmarshal(req.Params, &p) != nil {
		if !isTaskMethod {
			return false // the SDK says what is wrong with it
		}
		writeRPC(w, req.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "params must be an object with the method's members"})
		return true
	}
	rev, version := revisionOf(p.Meta)
	hv := r.Header.Get("Mcp-Protocol-Version")
	if !rev.extension && hv != "" && hv < revisionCoreTasks {
		return false // no tasks before 2025-11-25
	}
	if req.Method == "tools/call" {
		kind, builtin := builtinKind(p.Name)
		if !builtin {
			s.listed(taskContext(r), p.Name)
		}
		taskOnly := !builtin && s.isTaskOnly(p.Name)
		switch {
		case rev.extension && rev.declared:
			if !builtin && !taskOnly && !s.long(p.Name) {
				return false // answered inline
			}
			if !builtin && len(p.InputResponses) == 0 && len(s.needsInput(p.Name)) > 0 {
				return false // it asks first: that round is answered inline (askFirst)
			}
		case !rev.extension && len(p.Task) > 0 && string(p.Task) != "null":
		case taskOnly:
			// A task-only tool called without tasks: refused as the run
			// tools are, to a caller that may call it (else it is unknown).
			if jerr := checkHeaders(r, req.Method, p.Name, version, rev); jerr != nil {
				writeRPCStatus(w, http.StatusBadRequest, req.ID, jerr)
				return true
			}
			_, jerr := s.callable(taskContext(r), p.Name)
			switch {
			case jerr != nil:
			case rev.extension:
				jerr = missingTasksCapability()
			default:
				jerr = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
					Message: p.Name + " runs only as a task: call it with a \"task\" param (tasks capability)"}
			}
			writeRPC(w, req.ID, nil, jerr)
			return true
		default:
			return false
		}
		if jerr := checkHeaders(r, req.Method, p.Name, version, rev); jerr != nil {
			writeRPCStatus(w, http.StatusBadRequest, req.ID, jerr)
			return true
		}
		ctx := taskContext(r)
		res, jerr := s.createTask(ctx, tb, kind, builtin, p, rev)
		writeRPC(w, req.ID, res, jerr)
		return true
	}
	// The task methods.
	id := ""
	if p.TaskID != nil {
		id = *p.TaskID
	}
	if rev.extension && (req.Method == "tasks/result" || req.Method == "tasks/list") {
		// Not methods of this revision: method-not-found before anything
		// else of the request (its routing headers, its params) is judged.
		writeRPC(w, req.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
			Message: fmt.Sprintf("%s is not part of the tasks extension (%s); poll tasks/get", req.Method, version)})
		return true
	}
	if req.Method != "tasks/list" {
		if jerr := checkHeaders(r, req.Method, id, version, rev); jerr != nil {
			writeRPCStatus(w, http.StatusBadRequest, req.ID, jerr)
			return true
		}
	}
	ctx := taskContext(r)
	var res any
	var jerr *jsonrpc.Error
	switch {
	case !rev.extension && req.Method == "tasks/update":
		jerr = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "tasks/update is defined from 2026-07-28 (the tasks extension)"}
	case rev.extension && !rev.declared:
		jerr = missingTasksCapability()
	case req.Method == "tasks/list":
		res, jerr = s.listTasks(ctx, tb, p.Cursor)
	case id == "" || len(id) > maxTaskID:
		jerr = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("taskId must be a task id (1 to %d bytes)", maxTaskID)}
	case req.Method == "tasks/get":
		res, jerr = s.getTask(ctx, tb, id, rev)
	case req.Method == "tasks/result":
		res, jerr = s.taskResult(ctx, tb, id)
	case req.Method == "tasks/cancel":
		res, jerr = s.cancelTask(ctx, tb, id, rev)
	case req.Method == "tasks/update":
		res, jerr = s.updateTask(ctx, tb, id, p.InputResponses)
	}
	writeRPC(w, req.ID, res, jerr)
	return true
}

// revisionOf reads the protocol version and the declared extensions of a
// request's _meta.
func revisionOf(meta map[string]json.RawMessage) (revision, string) {
	var version string
	if raw, ok := meta[metaProtocol]; ok {
		_ = json.Unmarshal(raw, &version)
	}
	rev := revision{extension: version >= revisionExtension}
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if raw, ok := meta[metaClientCaps]; ok && json.Unmarshal(raw, &caps) == nil {
		_, rev.declared = caps.Extensions[TasksExtension]
		var all map[string]json.RawMessage
		_ = json.Unmarshal(raw, &all)
		for name := range capabilityKinds {
			if v, ok := all[name]; ok && string(v) != "null" {
				rev.caps = append(rev.caps, name)
			}
		}
		slices.Sort(rev.caps)
		var el struct {
			URL json.RawMessage `json:"url"`
		}
		if raw, ok := all["elicitation"]; ok && json.Unmarshal(raw, &el) == nil && len(el.URL) > 0 && string(el.URL) != "null" {
			rev.urlElicitation = true
		}
	}
	return rev, version
}

// checkHeaders checks the routing headers of a 2026-07-28 request as the SDK
// does for the methods it serves: Mcp-Protocol-Version equals the _meta
// version, Mcp-Method the method, and Mcp-Name the tool name or the task id.
func checkHeaders(r *http.Request, method, name, version string, rev revision) *jsonrpc.Error {
	hv := r.Header.Get("Mcp-Protocol-Version")
	if !rev.extension {
		return nil
	}
	if hv != version {
		return &jsonrpc.Error{Code: codeHeaderMismatch, Message: fmt.Sprintf("Mcp-Protocol-Version header %q does not match the request's %s %q", hv, metaProtocol, version)}
	}
	if m := r.Header.Get("Mcp-Method"); m != method {
		return &jsonrpc.Error{Code: codeHeaderMismatch, Message: fmt.Sprintf("header mismatch: Mcp-Method header value %q does not match body value %q", m, method)}
	}
	if n := r.Header.Get("Mcp-Name"); n != name {
		return &jsonrpc.Error{Code: codeHeaderMismatch, Message: fmt.Sprintf("header mismatch: Mcp-Name header value %q does not match body value %q", n, name)}
	}
	return nil
}

// taskContext carries the HTTP request's credentials for the backend.
func taskContext(r *http.Request) context.Context {
	ctx := WithAuthorization(r.Context(), r.Header.Get("Authorization"))
	return WithHeader(ctx, r.Header)
}

// long reports whether the listed tool name may run long (its contract
// timeout is at least Options.LongCall): at 2026-07-28 such calls become
// tasks.
func (s *Server) long(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.longCalls[name]
}

// listed makes sure a stale list is read again before a tool name it does
// not hold is routed: a task-creating call may be a client's first request.
func (s *Server) listed(ctx context.Context, name string) {
	s.mu.Lock()
	_, known := s.tools[name]
	s.mu.Unlock()
	if !known && s.stale() {
		_ = s.syncIfStale(ctx) // a failed sync leaves the call to the path that reports it
	}
}

// needsInput returns the client capabilities the listed tool name needs
// (its contract's client_input): such a tool asks before it runs.
func (s *Server) needsInput(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tools[name]; ok {
		needs, _ := t.Meta[metaClientInput].([]string)
		return needs
	}
	return nil
}

// isTaskOnly reports whether MCP clients call the listed tool name only as a
// task (its contract's mcp_task_required).
func (s *Server) isTaskOnly(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taskOnly[name]
}

// isContent reports whether the results of a tool id are content blocks.
func (s *Server) isContent(toolID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contentIDs[toolID]
}

// callable returns the tool id of a listed tool name the caller of ctx may
// call; a tool it may not call is unknown to it, as in tools/list.
func (s *Server) callable(ctx context.Context, name string) (string, *jsonrpc.Error) {
	s.mu.Lock()
	t, known := s.tools[name]
	s.mu.Unlock()
	if !known && s.stale() {
		if err := s.Sync(ctx); err == nil {
			s.mu.Lock()
			t, known = s.tools[name]
			s.mu.Unlock()
		}
	}
	if !known {
		if err := s.notLoaded(ctx, name); err != nil {
			var jerr *jsonrpc.Error
			if errors.As(err, &jerr) {
				return "", jerr
			}
			return "", asRPC(ctx, err)
		}
		s.mu.Lock()
		t, known = s.tools[name]
		s.mu.Unlock()
	}
	if !known {
		return "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
	}
	id, _ := t.Meta[MetaToolID].(string)
	if sc, ok := s.backend.(Scoped); ok {
		may, err := sc.CanCall(ctx)
		if err != nil {
			return "", asRPC(ctx, err)
		}
		if !may(id) {
			return "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
		}
	}
	return id, nil
}

// writeRPC answers one JSON-RPC request (HTTP 200).
func writeRPC(w http.ResponseWriter, id json.RawMessage, res any, jerr *jsonrpc.Error) {
	writeRPCStatus(w, http.StatusOK, id, jerr, res)
}

// writeRPCStatus answers one JSON-RPC request with an HTTP status.
func writeRPCStatus(w http.ResponseWriter, code int, id json.RawMessage, jerr *jsonrpc.Error, res ...any) {
	msg := map[string]any{"jsonrpc": "2.0", "id": id}
	if jerr != nil {
		e := map[string]any{"code": jerr.Code, "message": jerr.Message}
		if len(jerr.Data) > 0 {
			e["data"] = jerr.Data
		}
		msg["error"] = e
	} else if len(res) > 0 {
		msg["result"] = res[0]
	}
	b, err := json.Marshal(msg)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
			"error": map[string]any{"code": jsonrpc.CodeInternalError, "message": "the answer could not be encoded"}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// taskCaps adds what a 2025-11-25 client needs to use tasks: the `tasks`
// capability in the initialize result, and execution.taskSupport on each
// listed tool ("required" for the run tools, "optional" for the others).
func (s *Server) taskCaps(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil || s.tasks() == nil || newProtocol(req) {
			// At 2026-07-28 the SDK marks results complete, which a wrapped
			// result would lose; the extension needs neither patch.
			return res, err
		}
		switch r := res.(type) {
		case *sdk.InitializeResult:
			return &patched{inner: r, patch: func(m map[string]any) {
				caps, _ := m["capabilities"].(map[string]any)
				if caps == nil {
					caps = map[string]any{}
					m["capabilities"] = caps
				}
				caps["tasks"] = map[string]any{"list": map[string]any{}, "cancel": map[string]any{},
					"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
			}}, nil
		case *sdk.ListToolsResult:
			return &patched{inner: r, patch: func(m map[string]any) {
				tools, _ := m["tools"].([]any)
				for _, t := range tools {
					tm, _ := t.(map[string]any)
					if tm == nil {
						continue
					}
					support := "optional"
					if _, ok := builtinKind(fmt.Sprint(tm["name"])); ok || s.isTaskOnly(fmt.Sprint(tm["name"])) {
						support = "required"
					}
					tm["execution"] = map[string]any{"taskSupport": support}
				}
			}}, nil
		}
		return res, nil
	}
}

// newProtocol reports a request at 2026-07-28 or later (per-request _meta).
func newProtocol(req sdk.Request) (yes bool) {
	defer func() {
		if recover() != nil { // params a typed nil: no _meta
			yes = false
		}
	}()
	p := req.GetParams()
	if p == nil {
		return false
	}
	v, _ := p.GetMeta()[metaProtocol].(string)
	return v >= revisionExtension
}

// patched is a result whose JSON is the inner result's with patch applied.
type patched struct {
	sdk.ResultBase
	inner sdk.Result
	patch func(map[string]any)
}

// MarshalJSON renders the inner result, patched.
func (p *patched) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(p.inner)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("mcp: patch a result: %w", err)
	}
	p.patch(m)
	return json.Marshal(m)
}

// GetMeta is the inner result's.
func (p *patched) GetMeta() map[string]any { return p.inner.GetMeta() }

// SetMeta sets the inner result's.
func (p *patched) SetMeta(m map[string]any) { p.inner.SetMeta(m) }
