package agent

import (
	"fmt"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/dialect"
)

// Names that the Temporal UI and CLI show, and that clients use.
const (
	// WorkflowName is the registered name of [AgentRunWorkflow].
	WorkflowName = "AgentRun"

	// Activity names (readable in the Temporal UI).
	PrepareRunActivity  = "PrepareRun"
	ModelTurnActivity   = "ModelTurn"
	CallToolActivity    = "CallTool"
	AppendInputActivity = "AppendInput"
	// ReadProgramCallActivity (code mode) is declared in codemode.go.
	PublishEventActivity = "PublishEvent"

	// UpdateDecideApproval grants or denies a pending tool call.
	UpdateDecideApproval = "DecideApproval"
	// UpdateAnswerInput answers a tool's pending question (toolcall.Reply).
	UpdateAnswerInput = "AnswerInput"
	// UpdateSendMessage appends user messages and starts the next turn.
	UpdateSendMessage = "SendMessage"
	// QueryGetRun returns a [RunState].
	QueryGetRun = "GetRun"
)

// Defaults applied when a [RunSpec] leaves a field zero.
const (
	DefaultMaxTurns        = 50
	DefaultMaxToolCalls    = 200
	DefaultDeadline        = 24 * time.Hour
	DefaultApprovalTimeout = 24 * time.Hour
	DefaultIdleTimeout     = 10 * time.Minute
	// MaxSameFailure is how often the same failing call (tool + arguments) is
	// sent back to the model as an error before the run fails.
	MaxSameFailure = 3
	// MaxDeadline is the longest deadline a run may ask for (Budget.Check).
	MaxDeadline = 30 * 24 * time.Hour
)

// Run statuses (the names of toolfleet.v1.RunStatus without the prefix).
const (
	StatusRunning         = "RUNNING"
	StatusWaitingApproval = "WAITING_APPROVAL"
	StatusCompleted       = "COMPLETED"
	StatusFailed          = "FAILED"
	StatusCanceled        = "CANCELED"
	StatusBudgetExhausted = "BUDGET_EXHAUSTED"
	StatusWaitingInput    = "WAITING_INPUT"
)

// Question policies of a run (RunSpec.Questions).
const (
	// QuestionsAsk (the default): a tool's question waits for a person's
	// answer (AnswerInput) as long as an approval would.
	QuestionsAsk = "ask"
	// QuestionsDecline: the run takes no questions; the model reads that the
	// tool needed input the run does not give.
	QuestionsDecline = "decline"
)

// ValidRunID reports whether id can name a run: usable as a NATS subject
// token, a KV key and part of call ids ("<run_id>/<turn>/<index>").
func ValidRunID(id string) error {
	if err := ids.Valid(id); err != nil {
		return fmt.Errorf("agent: run %w", err)
	}
	return nil
}

// ModelSpec says which model a run talks to: an [llm.Spec] (whose key is a
// reference, "env:NAME" or "file:NAME", resolved inside the activity at call time,
// so no secret is ever written to workflow history) and the reply bound. The
// embedded spec keeps the JSON of recorded histories unchanged.
type ModelSpec struct {
	llm.Spec
	// MaxTokens bounds each reply; 0 keeps the provider default.
	MaxTokens int `json:"max_tokens,omitempty"`
}

// Budget bounds a run; a zero field takes its default (see Default*).
type Budget struct {
	MaxTurns        int           `json:"max_turns,omitempty"`
	MaxToolCalls    int           `json:"max_tool_calls,omitempty"`
	MaxInputTokens  int64         `json:"max_input_tokens,omitempty"`
	MaxOutputTokens int64         `json:"max_output_tokens,omitempty"`
	Deadline        time.Duration `json:"deadline,omitempty"`
}

// Check refuses a budget no run can have: a negative field, or a deadline
// over [MaxDeadline]. The error names the field (budget.<field>).
func (b Budget) Check() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"max_turns", int64(b.MaxTurns)}, {"max_tool_calls", int64(b.MaxToolCalls)},
		{"max_input_tokens", b.MaxInputTokens}, {"max_output_tokens", b.MaxOutputTokens}} {
		if f.v < 0 {
			return fmt.Errorf("budget.%s %d is negative: want 0 (the default) or more", f.name, f.v)
		}
	}
	if b.Deadline < 0 || b.Deadline > MaxDeadline {
		return fmt.Errorf("budget.deadline %s: want 0 (the default, %s) up to %s", b.Deadline, DefaultDeadline, MaxDeadline)
	}
	return nil
}

// ApprovalPolicy adds human approval on top of the tools' contracts.
type ApprovalPolicy struct {
	// Tools are tool ids or globs ("KV.*") whose calls need approval in this
	// run even when their contract does not ask for it; "*" means every call.
	Tools []string `json:"tools,omitempty"`
	// Timeout is how long a call waits for a decision; then it is denied.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Tool protocols: how tool calls travel between the model and the run.
const (
	ProtocolNative = "native" // the provider's own tool calls
	ProtocolAuto   = "auto"   // native, parsing text-tagged calls when a model writes them
	ProtocolFenced = "fenced" // ~~~tool_call JSON blocks in text
	ProtocolHermes = "hermes" // <tool_call>{…}</tool_call>
	ProtocolXML    = "xml"    // <function=name><parameter=p>v</parameter></function>, one call per turn
	// Any other dialect.TextProtocols() name is valid too: the open-model
	// dialects (qwen3_coder, harmony, mistral, llama3_json, pythonic,
	// kimi_k2, glm45, minimax_m2, deepseek_v31, deepseek_v32).
)

// CheckProtocol reports whether p is a tool protocol a run may name: "",
// native, auto or the name of an llm.TextProtocol.
func CheckProtocol(p string) error {
	switch p {
	case "", ProtocolNative, ProtocolAuto:
		return nil
	}
	if _, ok := dialect.TextProtocolByName(p); ok {
		return nil
	}
	names := []string{ProtocolNative, ProtocolAuto}
	for _, tp := range dialect.TextProtocols() {
		names = append(names, tp.Name())
	}
	return fmt.Errorf("tool_protocol %q: want one of %s", p, strings.Join(names, ", "))
}

// RunSpec is what a run is: model, tools and limits. It travels in history, so
// it holds only configuration — the conversation itself is in the store.
type RunSpec struct {
	Model ModelSpec `json:"model"`
	// Tools are tool ids or globs ("Calculator.*", "KV.Get@1") the model may call.
	Tools []string `json:"tools,omitempty"`
	// ToolSearch adds the best matches of a search query, resolved at start.
	ToolSearch string `json:"tool_search,omitempty"`
	// ToolProtocol is one of the Protocol* values; default native.
	ToolProtocol string `json:"tool_protocol,omitempty"`
	// Sequential asks for at most one tool call per turn (parallel calls off).
	Sequential bool `json:"sequential,omitempty"`
	// CodeMode offers the model one tool, run_program, instead of Tools: it
	// writes a Starlark program that calls them (see codemode.go).
	CodeMode bool           `json:"code_mode,omitempty"`
	Budget   Budget         `json:"budget"`
	Approval ApprovalPolicy `json:"approval"`
	// Labels are carried on events.
	Labels map[string]string `json:"labels,omitempty"`
	// IdleTimeout is how long a run that answered waits for SendMessage before
	// its workflow closes (a later SendMessage starts it again); default
	// DefaultIdleTimeout, negative closes at once.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// ContinueEveryTurns forces ContinueAsNew after that many turns in one
	// execution (0 = only when Temporal suggests it).
	ContinueEveryTurns int `json:"continue_every_turns,omitempty"`
	// Questions is QuestionsAsk ("" too) or QuestionsDecline.
	Questions string `json:"questions,omitempty"`
}

// RunInput starts (or continues) an [AgentRunWorkflow].
type RunInput struct {
	RunID     string             `json:"run_id"`
	Spec      RunSpec            `json:"spec"`
	Principal toolcall.Principal `json:"principal"`
	// InputRef names a blob of new messages (system prompt, user messages)
	// put in the store by the caller; empty when there are none.
	InputRef string `json:"input_ref,omitempty"`
	// Carry is the state a ContinueAsNew hands to the next execution.
	Carry *Carry `json:"carry,omitempty"`
	// Resume is set when SendMessage starts a completed run again: its
	// counters go on from where the run stopped (the transcript is in the
	// store), so its budgets and deadline hold across the restart.
	Resume *Resume `json:"resume,omitempty"`
	// Visibility is set when the start gave the run its search attributes
	// (orchestrator/visibility): the run then keeps their status and tools
	// up to date.
	Visibility bool `json:"visibility,omitempty"`
	// HistoryContent is what the run keeps of its content in history,
	// decided at start: "" or HistoryContentPreviews, or HistoryContentNone.
	HistoryContent string `json:"history_content,omitempty"`
}

// What a run keeps of its content (model text, tool results, its answer)
// in Temporal history.
const (
	// HistoryContentPreviews keeps the first 160 bytes of each model reply
	// and tool result in activity results and events, and the answer's in
	// the workflow result (the default).
	HistoryContentPreviews = "previews"
	// HistoryContentNone keeps no content byte in history: a sha256 (first
	// 16 bytes, hex) and the size stand in for each preview; the answer is
	// read from the transcript store.
	HistoryContentNone = "none"
)

// ValidHistoryContent checks a HistoryContent setting.
func ValidHistoryContent(v string) error {
	switch v {
	case "", HistoryContentPreviews, HistoryContentNone:
		return nil
	}
	return fmt.Errorf("history content %q: want previews or none", v)
}

// Resume is what a completed run's next execution keeps of it.
type Resume struct {
	ToolCalls int            `json:"tool_calls"`
	Usage     toolcall.Usage `json:"usage"`
	StartedAt time.Time      `json:"started_at"`
}

// Carry is the small state that crosses ContinueAsNew: counters and
// references, never messages.
type Carry struct {
	Seq       int             `json:"seq"`
	Turn      int             `json:"turn"`
	ToolCalls int             `json:"tool_calls"`
	Usage     toolcall.Usage  `json:"usage"`
	StartedAt time.Time       `json:"started_at"`
	Tools     []toolcall.Tool `json:"tools"`
	ToolsRef  string          `json:"tools_ref"`
	Failures  []Failure       `json:"failures,omitempty"`
	// Inbox are message refs sent while the previous execution was busy.
	Inbox []string `json:"inbox,omitempty"`
}

// Failure counts how often one failing call (tool + argument digest) went back
// to the model.
type Failure struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
}

// PrepareInput and PrepareResult are PrepareRun's: resolve the tools, append
// the initial messages.
type PrepareInput struct {
	RunID     string             `json:"run_id"`
	Spec      RunSpec            `json:"spec"`
	Principal toolcall.Principal `json:"principal"`
	InputRef  string             `json:"input_ref,omitempty"`
}

type PrepareResult struct {
	Tools    []toolcall.Tool `json:"tools"`
	ToolsRef string          `json:"tools_ref"`
	// Seq is the transcript length after the initial messages.
	Seq int `json:"seq"`
	// Turn is the number of model turns already in the transcript (a run
	// continued after its workflow closed).
	Turn int `json:"turn"`
}

// AppendInput appends the messages of a blob at Seq (SendMessage).
type AppendInput struct {
	RunID string `json:"run_id"`
	Seq   int    `json:"seq"`
	Ref   string `json:"ref"`
}

// ModelTurnInput asks for one model turn over the first Seq messages.
type ModelTurnInput struct {
	RunID      string    `json:"run_id"`
	Turn       int       `json:"turn"`
	Seq        int       `json:"seq"`
	Model      ModelSpec `json:"model"`
	ToolsRef   string    `json:"tools_ref"`
	Protocol   string    `json:"protocol,omitempty"`
	Sequential bool      `json:"sequential,omitempty"`
	// NoContent returns a digest and size instead of a preview.
	NoContent bool `json:"no_content,omitempty"`
}

// ModelTurnResult summarizes the assistant message appended at Seq-1.
type ModelTurnResult struct {
	// Seq is the transcript length after the assistant message.
	Seq        int            `json:"seq"`
	Calls      []CallSummary  `json:"calls,omitempty"`
	Usage      toolcall.Usage `json:"usage"`
	StopReason string         `json:"stop_reason,omitempty"`
	// Preview is the start of the reply's text (none with NoContent).
	Preview string `json:"preview,omitempty"`
	// TextSHA256 and TextBytes identify the reply's text with NoContent.
	TextSHA256 string `json:"text_sha256,omitempty"`
	TextBytes  int    `json:"text_bytes,omitempty"`
}

// CallSummary names one tool call of a turn; its arguments stay in the store.
type CallSummary struct {
	Index  int    `json:"index"`
	ID     string `json:"id"`
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// CallToolInput runs call Index of the assistant message at CallSeq and
// appends its result at ResultSeq.
type CallToolInput struct {
	RunID     string             `json:"run_id"`
	Turn      int                `json:"turn"`
	Index     int                `json:"index"`
	CallSeq   int                `json:"call_seq"`
	ResultSeq int                `json:"result_seq"`
	Tool      *toolcall.Tool     `json:"tool,omitempty"` // nil: the model named no tool of this run
	Principal toolcall.Principal `json:"principal"`
	// Approver is set when the call was approved in this run.
	Approver string `json:"approver,omitempty"`
	// Denial, when set, appends an error result with this reason and calls nothing.
	Denial string `json:"denial,omitempty"`
	// Program, when set, is a finished run_program call: its outcome is
	// appended and nothing is called.
	Program *ProgramOutcome `json:"program,omitempty"`
	// MaxAttempts mirrors the activity's retry policy, so the last attempt
	// turns a retryable failure into an error result instead of failing.
	MaxAttempts int `json:"max_attempts"`
	// NoContent returns a digest and size instead of a preview.
	NoContent bool `json:"no_content,omitempty"`
	// AskPeople declares that the run's people answer a tool's questions
	// (elicitation); a question then comes back as CallToolResult.Asked.
	AskPeople bool `json:"ask_people,omitempty"`
	// Answers (MCP ElicitResults by the tool's keys) and RequestState answer
	// the round of questions before.
	Answers      map[string]string `json:"answers,omitempty"`
	RequestState string            `json:"request_state,omitempty"`
	// Unanswered, when set, appends an error result saying why the tool's
	// question got no answer, and calls nothing.
	Unanswered string `json:"unanswered,omitempty"`
}

// CallToolResult summarizes the appended tool result.
type CallToolResult struct {
	Kind    toolcall.Kind `json:"kind"`
	IsError bool          `json:"is_error,omitempty"`
	// Preview is the start of the content the model sees (none with NoContent).
	Preview string `json:"preview,omitempty"`
	// ContentSHA256 and ContentBytes identify that content with NoContent.
	ContentSHA256 string        `json:"content_sha256,omitempty"`
	ContentBytes  int           `json:"content_bytes,omitempty"`
	Duration      time.Duration `json:"duration,omitempty"`
	// Ref names the full result in the object store when it was too large to inline.
	Ref string `json:"ref,omitempty"`
	// Asked, when set, is the tool's round of questions: nothing was
	// appended; the call is made again with the answers.
	Asked *toolcall.Asked `json:"asked,omitempty"`
}

// SendMessageInput is SendMessage's argument: a blob of user messages put in
// the store by the caller.
type SendMessageInput struct {
	Ref string `json:"ref"`
	// Principal, when set, is whom the run's tool calls run as from now on:
	// its starter with the scopes recorded at the start cut to those the
	// sender holds now (Runs.SendMessageAs), the same principal a closed run
	// is started again with. Nil (messages of older clients) keeps the run's.
	Principal *toolcall.Principal `json:"principal,omitempty"`
}

// RunState is what GetRun returns.
type RunState struct {
	RunID     string             `json:"run_id"`
	Status    string             `json:"status"`
	Turn      int                `json:"turn"`
	ToolCalls int                `json:"tool_calls"`
	Usage     toolcall.Usage     `json:"usage"`
	Seq       int                `json:"seq"`
	Pending   []toolcall.Pending `json:"pending,omitempty"`
	// Questions are the tools' questions waiting for an answer.
	Questions []toolcall.Question `json:"questions,omitempty"`
	// Answer is the preview of the last answer (none when the run keeps
	// content out of history: then AnswerSHA256 and AnswerBytes identify it,
	// and the answer is the transcript's message at Seq-1).
	Answer       string    `json:"answer,omitempty"`
	AnswerSHA256 string    `json:"answer_sha256,omitempty"`
	AnswerBytes  int       `json:"answer_bytes,omitempty"`
	Failure      string    `json:"failure,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	// Idle is true while a run that answered waits for SendMessage.
	Idle bool `json:"idle,omitempty"`
}
