package mcp

import (
	"context"
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
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
	// AnswerTask answers a tool's question the task waits for (an MCP
	// ElicitResult: action accept, decline or cancel, and content).
	AnswerTask(ctx context.Context, id, callID, key, action string, content map[string]any) error
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
	// AskPeople is set when the client can answer a tool's questions in the
	// task (it declared the elicitation capability): a question then waits
	// in the task (input_required) for tasks/update; otherwise the tool is
	// told its question was declined.
	AskPeople bool
	// Answers and RequestState are the first round of a TaskToolCall whose
	// questions the client answered inline before the task (MCP ElicitResults
	// keyed as the tool asked, and the gateway's sealed request_state).
	Answers      map[string]*structpb.Struct
	RequestState string
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

// TaskQuestion is a tool's question a task waits on (an elicitation), or
// a call waiting for its principal to connect an account (Provider set).
type TaskQuestion struct {
	CallID, Key, Message string
	Schema               *structpb.Struct
	// Provider and Scopes: the call acts with the principal's account at
	// Provider, not connected yet. URL, when the backend is a [ConnectLinker],
	// is a link that connects it; it is asked of the client as a url-mode
	// elicitation (a client without elicitation.url reads it in the message).
	Provider string
	Scopes   []string
	URL      string
}

// ConnectLinker is a [Tasks] that can make the caller a link to connect a
// provider (the gateway's connect flow: single use, for a few minutes), for
// the connect items tasks/get shows.
type ConnectLinker interface {
	ConnectLink(ctx context.Context, provider string, scopes []string) (string, error)
}

// inputKey is the inputRequests key of q: TaskInputPrefix, the call id, a
// "#" and the tool's key.
func (q TaskQuestion) inputKey() string { return TaskInputPrefix + q.CallID + "#" + q.Key }

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
	// Questions are the tools' questions an input_required task waits on.
	Questions []TaskQuestion
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
	// TaskInputPrefix prefixes the inputRequests key of a tool's question
	// a task waits on ("toolfleet/input/<call id>#<the tool's key>").
	TaskInputPrefix = "toolfleet/input/"

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
