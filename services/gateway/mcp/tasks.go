package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// MCP tasks (docs/mcp.md "Tasks").
//
// With [Options.Tasks] set the server runs MCP tasks durably: it answers a task-augmented tools/call with a task handle and serves the task
// methods of both revisions from the backend alone, keeping nothing in
// memory, so any replica answers for any task:
//
//   - 2025-11-25 (tasks as an experimental core feature): a tools/call with a
//     `task` param; tasks/get, tasks/result, tasks/list, tasks/cancel;
//     capability `tasks`; tools/list marks tools with execution.taskSupport.
//   - 2026-07-28 (the io.modelcontextprotocol/tasks extension): the client
//     declares the extension in the request's clientCapabilities and the server
//     decides: the built-in run tools always, other tools when their contract
//     timeout is at least Options.LongCall; tasks/get, tasks/update (an
//     approval answer), tasks/cancel.
//
// The SDK knows none of this: [Server.Handler] routes the task methods (and
// task-creating tools/call requests) itself before the SDK sees them.

// Tasks runs MCP tasks durably, given to [New] in [Options.Tasks] (the
// gateway's is package orchestration: Temporal workflows of the
// orchestrator's ProgramService and AgentService). The caller's credentials
// are in ctx ([Authorization], [Header]). Errors carry gRPC statuses;
// NOT_FOUND means no such task for this caller (another caller's task is not
// found either).
type Tasks interface {
	// StartTask starts a task and returns once it is durably created.
	StartTask(ctx context.Context, start TaskStart) (*TaskState, error)
	// GetTask reads a task of the caller.
	GetTask(ctx context.Context, id string) (*TaskState, error)
	// CancelTask asks for a task of the caller to be cancelled.
	CancelTask(ctx context.Context, id string) error
	// ListTasks lists the caller's tasks, at most size, from cursor ("" = first page).
	ListTasks(ctx context.Context, cursor string, size int) (tasks []*TaskState, next string, err error)
	// DecideTask answers an approval the task waits for.
	DecideTask(ctx context.Context, id, callID string, approved bool, reason string) error
}

// TaskKind is what a task runs.
type TaskKind string

// Task kinds.
const (
	TaskToolCall TaskKind = "tool"
	TaskAgentRun TaskKind = "run"
	TaskProgram  TaskKind = "program"
)

// TaskStart is a task to start.
type TaskStart struct {
	Kind TaskKind
	// ToolID is the tool of a TaskToolCall (the exact version listed).
	ToolID string
	// Input is the tool's input, or the built-in tool's arguments.
	Input *structpb.Struct
}

// TaskStatus is a task's status, as MCP names it.
type TaskStatus string

// Task statuses.
const (
	TaskWorking       TaskStatus = "working"
	TaskInputRequired TaskStatus = "input_required"
	TaskCompleted     TaskStatus = "completed"
	TaskFailed        TaskStatus = "failed"
	TaskCancelled     TaskStatus = "cancelled"
)

// terminal reports a status that never changes.
func (s TaskStatus) terminal() bool {
	return s == TaskCompleted || s == TaskFailed || s == TaskCancelled
}

// TaskApproval is a tool call a task waits on for a human's approval.
type TaskApproval struct {
	CallID, ToolID string
	Arguments      *structpb.Struct
}

// TaskState is what a backend knows of a task.
type TaskState struct {
	ID        string
	Kind      TaskKind
	Status    TaskStatus
	Message   string
	CreatedAt time.Time
	// UpdatedAt is when the status last changed, when known (else the time
	// it was read).
	UpdatedAt time.Time
	// Approvals are the calls an input_required task waits on.
	Approvals []TaskApproval
	// For a completed task: its outcome, as Backend.CallTool returns one (a
	// response, or an error whose status says why the call was refused).
	Response *toolfleetv1.CallToolResponse
	Err      error
}

// Names and ids of the built-in tools that start agent runs and programs.
const (
	RunAgentTool   = "toolfleet_run_agent"
	RunProgramTool = "toolfleet_run_program"
	RunAgentID     = "toolfleet.RunAgent"
	RunProgramID   = "toolfleet.RunProgram"
)

// Protocol names of tasks.
const (
	TasksExtension    = "io.modelcontextprotocol/tasks"
	metaRelatedTask   = "io.modelcontextprotocol/related-task"
	metaProtocol      = "io.modelcontextprotocol/protocolVersion"
	metaClientCaps    = "io.modelcontextprotocol/clientCapabilities"
	revisionExtension = "2026-07-28"
	revisionCoreTasks = "2025-11-25"
	// TaskApprovalPrefix prefixes the inputRequests key of a task's approval
	// question; the rest is the waiting call's id.
	TaskApprovalPrefix = "toolfleet/approval/"

	codeMissingCapability = -32021
	codeHeaderMismatch    = -32020
	maxTaskID             = 256
)

// tasks returns the server's task support, or nil.
func (s *Server) tasks() Tasks { return s.opts.Tasks }

// builtins are the tools that start runs and programs (tasks only).
func builtins() []*sdk.Tool {
	str := map[string]any{"type": "string"}
	list := map[string]any{"type": "array", "items": str, "maxItems": 100}
	return []*sdk.Tool{
		{Name: RunAgentTool, Title: "Run an agent (" + RunAgentID + ")", Meta: sdk.Meta{MetaToolID: RunAgentID},
			Description: "Starts a durable agent run (a model calling toolfleet tools) as an MCP task; " +
				"the result is the run's answer. Needs the runs:start scope; only as a task.",
			InputSchema: map[string]any{"type": "object", "required": []any{"model", "prompt"}, "additionalProperties": false,
				"properties": map[string]any{
					"model":         map[string]any{"type": "string", "description": `model reference, e.g. "scripted:demo" or "openai:gpt-4o"`},
					"prompt":        map[string]any{"type": "string", "description": "the user's message"},
					"system_prompt": str,
					"tools":         map[string]any{"type": "array", "items": str, "maxItems": 100, "description": "tool ids or globs the agent may call"},
					"max_turns":     map[string]any{"type": "integer", "minimum": 0},
				}}},
		{Name: RunProgramTool, Title: "Run a program (" + RunProgramID + ")", Meta: sdk.Meta{MetaToolID: RunProgramID},
			Description: "Starts a durable Starlark program (docs/programs.md) as an MCP task; the result is its " +
				"`result`. Needs the programs:run scope; only as a task.",
			InputSchema: map[string]any{"type": "object", "required": []any{"source"}, "additionalProperties": false,
				"properties": map[string]any{
					"source": map[string]any{"type": "string", "description": "Starlark source"},
					"args":   map[string]any{"type": "object", "description": "the script's global `args`"},
					"tools":  list,
				}}},
	}
}

// builtinKind is the task kind of a built-in tool name.
func builtinKind(name string) (TaskKind, bool) {
	switch name {
	case RunAgentTool:
		return TaskAgentRun, true
	case RunProgramTool:
		return TaskProgram, true
	}
	return "", false
}

// addBuiltins adds the run tools when the backend serves tasks. Called without
// a task they answer that they need one.
func (s *Server) addBuiltins() {
	if s.tasks() == nil {
		return
	}
	for _, t := range builtins() {
		name := t.Name
		s.mcp.AddTool(t, func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			if req.ProtocolVersion() >= revisionExtension {
				return nil, missingTasksCapability()
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
				Message: name + " runs only as a task: call it with a \"task\" param (tasks capability)"}
		})
	}
}

func missingTasksCapability() *jsonrpc.Error {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}})
	return &jsonrpc.Error{Code: codeMissingCapability, Message: "Missing required client capability: " + TasksExtension, Data: data}
}

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
	// InputResponses are read one by one (see updateTask): an answer to no
	// outstanding request is ignored, whatever its shape.
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
}

// revision is what the request negotiated.
type revision struct {
	extension bool // 2026-07-28 or later
	declared  bool // the client declared the tasks extension (2026-07-28)
}

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
		taskOnly := !builtin && s.isTaskOnly(p.Name)
		switch {
		case rev.extension && rev.declared:
			if !builtin && !taskOnly && !s.long(p.Name) {
				return false // answered inline
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

// createTask starts a task for a tools/call.
func (s *Server) createTask(ctx context.Context, tb Tasks, kind TaskKind, builtin bool, p taskParams, rev revision) (any, *jsonrpc.Error) {
	start := TaskStart{Kind: kind, Input: &structpb.Struct{}}
	if raw := p.Arguments; len(raw) > 0 && string(raw) != "null" {
		if err := protojson.Unmarshal(raw, start.Input); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("arguments of %s must be a JSON object: %v", p.Name, err)}
		}
	}
	if !builtin {
		id, jerr := s.callable(ctx, p.Name)
		if jerr != nil {
			return nil, jerr
		}
		start.Kind, start.ToolID = TaskToolCall, id
	}
	st, err := tb.StartTask(ctx, start)
	if err != nil {
		return nil, asRPC(ctx, err)
	}
	if rev.extension {
		out := s.taskWire(st, rev, false)
		out["resultType"] = "task"
		return out, nil
	}
	return map[string]any{"task": s.taskWire(st, rev, false),
		"_meta": map[string]any{"io.modelcontextprotocol/model-immediate-response": fmt.Sprintf(
			"Started task %s (%s); its result comes later.", st.ID, p.Name)}}, nil
}

// getTask answers tasks/get.
func (s *Server) getTask(ctx context.Context, tb Tasks, id string, rev revision) (any, *jsonrpc.Error) {
	st, err := tb.GetTask(ctx, id)
	if err != nil {
		return nil, taskLookupError(ctx, err)
	}
	out := s.taskWire(st, rev, rev.extension)
	if rev.extension {
		out["resultType"] = "complete"
	}
	return out, nil
}

// taskResult answers tasks/result (2025-11-25): it waits (at most
// Options.TaskResultWait, and while the client waits) for the task to end,
// then returns what the tools/call would have.
func (s *Server) taskResult(ctx context.Context, tb Tasks, id string) (any, *jsonrpc.Error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.TaskResultWait)
	defer cancel()
	t := time.NewTicker(s.opts.TaskPollInterval)
	defer t.Stop()
	for {
		st, err := tb.GetTask(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return nil, stillRunning(id, s.opts.TaskResultWait)
			}
			return nil, taskLookupError(ctx, err)
		}
		if st.Status.terminal() {
			res, jerr := s.outcome(ctx, st)
			related := map[string]any{metaRelatedTask: map[string]any{"taskId": st.ID}}
			if jerr != nil {
				data, _ := json.Marshal(map[string]any{"_meta": related, "cause": json.RawMessage(orNull(jerr.Data))})
				return nil, &jsonrpc.Error{Code: jerr.Code, Message: jerr.Message, Data: data}
			}
			if res.Meta == nil {
				res.Meta = sdk.Meta{}
			}
			res.Meta[metaRelatedTask] = related[metaRelatedTask]
			return res, nil
		}
		select {
		case <-ctx.Done():
			return nil, stillRunning(id, s.opts.TaskResultWait)
		case <-t.C:
		}
	}
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// stillRunning is the answer of a tasks/result that waited its bound.
func stillRunning(id string, waited time.Duration) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
		"task %s is still running after %s (this server's bound on tasks/result); call tasks/result again or poll tasks/get", id, waited)}
}

// cancelTask answers tasks/cancel: at 2026-07-28 an acknowledgement; at
// 2025-11-25 the task once cancelled (a terminal task is refused).
func (s *Server) cancelTask(ctx context.Context, tb Tasks, id string, rev revision) (any, *jsonrpc.Error) {
	st, err := tb.GetTask(ctx, id)
	if err != nil {
		return nil, taskLookupError(ctx, err)
	}
	if st.Status.terminal() {
		if rev.extension {
			return map[string]any{"resultType": "complete"}, nil // cooperative: nothing left to stop
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("task %s is already %s", id, st.Status)}
	}
	if err := tb.CancelTask(ctx, id); err != nil {
		return nil, taskLookupError(ctx, err)
	}
	if rev.extension {
		return map[string]any{"resultType": "complete"}, nil
	}
	// 2025-11-25: answer with the cancelled task; Temporal cancels
	// cooperatively, so wait (bounded) until the workflow says so.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if st, err = tb.GetTask(wctx, id); err == nil && st.Status.terminal() {
			break
		}
		select {
		case <-wctx.Done():
			st = &TaskState{ID: id, Status: TaskWorking, CreatedAt: st.CreatedAt, UpdatedAt: time.Now(),
				Message: "cancellation requested; the task has not stopped yet"}
			return s.taskWire(st, rev, false), nil
		case <-time.After(100 * time.Millisecond):
		}
	}
	return s.taskWire(st, rev, false), nil
}

// updateTask answers tasks/update: approval answers to the task's waiting
// calls. Keys that are not outstanding are ignored, as the extension says.
func (s *Server) updateTask(ctx context.Context, tb Tasks, id string, answers map[string]json.RawMessage) (any, *jsonrpc.Error) {
	st, err := tb.GetTask(ctx, id)
	if err != nil {
		return nil, taskLookupError(ctx, err)
	}
	waiting := map[string]bool{}
	for _, a := range st.Approvals {
		waiting[a.CallID] = true
	}
	for key, answer := range answers {
		callID, ok := cutPrefix(key, TaskApprovalPrefix)
		if !ok || !waiting[callID] {
			continue
		}
		var probe struct {
			Action *string `json:"action"`
		}
		var er sdk.ElicitResult
		if json.Unmarshal(answer, &probe) != nil || probe.Action == nil || json.Unmarshal(answer, &er) != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("inputResponses[%q] must be an elicitation result", key)}
		}
		approve, _ := er.Content["approve"].(bool)
		approve = approve && er.Action == "accept"
		reason := "declined in the MCP client"
		if approve {
			reason = ""
		}
		if err := tb.DecideTask(ctx, id, callID, approve, reason); err != nil {
			return nil, taskLookupError(ctx, err)
		}
	}
	return map[string]any{"resultType": "complete"}, nil
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return "", false
}

// badCursor answers a tasks/list cursor this server did not issue (made up,
// garbled, or another caller's): -32602 at once, never a server error.
const badCursor = "the cursor is not one this server issued; start again without it"

// listTasks answers tasks/list (2025-11-25): the caller's tasks, one bounded page.
func (s *Server) listTasks(ctx context.Context, tb Tasks, cursor string) (any, *jsonrpc.Error) {
	if len(cursor) > 4096 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: badCursor}
	}
	list, next, err := tb.ListTasks(ctx, cursor, s.opts.TaskPageSize)
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: badCursor}
		}
		return nil, asRPC(ctx, err)
	}
	tasks := make([]map[string]any, 0, len(list))
	for _, st := range list {
		tasks = append(tasks, s.taskWire(st, revision{}, false))
	}
	out := map[string]any{"tasks": tasks}
	if next != "" {
		out["nextCursor"] = next
	}
	return out, nil
}

// taskWire renders a task for a revision; detailed adds the status payload of
// the extension's tasks/get (inputRequests, result, error).
func (s *Server) taskWire(st *TaskState, rev revision, detailed bool) map[string]any {
	status := st.Status
	var res *sdk.CallToolResult
	var jerr *jsonrpc.Error
	if status == TaskCompleted {
		res, jerr = s.outcome(context.Background(), st)
		switch {
		case jerr != nil:
			status = TaskFailed
		case res.IsError && !rev.extension:
			status = TaskFailed // 2025-11-25: an isError result is a failed task
		}
	}
	updated := st.UpdatedAt
	if updated.IsZero() {
		updated = time.Now()
	}
	out := map[string]any{"taskId": st.ID, "status": string(status),
		"createdAt": st.CreatedAt.UTC().Format(time.RFC3339Nano), "lastUpdatedAt": updated.UTC().Format(time.RFC3339Nano)}
	msg := st.Message
	if msg == "" && jerr != nil {
		msg = jerr.Message
	}
	if msg != "" {
		out["statusMessage"] = msg
	}
	ttl, poll := s.opts.TaskTTL.Milliseconds(), s.opts.TaskPollInterval.Milliseconds()
	if rev.extension {
		out["ttlMs"], out["pollIntervalMs"] = ttl, poll
	} else {
		out["ttl"], out["pollInterval"] = ttl, poll
	}
	if !detailed {
		return out
	}
	switch status {
	case TaskInputRequired:
		reqs := sdk.InputRequestMap{}
		for _, a := range st.Approvals {
			reqs[TaskApprovalPrefix+a.CallID] = approvalQuestion(a.ToolID, orEmpty(a.Arguments), "the task waits for this approval").InputRequests[ApprovalInput]
		}
		out["inputRequests"] = reqs
	case TaskCompleted:
		out["result"] = res
	case TaskFailed:
		if jerr != nil {
			out["error"] = map[string]any{"code": jerr.Code, "message": jerr.Message, "data": json.RawMessage(orNull(jerr.Data))}
		} else {
			out["error"] = map[string]any{"code": jsonrpc.CodeInternalError, "message": orDefault(st.Message, "the task failed")}
		}
	}
	return out
}

func orEmpty(s *structpb.Struct) *structpb.Struct {
	if s == nil {
		return &structpb.Struct{}
	}
	return s
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// outcome renders a completed task's outcome as the tools/call would have:
// a result (possibly isError; content blocks for a tool whose results are
// content), or a JSON-RPC error.
func (s *Server) outcome(ctx context.Context, st *TaskState) (*sdk.CallToolResult, *jsonrpc.Error) {
	switch {
	case st.Status == TaskCancelled:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("task %s was cancelled", st.ID)}
	case st.Status == TaskFailed:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: orDefault(st.Message, "the task failed")}
	case st.Err != nil:
		res, err := failure(ctx, "", st.Err)
		if err != nil {
			var je *jsonrpc.Error
			if errors.As(err, &je) {
				return nil, je
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task failed"}
		}
		return res, nil
	case st.Response != nil:
		res, err := result(st.Response, s.isContent(st.Response.GetToolId()))
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task's result could not be rendered"}
		}
		return res, nil
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "null"}}}, nil
}

// taskLookupError maps a backend error for a task id: NOT_FOUND (and an
// invalid id) is the spec's -32602 "task not found", for unknown and
// other callers' tasks alike.
func taskLookupError(ctx context.Context, err error) *jsonrpc.Error {
	switch status.Code(err) {
	case codes.NotFound, codes.InvalidArgument:
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
	}
	return asRPC(ctx, err)
}

// asRPC renders a backend error as a JSON-RPC error (see [rpcError]).
func asRPC(ctx context.Context, err error) *jsonrpc.Error {
	var je *jsonrpc.Error
	if errors.As(rpcError(ctx, "", err), &je) {
		return je
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the request was cancelled"}
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
