package program

import (
	"fmt"
	"time"

	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// Names the Temporal UI and CLI show, and that clients use.
const (
	// WorkflowName is the registered name of [ProgramWorkflow].
	// Agent runs in code mode start it as a child by this name.
	WorkflowName = "Program"

	// Activity names.
	ResolveToolsActivity = "ResolveProgramTools"
	CallToolActivity     = "ProgramCallTool"
	PublishEventActivity = "PublishProgramEvent"

	// UpdateDecideApproval grants or denies a call waiting for approval: a
	// validated Update whose argument is a toolcall.Decision. Its name is not the
	// agent runs' ("DecideApproval"), so a run's decision can never reach a
	// program; programs recorded before the change answer both names.
	UpdateDecideApproval = "DecideProgramApproval"
	// legacyUpdateDecideApproval is the name programs shared with runs
	// before change "program-update-name".
	legacyUpdateDecideApproval = "DecideApproval"
	// QueryGetProgram returns a [State].
	QueryGetProgram = "GetProgram"
	// UpdateAnswerInput answers a tool's pending question (toolcall.Reply).
	UpdateAnswerInput = "AnswerProgramInput"

	// ErrorType is the Temporal application error type of a failed program;
	// its details hold a [ProgramError].
	ErrorType = "ProgramError"
)

// InterpreterVersion names the interpreter's behaviour recorded in a program's
// history (workflow.GetVersion "starlark-interpreter"). Bump it when an
// upgrade of go.starlark.net or of the builtins could change what a replay
// computes (for instance where a step limit trips), and raise
// minInterpreterVersion when the old behaviour is no longer available, so an
// old history fails loudly instead of diverging.
const (
	InterpreterVersion    = 1
	minInterpreterVersion = 1
	interpreterChangeID   = "starlark-interpreter"
)

// Defaults applied to a zero [Limits] field, and the ceilings a caller may ask for.
const (
	DefaultMaxSteps       = 1_000_000
	DefaultMaxToolCalls   = 100
	DefaultMaxWidth       = 8
	DefaultDeadline       = 10 * time.Minute
	DefaultMaxValueBytes  = 256 << 10
	DefaultMaxResultBytes = 256 << 10
	DefaultApprovalWait   = 24 * time.Hour
	// DefaultMaxMemoryBytes is the memory budget of a program: the size
	// model's bytes of every value it creates (see bounds.go).
	DefaultMaxMemoryBytes = 256 << 20

	// MaxSteps keeps the pure computation between two tool calls well inside
	// a workflow task (about 50 ns a step: 10M steps ≈ 0.5 s).
	MaxSteps = 10_000_000
	// MaxToolCalls keeps a program within Temporal's history: a sequential
	// call adds 6 events, and a history of more than 51,200 events is ended
	// by the server (TestToolCallCeilingFitsHistory).
	MaxToolCalls   = 7_500
	MaxWidth       = 64
	MaxDeadline    = 7 * 24 * time.Hour
	MaxValueBytes  = 1 << 20
	MaxResultBytes = 1 << 20
	MaxMemoryBytes = 1 << 30
	// MaxParallel bounds the functions one parallel() call takes.
	MaxParallel = 1000
	// MaxSourceBytes bounds a program's source.
	MaxSourceBytes = 256 << 10
	// MaxPrints bounds the print events of one program; later prints are dropped.
	MaxPrints = 1000
	// MaxPrintBytes bounds one print event's text; longer text is cut.
	MaxPrintBytes = 4 << 10
)

// ExecutionTimeoutMargin is added to a program's deadline to make its
// workflow execution timeout (see [ExecutionTimeout]).
const ExecutionTimeoutMargin = time.Minute

// ExecutionTimeout is the Temporal workflow execution timeout a program is
// started with: its deadline plus [ExecutionTimeoutMargin]. The deadline is
// checked by the script itself; this bound holds even when the program can
// never finish a workflow task (every worker that tries crashes or times
// out), so no program is retried longer than this.
func ExecutionTimeout(lim Limits) time.Duration {
	if lim.Deadline <= 0 {
		lim.Deadline = DefaultDeadline
	}
	return lim.Deadline + ExecutionTimeoutMargin
}

// DeadlockDetectionTimeout is the worker option (worker.Options) that
// workers running programs need: a script computes between two tool calls
// without yielding to Temporal, and the SDK's default of 1 s would mistake a
// long (but bounded) computation for a deadlock on a busy machine.
const DeadlockDetectionTimeout = 10 * time.Second

// Limit names, used in errors (ProgramError.Limit) and docs.
const (
	LimitSteps     = "max_steps"
	LimitToolCalls = "max_tool_calls"
	LimitWidth     = "max_width"
	LimitDeadline  = "deadline"
	LimitValue     = "max_value_bytes"
	LimitResult    = "max_result_bytes"
	LimitMemory    = "max_memory_bytes"
	LimitParallel  = "max_parallel"
	// LimitStorage is the owner's byte quota (--principal-max-bytes), which
	// a program's stored values count against, or the shared store's room
	// for program values (valuequota.go).
	LimitStorage = "storage_quota"
)

// Limits bound one program; a zero field takes its default.
type Limits struct {
	// MaxSteps bounds Starlark execution steps (the interpreter's own counter),
	// summed over the script and every function run by parallel.
	MaxSteps uint64 `json:"max_steps,omitempty"`
	// MaxToolCalls bounds the tool calls the script may start.
	MaxToolCalls int `json:"max_tool_calls,omitempty"`
	// MaxWidth bounds the tool calls in flight at once (and parallel's width).
	MaxWidth int `json:"max_width,omitempty"`
	// Deadline bounds the program's duration in workflow time, waits included.
	Deadline time.Duration `json:"deadline,omitempty"`
	// MaxValueBytes bounds the JSON size of any tool input or tool result.
	MaxValueBytes int `json:"max_value_bytes,omitempty"`
	// MaxResultBytes bounds the JSON size of the program's result.
	MaxResultBytes int `json:"max_result_bytes,omitempty"`
	// ApprovalWait is how long a call that needs approval waits for a
	// decision before it counts as denied (within the deadline).
	ApprovalWait time.Duration `json:"approval_wait,omitempty"`
	// MaxMemoryBytes bounds the memory the program's values may take, by a
	// deterministic size model summed over the program's life (freed values
	// still count), checked before each allocation.
	MaxMemoryBytes int64 `json:"max_memory_bytes,omitempty"`
}

// legacyMaxToolCalls is the ceiling of tool calls programs started before
// "program-values" were checked against when they replay.
const legacyMaxToolCalls = 10_000

// WithDefaults fills zero fields and checks the ceilings.
func (l Limits) WithDefaults() (Limits, error) { return l.withDefaults(MaxToolCalls) }

// withDefaults is WithDefaults with maxCalls as the ceiling of tool calls.
func (l Limits) withDefaults(maxCalls int) (Limits, error) {
	def := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	if l.MaxSteps == 0 {
		l.MaxSteps = DefaultMaxSteps
	}
	l.MaxToolCalls = def(l.MaxToolCalls, DefaultMaxToolCalls)
	l.MaxWidth = def(l.MaxWidth, DefaultMaxWidth)
	l.MaxValueBytes = def(l.MaxValueBytes, DefaultMaxValueBytes)
	l.MaxResultBytes = def(l.MaxResultBytes, DefaultMaxResultBytes)
	if l.Deadline == 0 {
		l.Deadline = DefaultDeadline
	}
	if l.ApprovalWait == 0 {
		l.ApprovalWait = DefaultApprovalWait
	}
	if l.MaxMemoryBytes == 0 {
		l.MaxMemoryBytes = DefaultMaxMemoryBytes
	}
	switch {
	case l.MaxSteps > MaxSteps:
		return l, fmt.Errorf("program: %s %d is over the ceiling %d", LimitSteps, l.MaxSteps, MaxSteps)
	case l.MaxToolCalls < 0 || l.MaxToolCalls > maxCalls:
		return l, fmt.Errorf("program: %s %d: want 1..%d", LimitToolCalls, l.MaxToolCalls, maxCalls)
	case l.MaxWidth < 0 || l.MaxWidth > MaxWidth:
		return l, fmt.Errorf("program: %s %d: want 1..%d", LimitWidth, l.MaxWidth, MaxWidth)
	case l.Deadline < 0 || l.Deadline > MaxDeadline:
		return l, fmt.Errorf("program: %s %s: want up to %s", LimitDeadline, l.Deadline, MaxDeadline)
	case l.MaxValueBytes < 0 || l.MaxValueBytes > MaxValueBytes:
		return l, fmt.Errorf("program: %s %d: want 1..%d", LimitValue, l.MaxValueBytes, MaxValueBytes)
	case l.MaxResultBytes < 0 || l.MaxResultBytes > MaxResultBytes:
		return l, fmt.Errorf("program: %s %d: want 1..%d", LimitResult, l.MaxResultBytes, MaxResultBytes)
	case l.MaxMemoryBytes < 0 || l.MaxMemoryBytes > MaxMemoryBytes:
		return l, fmt.Errorf("program: %s %d: want 1..%d", LimitMemory, l.MaxMemoryBytes, MaxMemoryBytes)
	case l.ApprovalWait < 0:
		return l, fmt.Errorf("program: approval_wait %s is negative", l.ApprovalWait)
	}
	return l, nil
}

// Input starts a [ProgramWorkflow].
type Input struct {
	// ProgramID is the workflow id and the prefix of every call id.
	ProgramID string `json:"program_id"`
	// Filename names the script in errors; default "program.star".
	Filename string `json:"filename,omitempty"`
	Source   string `json:"source"`
	// Call, when set, is the whole program instead of a script: one call of
	// one tool (onecall.go). Source and ArgsJSON are empty, Tools is its tool.
	Call *ToolCall `json:"call,omitempty"`
	// ArgsJSON is a JSON object, the script's global `args`; empty means {}.
	// JSON text (not a map) keeps 64-bit integers exact through history.
	ArgsJSON string `json:"args_json,omitempty"`
	// Tools are tool ids or globs ("Calculator.*", "KV.Get@1") the script may call.
	Tools []string `json:"tools,omitempty"`
	// Approval lists tool ids or globs whose calls wait for a decision even
	// when their contract does not ask for one (toolcall.PolicyNeedsApproval):
	// the approval policy of the code-mode run that starts the program.
	Approval  []string           `json:"approval,omitempty"`
	Limits    Limits             `json:"limits"`
	Principal toolcall.Principal `json:"principal"`
	// Visibility is set when the start gave the program its search
	// attributes (orchestrator/visibility); it keeps them up to date.
	Visibility bool `json:"visibility,omitempty"`
	// NoContentInHistory is Config.NoContentInHistory of the orchestrator
	// that started the program: decided once, at start, so a replay takes
	// the same path. A failed program's error message in history then names
	// its kind and limit only (the whole error is in its details).
	NoContentInHistory bool `json:"no_content_in_history,omitempty"`
	// AskPeople is set when the program's people answer a tool's questions
	// (ProgramService, questions not declined): a question waits as
	// pending input (questions.go). Unset (code-mode programs, programs
	// started before it) declines them.
	AskPeople bool `json:"ask_people,omitempty"`
}

// DefaultFilename names a script that was given no file name.
const DefaultFilename = "program.star"

// ValidProgramID reports whether id can name a program: it is used as a NATS
// subject token and as the prefix of call ids, exactly like a run id (programs
// share the run event subjects).
func ValidProgramID(id string) error {
	if err := ids.Valid(id); err != nil {
		return fmt.Errorf("program: %w", err)
	}
	return nil
}

// Output is what a finished program returns.
type Output struct {
	// ResultJSON is the JSON of the script's `result` ("null" when unset).
	ResultJSON string `json:"result_json"`
	ToolCalls  int    `json:"tool_calls"`
	Steps      uint64 `json:"steps"`
}

// ProgramError says why a program failed: a limit, a syntax or runtime error,
// fail(), or a failure of the platform. It is the detail of the workflow's
// application error (type [ErrorType]).
type ProgramError struct {
	// Kind: "syntax", "runtime", "limit", "fail", "tools" (the allowed tools
	// could not be resolved) or "internal".
	Kind string `json:"kind"`
	// Limit names the limit that was hit (one of the Limit* values).
	Limit   string `json:"limit,omitempty"`
	Message string `json:"message"`
	// Position is "file:line:column" in the script, when known.
	Position string `json:"position,omitempty"`
	// Line is the script's line at Position.
	Line string `json:"line,omitempty"`
	// Backtrace is Starlark's traceback for runtime errors.
	Backtrace string `json:"backtrace,omitempty"`
	// ToolCalls counts the calls the program started before it failed
	// (they count against the budget of a code-mode run that started it).
	ToolCalls int `json:"tool_calls,omitempty"`
}

// Error renders e as "file:line:col: message\n\tline".
func (e *ProgramError) Error() string {
	s := e.Message
	if e.Position != "" {
		s = e.Position + ": " + s
	}
	if e.Line != "" {
		s += "\n\t" + e.Line
	}
	return s
}

// Tool is what a program needs to know of one allowed tool, resolved once at
// start by an activity and kept in history.
type Tool struct {
	// Tool is the contract summary calls are scheduled by (ID, ModelName —
	// the stub's name, e.g. "Calculator_Add" —, hints, timeout, retries).
	toolcall.Tool
	// Name is "Toolkit.Tool".
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// InputSchema is the JSON Schema of the input object.
	InputSchema string `json:"input_schema,omitempty"`
}

// CallRequest is the CallTool activity's input.
type CallRequest struct {
	// CallID is "<program_id>/<n>": the gateway's idempotency key, so a
	// retried activity or a replay never repeats a side effect.
	CallID    string             `json:"call_id"`
	ToolID    string             `json:"tool_id"`
	InputJSON string             `json:"input_json"`
	Principal toolcall.Principal `json:"principal"`
	// Approver is set when the call was approved through DecideApproval.
	Approver string `json:"approver,omitempty"`
	// MaxValueBytes bounds the result's JSON.
	MaxValueBytes int `json:"max_value_bytes"`
	// AskPeople, Answers, RequestState and Unanswered: a tool's questions
	// (see questions.go and agent.CallToolInput).
	AskPeople    bool              `json:"ask_people,omitempty"`
	Answers      map[string]string `json:"answers,omitempty"`
	RequestState string            `json:"request_state,omitempty"`
	Unanswered   string            `json:"unanswered,omitempty"`
}

// CallResult is the CallTool activity's output: a tool's success or a
// failure the script can handle.
type CallResult struct {
	OK        bool       `json:"ok"`
	ValueJSON string     `json:"value_json,omitempty"`
	Error     *CallError `json:"error,omitempty"`
	// Asked is the tool's round of questions (nothing else is set).
	Asked *toolcall.Asked `json:"asked,omitempty"`
}

// CallError is the error of a failed call, as a script sees it.
type CallError struct {
	// Kind: "execution" (the tool failed), "validation" (the input does not
	// fit the contract), "denied" (approval denied or timed out), "server"
	// (the gateway refused the call), "too_large" (a value over
	// max_value_bytes) or "storage" (the program's values are over its
	// owner's quota; the workflow ends the program with LimitStorage): the
	// toolcall.Kind values, a refusal named toolcall.KindServer.
	Kind     toolcall.Kind `json:"kind"`
	Message  string        `json:"message"`
	CanRetry bool          `json:"can_retry,omitempty"`
	// Fields maps input fields to what is wrong with them (validation).
	Fields map[string]string `json:"fields,omitempty"`
}

// Program statuses.
const (
	StatusRunning         = "RUNNING"
	StatusWaitingApproval = "WAITING_APPROVAL"
	StatusWaitingInput    = "WAITING_INPUT"
)

// State is what the GetProgram query returns while the program runs.
type State struct {
	ProgramID string             `json:"program_id"`
	Status    string             `json:"status"`
	ToolCalls int                `json:"tool_calls"`
	Steps     uint64             `json:"steps"`
	Pending   []toolcall.Pending `json:"pending,omitempty"`
	// Questions are the tools' questions waiting for an answer.
	Questions []toolcall.Question `json:"questions,omitempty"`
	StartedAt time.Time           `json:"started_at"`
}
