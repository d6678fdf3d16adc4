package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// Runs starts and steers agent runs from a Temporal client: the one place
// that knows workflow ids, update names and how inputs reach the store. The
// AgentService, the CLI and the tests use it.
type Runs struct {
	Temporal  client.Client
	Store     *runstore.Store
	TaskQueue string // default ids.TaskQueue
	// Visibility, when set, says whether starts may give runs their search
	// attributes and memo (orchestrator/visibility); nil: they get none.
	Visibility *visibility.Checker
	// HistoryContent is what the runs this starts keep of their content in
	// Temporal history: HistoryContentPreviews or HistoryContentNone; ""
	// takes the orchestrator's setting from the store (a gateway's Runs). It
	// is decided at each start and travels in RunInput.
	HistoryContent string
}

// historyContent is r.HistoryContent, or the orchestrator's setting in the
// store when it is empty.
func (r *Runs) historyContent(ctx context.Context) (string, error) {
	if r.HistoryContent != "" {
		return r.HistoryContent, nil
	}
	return r.Store.HistoryContent(ctx)
}

// ErrCodeModeContent refuses a code-mode run when history must hold no
// content: a program's source and result pass through history.
var ErrCodeModeContent = errors.New("agent: code mode is not available while the orchestrator keeps content out of history (--history-content=none)")

// startOptions are the options of a start of in: search attributes and a
// memo when the namespace has them (then in.Visibility is set, so the run
// keeps them up to date).
func (r *Runs) startOptions(ctx context.Context, in *RunInput, reuse enumspb.WorkflowIdReusePolicy) client.StartWorkflowOptions {
	opts := client.StartWorkflowOptions{
		ID:                       in.RunID,
		TaskQueue:                r.queue(),
		WorkflowIDReusePolicy:    reuse,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
	if r.Visibility == nil || !r.Visibility.Available(ctx) {
		return opts
	}
	in.Visibility = true
	model := in.Spec.Model.Spec.Provider + ":" + in.Spec.Model.Spec.Name
	opts.TypedSearchAttributes = visibility.StartAttributes(in.Principal.Subject, visibility.KindRun, model)
	// Readable in the Temporal UI: what the run is, never what it says.
	opts.Memo = map[string]any{"kind": visibility.KindRun, "principal": in.Principal.Subject, "model": model,
		"tools": in.Spec.Tools, "code_mode": in.Spec.CodeMode}
	return opts
}

func (r *Runs) queue() string {
	if r.TaskQueue != "" {
		return r.TaskQueue
	}
	return ids.TaskQueue
}

// ErrRunIDTaken means the id names another principal's run, or a workflow
// that is not a run (a program): runs and programs never share an id.
var ErrRunIDTaken = errors.New("agent: run id taken")

// ErrNotFound means no run (or no message or answer of a run) was recorded
// under an id. It is the run store's sentinel (runstore.ErrNotFound), so
// errors.Is matches either name.
var ErrNotFound = runstore.ErrNotFound

// ErrRunSpecDiffers means a start repeated a run id with another spec: a
// repeat is idempotent only when it is the same start.
var ErrRunSpecDiffers = errors.New("agent: the run was started with another spec")

// workflowType is the type of the workflow with id (its latest execution),
// "" when there is none.
func (r *Runs) workflowType(ctx context.Context, id string) (string, error) {
	desc, err := r.Temporal.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("agent: describe %s: %w", id, err)
	}
	return desc.GetWorkflowExecutionInfo().GetType().GetName(), nil
}

// notARun refuses an id whose workflow exists and is not an agent run.
func (r *Runs) notARun(ctx context.Context, id string) error {
	typ, err := r.workflowType(ctx, id)
	if err != nil {
		return err
	}
	if typ != "" && typ != WorkflowName {
		return fmt.Errorf("%w: %s", ErrRunIDTaken, id)
	}
	return nil
}

// runMeta is what SendMessage needs to start a closed run again.
type runMeta struct {
	Spec      RunSpec            `json:"spec"`
	Principal toolcall.Principal `json:"principal"`
	// Kind is runstore.KindProgram for a program's record (HoldProgram): the id is
	// not a run's, and what it stores counts as a program's.
	Kind string `json:"kind,omitempty"`
}

// Start starts run runID (generated when empty) with msgs as its first
// messages (a system message carries the system prompt). Starting a run that
// is still running returns its id again: the run id is an idempotency key of
// its starter, for the same spec ([ErrRunSpecDiffers] otherwise). An id that
// names another principal's run or a workflow of another type (a program) is
// [ErrRunIDTaken]: a start never attaches to it.
func (r *Runs) Start(ctx context.Context, runID string, spec RunSpec, p toolcall.Principal, msgs ...*toolfleetv1.Message) (string, error) {
	if runID == "" {
		runID = ids.NewRun()
	}
	if err := ValidRunID(runID); err != nil {
		return "", err
	}
	if err := r.notARun(ctx, runID); err != nil {
		return "", err
	}
	hc, err := r.historyContent(ctx)
	if err != nil {
		return "", err
	}
	if spec.CodeMode && hc == HistoryContentNone {
		return "", ErrCodeModeContent
	}
	// Ownership first: nothing is stored for an id the caller may not use.
	repeat := true
	switch err := r.sameStart(ctx, runID, spec, p); {
	case errors.Is(err, ErrNotFound):
		repeat = false
	case err != nil:
		return "", err
	}
	var input []byte
	if len(msgs) > 0 {
		var err error
		if input, err = runstore.EncodeMessages(msgs...); err != nil {
			return "", err
		}
	}
	// Then the quota, before anything is stored: a repeat of a start holds
	// nothing new.
	if !repeat {
		if err := r.Store.Admit(ctx, p.Subject, runID, int64(len(input))); err != nil {
			return "", err
		}
	}
	meta, err := json.Marshal(runMeta{Spec: spec, Principal: p})
	if err != nil {
		return "", fmt.Errorf("agent: encode run: %w", err)
	}
	created, err := r.Store.PutMeta(ctx, runID, meta)
	if err != nil {
		return "", err
	}
	if !created {
		// Another start took the id since the check above.
		if err := r.sameStart(ctx, runID, spec, p); err != nil {
			return "", err
		}
	}
	// The run's data is freed once it has been closed for the retention.
	if err := r.Store.Arm(ctx, runID); err != nil {
		return "", err
	}
	in := RunInput{RunID: runID, Spec: spec, Principal: p, HistoryContent: hc}
	if len(msgs) > 0 {
		ref, err := r.Store.PutMessages(ctx, runID, msgs...)
		if err != nil {
			return "", err
		}
		in.InputRef = ref
	}
	_, err = r.Temporal.ExecuteWorkflow(ctx, r.startOptions(ctx, &in, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE), WorkflowName, in)
	if err != nil {
		return "", fmt.Errorf("agent: start run %s: %w", runID, err)
	}
	// A program may have taken the id between the check above and the
	// start, which then attached to it: refuse, and give the id back.
	if err := r.notARun(ctx, runID); err != nil {
		if created {
			_ = r.Store.DeleteMeta(ctx, runID)
		}
		return "", err
	}
	return runID, nil
}

// sameStart checks that a start of runID by p with spec repeats the start
// recorded for it: a run id is an idempotency key of its starter only
// ([ErrRunIDTaken]), and only for the same spec ([ErrRunSpecDiffers]).
// [ErrNotFound] means no run was recorded under runID.
func (r *Runs) sameStart(ctx context.Context, runID string, spec RunSpec, p toolcall.Principal) error {
	stored, err := r.meta(ctx, runID)
	if err != nil {
		return err
	}
	if stored.Principal.Subject != p.Subject {
		return fmt.Errorf("%w: %s", ErrRunIDTaken, runID)
	}
	if was, err := json.Marshal(stored.Spec); err != nil || string(was) != string(mustJSON(spec)) {
		return fmt.Errorf("%w: %s", ErrRunSpecDiffers, runID)
	}
	return nil
}

// mustJSON encodes a spec (plain data: it cannot fail).
func mustJSON(spec RunSpec) []byte {
	b, _ := json.Marshal(spec)
	return b
}

// meta reads what runID was started with.
func (r *Runs) meta(ctx context.Context, runID string) (runMeta, error) {
	b, err := r.Store.Meta(ctx, runID)
	if err != nil {
		return runMeta{}, err
	}
	var meta runMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return runMeta{}, fmt.Errorf("agent: decode run %s: %w", runID, err)
	}
	if meta.Kind == runstore.KindProgram { // a program's record: no run of that id
		return runMeta{}, fmt.Errorf("%w: run %s", ErrNotFound, runID)
	}
	return meta, nil
}

// ErrRunClosed means a message went to a run that ended for good: a failed
// or cancelled run, or one whose budget or deadline is spent, stays closed.
var ErrRunClosed = errors.New("agent: the run is closed")

// SendMessage appends msgs to the conversation and starts the next turn, as
// the run's starter with the scopes it was started with; see [Runs.SendMessageAs].
func (r *Runs) SendMessage(ctx context.Context, runID string, msgs ...*toolfleetv1.Message) error {
	return r.SendMessageAs(ctx, runID, nil, msgs...)
}

// SendMessageAs appends msgs to the conversation and starts the next turn.
// Every continuation runs as the recorded principal with its scopes cut to
// caller's when caller is the starter (a scope taken away since is not used
// again): a running run (waiting idle, or mid-turn) from the Update on, a
// closed one from its new execution. A run whose workflow completed is
// started again on its transcript (Update-with-Start) with its turn,
// tool-call and token counters and its start time (so its deadline); a
// failed or cancelled run, or one whose budget or deadline is spent, is
// [ErrRunClosed]. A message is either delivered or refused: one sent while
// the run is ending is tried again on the closed run.
func (r *Runs) SendMessageAs(ctx context.Context, runID string, caller *toolcall.Principal, msgs ...*toolfleetv1.Message) error {
	if err := ValidRunID(runID); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return errors.New("agent: no message to send")
	}
	meta, err := r.meta(ctx, runID)
	if err != nil {
		return err
	}
	p := continuedAs(meta.Principal, caller)
	hc, err := r.historyContent(ctx)
	if err != nil {
		return err
	}
	ref, stored := "", false
	for attempt := 0; ; attempt++ {
		desc, err := r.Temporal.DescribeWorkflowExecution(ctx, runID, "")
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			return fmt.Errorf("agent: describe %s: %w", runID, err)
		}
		info := desc.GetWorkflowExecutionInfo()
		// A closed run is started again under its id; never a workflow of
		// another type that holds the id now.
		if info != nil && info.GetType().GetName() != WorkflowName {
			return fmt.Errorf("%w: %s", ErrRunIDTaken, runID)
		}
		in := RunInput{RunID: runID, Spec: meta.Spec, Principal: p, HistoryContent: hc}
		running := info != nil && info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		if info != nil && !running {
			if in.Resume, err = r.resume(ctx, runID, meta.Spec, info.GetStatus()); err != nil {
				return err
			}
		}
		if !stored { // only for a run that may take it, within its starter's quota
			b, err := runstore.EncodeMessages(msgs...)
			if err != nil {
				return err
			}
			if err := r.Store.Admit(ctx, meta.Principal.Subject, runID, int64(len(b))); err != nil {
				return err
			}
			if err := r.Store.Arm(ctx, runID); err != nil {
				return err
			}
			if ref, err = r.Store.PutMessages(ctx, runID, msgs...); err != nil {
				return err
			}
			stored = true
		}
		err = r.deliver(ctx, runID, in, ref, running)
		var nfe *serviceerror.NotFound
		if running && attempt == 0 && errors.As(err, &nfe) {
			continue // the run closed in between: deliver to the closed run
		}
		return err
	}
}

// continuedAs is the principal a continuation of a run started by started
// runs as: started with its scopes cut to those caller holds now when caller
// is the starter (a scope taken away since is not used again); started
// itself for anyone else (an admin, or no caller with auth off).
func continuedAs(started toolcall.Principal, caller *toolcall.Principal) toolcall.Principal {
	p := started
	p.Scopes = slices.Clone(started.Scopes)
	if caller != nil && caller.Subject == p.Subject {
		p.Scopes = slices.DeleteFunc(p.Scopes, func(s string) bool { return !slices.Contains(caller.Scopes, s) })
	}
	return p
}

// deliver sends the SendMessage Update: to the running execution only when
// running (never starting a fresh one beside its counters), else with a start
// of in. Either way the run goes on as in.Principal: the Update carries it to
// a running execution, the start input to a new one.
func (r *Runs) deliver(ctx context.Context, runID string, in RunInput, ref string, running bool) error {
	p := in.Principal
	upd := client.UpdateWorkflowOptions{WorkflowID: runID, UpdateName: UpdateSendMessage, Args: []any{SendMessageInput{Ref: ref, Principal: &p}},
		WaitForStage: client.WorkflowUpdateStageCompleted}
	if running {
		h, err := r.Temporal.UpdateWorkflow(ctx, upd)
		if err != nil {
			return fmt.Errorf("agent: send message to %s: %w", runID, err)
		}
		return h.Get(ctx, nil)
	}
	upd.WorkflowID = ""
	op := r.Temporal.NewWithStartWorkflowOperation(r.startOptions(ctx, &in, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE), WorkflowName, in)
	h, err := r.Temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: op, UpdateOptions: upd})
	if err != nil {
		return fmt.Errorf("agent: send message to %s: %w", runID, err)
	}
	return h.Get(ctx, nil)
}

// resume is what a closed run's next execution keeps: its counters, when it
// completed with budget and deadline left ([ErrRunClosed] otherwise). A run
// whose workflow never started (its start failed) has nothing to keep.
func (r *Runs) resume(ctx context.Context, runID string, spec RunSpec, status enumspb.WorkflowExecutionStatus) (*Resume, error) {
	if status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		return nil, fmt.Errorf("%w: %s ended %s", ErrRunClosed, runID, strings.ToLower(strings.TrimPrefix(status.String(), "WorkflowExecutionStatus")))
	}
	var st RunState
	if err := r.Temporal.GetWorkflow(ctx, runID, "").Get(ctx, &st); err != nil {
		return nil, fmt.Errorf("agent: result of %s: %w", runID, err)
	}
	if st.Status != StatusCompleted {
		return nil, fmt.Errorf("%w: %s ended %s (%s)", ErrRunClosed, runID, st.Status, st.Failure)
	}
	if time.Since(st.StartedAt) >= orDefault(spec.Budget.Deadline, DefaultDeadline) {
		return nil, fmt.Errorf("%w: %s is past its deadline", ErrRunClosed, runID)
	}
	return &Resume{ToolCalls: st.ToolCalls, Usage: st.Usage, StartedAt: st.StartedAt}, nil
}

// Decide grants or denies a pending call; the workflow's validator rejects
// unknown and already decided calls.
func (r *Runs) Decide(ctx context.Context, runID string, d toolcall.Decision) error {
	h, err := r.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: runID, UpdateName: UpdateDecideApproval,
		Args: []any{d}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return fmt.Errorf("agent: decide %s: %w", d.CallID, err)
	}
	return h.Get(ctx, nil)
}

// Cancel cancels the run; in-flight activities are cancelled.
func (r *Runs) Cancel(ctx context.Context, runID string) error {
	if err := r.Temporal.CancelWorkflow(ctx, runID, ""); err != nil {
		return fmt.Errorf("agent: cancel %s: %w", runID, err)
	}
	return nil
}

// Get returns the run's state (a Query; it works on closed runs too).
func (r *Runs) Get(ctx context.Context, runID string) (RunState, error) {
	v, err := r.Temporal.QueryWorkflow(ctx, runID, "", QueryGetRun)
	if err != nil {
		return RunState{}, fmt.Errorf("agent: get %s: %w", runID, err)
	}
	var st RunState
	if err := v.Get(&st); err != nil {
		return RunState{}, fmt.Errorf("agent: decode run state: %w", err)
	}
	return st, nil
}

// Transcript returns the run's whole conversation.
func (r *Runs) Transcript(ctx context.Context, runID string) ([]*toolfleetv1.Message, error) {
	return r.Store.Load(ctx, runID, -1)
}

// Principal returns who started runID ([ErrNotFound] for an unknown run).
func (r *Runs) Principal(ctx context.Context, runID string) (toolcall.Principal, error) {
	meta, err := r.meta(ctx, runID)
	return meta.Principal, err
}

// CallArguments returns the arguments of call index of the assistant
// message at seq (for showing a pending approval).
func (r *Runs) CallArguments(ctx context.Context, runID string, seq, index int) (*structpb.Struct, error) {
	m, err := r.Store.At(ctx, runID, seq)
	if err != nil {
		return nil, err
	}
	calls := llm.ToolCalls(m)
	if index >= len(calls) {
		return nil, fmt.Errorf("%w: call %d of message %d", ErrNotFound, index, seq)
	}
	return calls[index].GetArguments(), nil
}

// Answer returns the text of the answer st names: st.Answer, or, for a run
// that keeps content out of history (st.AnswerSHA256 set), the transcript's
// assistant message whose text has that digest (the last one that does).
func (r *Runs) Answer(ctx context.Context, st RunState) (string, error) {
	if st.AnswerSHA256 == "" {
		return st.Answer, nil
	}
	if m, err := r.Store.At(ctx, st.RunID, st.Seq-1); err == nil && m != nil {
		if text := llm.MessageText(m); contentDigest(text) == st.AnswerSHA256 {
			return text, nil
		}
	}
	msgs, err := r.Store.Load(ctx, st.RunID, -1)
	if err != nil {
		return "", err
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].GetRole() != toolfleetv1.Role_ROLE_ASSISTANT {
			continue
		}
		if text := llm.MessageText(msgs[i]); contentDigest(text) == st.AnswerSHA256 {
			return text, nil
		}
	}
	return "", fmt.Errorf("%w: the answer of %s", ErrNotFound, st.RunID)
}
