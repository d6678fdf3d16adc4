package program

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
)

// Programs starts and steers programs from a Temporal client: the one place
// that knows workflow ids, the query and the update. ProgramService and the
// tests use it.
type Programs struct {
	Temporal  client.Client
	TaskQueue string // default ids.TaskQueue
	// Visibility, when set, says whether starts may give programs their
	// search attributes (orchestrator/visibility); nil: they get none.
	Visibility *visibility.Checker
	// Config is the operator's configuration of programs; its
	// NoContentInHistory is given to every program this starts. The
	// Temporal client needs the matching ExternalStorage(…, Config).
	Config Config
	// Quota, when set, holds each new program's values within its owner's
	// byte quota and frees them with it (valuequota.go); a start of an
	// owner over the quota is refused with a *QuotaError.
	Quota ValueQuota
}

// Outcome statuses besides StatusRunning and StatusWaitingApproval.
const (
	StatusCompleted = "COMPLETED"
	StatusFailed    = "FAILED"
	StatusCanceled  = "CANCELED"
)

// memoOwner is the memo key holding the subject that started a program, so
// reads can be confined to it without loading history.
const memoOwner = "owner"

// OwnerMemo is the memo of a program started by subject other than through
// [Programs.Start] (a code-mode run's child): it makes subject its owner.
func OwnerMemo(subject string) map[string]any { return map[string]any{memoOwner: subject} }

// memoSpec is the memo key holding the hash of what a program was started
// with (specHash), so a repeated start can be told from a different one.
const memoSpec = "spec"

// ErrProgramIDTaken is returned when a program id is already used by another subject.
var ErrProgramIDTaken = errors.New("program: the program id is taken")

// ErrProgramSpecDiffers is returned when a start repeats a program id of its
// starter with another spec (source, inputs, tools or limits): a repeat is
// idempotent only when it is the same start.
var ErrProgramSpecDiffers = errors.New("program: the program was started with another spec")

// ErrNotFound is returned for a program id that names no program.
var ErrNotFound = errors.New("program: no such program")

// Status is a program's state, and its outcome once it ended.
type Status struct {
	ProgramID string
	// Owner is the subject that started the program.
	Owner string
	// Status is one of the Status* values.
	Status string
	// Output is set when the program completed.
	Output *Output
	// Error is set when it failed.
	Error *ProgramError
	// State is the live state while it runs.
	State *State
}

// Done reports whether the program ended.
func (s *Status) Done() bool {
	return s.Status == StatusCompleted || s.Status == StatusFailed || s.Status == StatusCanceled
}

// InputError is a program that cannot start as given (its id or limits).
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func (p *Programs) queue() string {
	if p.TaskQueue != "" {
		return p.TaskQueue
	}
	return ids.TaskQueue
}

// Start checks in (limits, syntax) and starts the program; the id is
// generated when empty. Starting an id that is still running returns it
// again: the program id is an idempotency key. A syntax error is returned as
// a *ProgramError before anything starts.
func (p *Programs) Start(ctx context.Context, in Input) (string, error) {
	if in.ProgramID == "" {
		in.ProgramID = ids.NewProgram()
	}
	if err := ValidProgramID(in.ProgramID); err != nil {
		return "", &InputError{err}
	}
	lim, err := in.Limits.WithDefaults()
	if err != nil {
		return "", &InputError{err}
	}
	if c := p.Config.ScriptMemoryCeiling(); c > 0 && lim.MaxMemoryBytes > c {
		return "", &InputError{fmt.Errorf("program: %s %d (%s) is over the script memory of this replica, %d (%s)",
			LimitMemory, lim.MaxMemoryBytes, human(uint64(lim.MaxMemoryBytes)), c, human(uint64(c)))}
	}
	if _, err := Compile(in.Filename, in.Source); err != nil {
		return "", err
	}
	spec := specHash(in)
	// A start never attaches to a workflow it may not use: another
	// principal's program, a program started with another spec, or a
	// workflow that is not a program (an agent run).
	switch err := p.sameStart(ctx, in, spec); {
	case errors.Is(err, errNoWorkflow):
		// A new program: its values count against its owner's quota.
		if p.Quota != nil {
			if err := p.Quota.HoldProgram(ctx, in.Principal.Subject, in.ProgramID); err != nil {
				if refusedStorage(err) {
					return "", &QuotaError{Err: err}
				}
				return "", fmt.Errorf("program: hold %s: %w", in.ProgramID, err)
			}
		}
	case err != nil:
		return "", err
	}
	// After specHash: an operator setting, not part of what the caller asked.
	in.NoContentInHistory = p.Config.NoContentInHistory
	opts := client.StartWorkflowOptions{
		ID: in.ProgramID,
		// The server ends the program after this even if its workflow
		// task can never finish (a worker that keeps crashing on it).
		WorkflowExecutionTimeout: ExecutionTimeout(lim),
		Memo:                     map[string]any{memoOwner: in.Principal.Subject, memoSpec: spec},
		TaskQueue:                p.queue(),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}
	if p.Visibility != nil && p.Visibility.Available(ctx) {
		// After specHash: whether a start had them is not part of its spec.
		in.Visibility = true
		opts.TypedSearchAttributes = visibility.StartAttributes(in.Principal.Subject, visibility.KindProgram, "")
		opts.Memo["kind"], opts.Memo["tools"] = visibility.KindProgram, in.Tools
	}
	_, err = p.Temporal.ExecuteWorkflow(ctx, opts, WorkflowName, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && isStoreFull(err) {
		// The input could not be stored (valuestore.go): say so plainly.
		return "", &QuotaError{Err: err}
	}
	if err != nil && !errors.As(err, &started) {
		return "", fmt.Errorf("program: start %s: %w", in.ProgramID, err)
	}
	// Another start may have taken the id since the check above: a repeat
	// is idempotent for its starter and spec only, never a window on
	// someone else's program.
	if err := p.sameStart(ctx, in, spec); err != nil {
		if errors.Is(err, errNoWorkflow) {
			return "", fmt.Errorf("program: start %s: the workflow is gone", in.ProgramID)
		}
		return "", err
	}
	return in.ProgramID, nil
}

// errNoWorkflow means no workflow holds a program id yet.
var errNoWorkflow = errors.New("program: no workflow")

// sameStart checks that starting in repeats the start recorded under its id:
// [ErrProgramIDTaken] when the id holds another principal's program or a
// workflow that is not a program, [ErrProgramSpecDiffers] when the program
// was started with another spec, errNoWorkflow when the id is free.
func (p *Programs) sameStart(ctx context.Context, in Input, spec string) error {
	desc, err := p.Temporal.DescribeWorkflowExecution(ctx, in.ProgramID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return errNoWorkflow
	}
	if err != nil {
		return fmt.Errorf("program: describe %s: %w", in.ProgramID, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	if info.GetType().GetName() != WorkflowName {
		return fmt.Errorf("%w: %s", ErrProgramIDTaken, in.ProgramID)
	}
	fields := info.GetMemo().GetFields()
	if memoString(fields[memoOwner]) != in.Principal.Subject {
		return fmt.Errorf("%w: %s", ErrProgramIDTaken, in.ProgramID)
	}
	// Programs started before the spec was recorded have none to compare.
	if was := memoString(fields[memoSpec]); was != "" && was != spec {
		return fmt.Errorf("%w: %s", ErrProgramSpecDiffers, in.ProgramID)
	}
	return nil
}

// memoString decodes a string memo field ("" when absent or not a string).
func memoString(f *commonpb.Payload) string {
	var s string
	if f != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(f, &s)
	}
	return s
}

// specHash is what a start asks for, without its id and starter: the script,
// its inputs, tools, limits and approval policy. Two starts of one id must
// agree on it.
func specHash(in Input) string {
	in.ProgramID, in.Principal = "", toolcall.Principal{}
	b, _ := json.Marshal(in) // plain data: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Get returns a program's status: the live state while it runs, the outcome
// once it ended. It never waits for the program.
func (p *Programs) Get(ctx context.Context, id string) (*Status, error) {
	owner, status, err := p.describe(ctx, id)
	if err != nil {
		return nil, err
	}
	st, err := p.status(ctx, id, status)
	if st != nil {
		st.Owner = owner
	}
	return st, err
}

// Owner returns the subject that started program id.
func (p *Programs) Owner(ctx context.Context, id string) (string, error) {
	owner, _, err := p.describe(ctx, id)
	return owner, err
}

// describe returns a program's owner and workflow status.
func (p *Programs) describe(ctx context.Context, id string) (string, enumspb.WorkflowExecutionStatus, error) {
	desc, err := p.Temporal.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return "", 0, ErrNotFound
	}
	if err != nil {
		return "", 0, fmt.Errorf("program: describe %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	if info.GetType().GetName() != WorkflowName {
		return "", 0, ErrNotFound
	}
	return memoString(info.GetMemo().GetFields()[memoOwner]), info.GetStatus(), nil
}

func (p *Programs) status(ctx context.Context, id string, status enumspb.WorkflowExecutionStatus) (*Status, error) {
	switch status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		v, err := p.Temporal.QueryWorkflow(ctx, id, "", QueryGetProgram)
		if err != nil {
			return nil, fmt.Errorf("program: query %s: %w", id, err)
		}
		var st State
		if err := v.Get(&st); err != nil {
			return nil, fmt.Errorf("program: query %s: %w", id, err)
		}
		return &Status{ProgramID: id, Status: st.Status, State: &st}, nil
	default:
		// The program ended, so its result is in history: this does not wait.
		return p.outcome(ctx, id)
	}
}

// Wait waits for the program's outcome until ctx ends.
func (p *Programs) Wait(ctx context.Context, id string) (*Status, error) {
	return p.outcome(ctx, id)
}

func (p *Programs) outcome(ctx context.Context, id string) (*Status, error) {
	var out Output
	err := p.Temporal.GetWorkflow(ctx, id, "").Get(ctx, &out)
	st := &Status{ProgramID: id}
	var ae *temporal.ApplicationError
	var ce *temporal.CanceledError
	var te *temporal.TerminatedError
	var tmo *temporal.TimeoutError
	var nf *serviceerror.NotFound
	switch {
	case err == nil:
		st.Status, st.Output = StatusCompleted, &out
	case errors.As(err, &ae) && ae.Type() == ErrorType:
		st.Status, st.Error = StatusFailed, &ProgramError{}
		if derr := ae.Details(st.Error); derr != nil {
			st.Error = &ProgramError{Kind: "internal", Message: ae.Message()}
		}
	case errors.As(err, &ce):
		st.Status = StatusCanceled
	case errors.As(err, &te), errors.As(err, &tmo):
		st.Status, st.Error = StatusFailed, &ProgramError{Kind: "internal", Message: "the program was stopped by the platform"}
	case errors.As(err, &nf):
		return nil, ErrNotFound
	case ctx.Err() != nil:
		return nil, ctx.Err()
	default:
		return nil, fmt.Errorf("program: outcome of %s: %w", id, err)
	}
	return st, nil
}

// Decide grants or denies a call waiting for approval; the workflow's
// validator rejects unknown and already decided calls.
func (p *Programs) Decide(ctx context.Context, id string, d toolcall.Decision) error {
	h, err := p.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: UpdateDecideApproval,
		WaitForStage: client.WorkflowUpdateStageCompleted, Args: []any{d}})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("program: decide %s on %s: %w", d.CallID, id, err)
	}
	return nil
}

// Cancel cancels a running program.
func (p *Programs) Cancel(ctx context.Context, id string) error {
	err := p.Temporal.CancelWorkflow(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("program: cancel %s: %w", id, err)
	}
	return nil
}

// Summary is one program in a listing.
type Summary struct {
	ProgramID string
	// State is Temporal's: Running, Completed, Failed, Canceled, ...
	State string
	// Status is the ToolfleetStatus search attribute; "" without attributes.
	Status              string
	StartedAt, ClosedAt time.Time
}

// listedStatus is what a listing says a program in Temporal state is doing:
// its ToolfleetStatus attribute, unless Temporal closed it while the
// attribute still says it runs (timed out, terminated: the workflow had no
// say); then what GetProgram says of it: failed, canceled or completed.
func listedStatus(state enumspb.WorkflowExecutionStatus, attr string) string {
	if attr != visibility.StatusRunning && attr != visibility.StatusWaiting && attr != visibility.StatusWaitingInput {
		return attr
	}
	switch state {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return attr
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return visibility.StatusDone
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return visibility.StatusCanceled
	}
	return visibility.StatusFailed // timed out, terminated, failed
}

// listScans bounds the Temporal pages one List reads to fill a page.
const listScans = 10

// ListFilter narrows a listing (all optional, combined with AND). Status
// is a visibility status word (visibility.Status*); the values are checked
// by the query builder, never escaped into the query.
type ListFilter struct {
	Status, Tool, StartedBy string
	StartedAfter, Before    time.Time
}

// ErrNoAttributes refuses a filter the namespace cannot answer: programs
// then have no search attributes.
var ErrNoAttributes = errors.New("this filter needs the programs' search attributes, which the Temporal namespace does not have (the orchestrator registers them when it may)")

// attributes reports whether f needs the search attributes.
func (f ListFilter) attributes() bool { return f.Status != "" || f.Tool != "" || f.StartedBy != "" }

// query is the visibility query of a listing with f.
func (f ListFilter) query() (string, error) {
	q := visibility.NewQuery(WorkflowName)
	if f.Status != "" {
		q.Status(f.Status)
	}
	if f.Tool != "" {
		q.Is(visibility.Tools.GetName(), f.Tool)
	}
	if f.StartedBy != "" {
		q.Is(visibility.Principal.GetName(), f.StartedBy)
	}
	return q.StartedAfter(f.StartedAfter).StartedBefore(f.Before).String()
}

// List returns up to size programs, newest first, started by owner (every
// program when all is set) and matching f, and the token of the next page
// (nil at the end). Ownership is in each program's memo, so a page is
// filled from as many Temporal pages as it takes, up to listScans; among
// many tenants a page may come back short with a token, as AIP-158 allows.
// A bad filter value wraps visibility.ErrFilterValue; an attribute filter
// without search attributes is ErrNoAttributes.
func (p *Programs) List(ctx context.Context, owner string, all bool, size int, page []byte, f ListFilter) ([]Summary, []byte, error) {
	if f.attributes() && (p.Visibility == nil || !p.Visibility.Available(ctx)) {
		return nil, nil, ErrNoAttributes
	}
	query, err := f.query()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", visibility.ErrFilterValue, err)
	}
	// A page token is checked before Temporal sees it (visibility.OpenPage):
	// one this listing did not issue (or issued for other filters) is
	// visibility.ErrPageToken, at once.
	view := visibility.PageView("programs", owner, all, query)
	token, err := visibility.OpenPage(view, page)
	if err != nil {
		return nil, nil, err
	}
	if !all && owner == "" {
		return nil, nil, nil // no subject owns nothing (a memo without owner is not theirs)
	}
	var out []Summary
	for scan := 0; scan < listScans && len(out) < size; scan++ {
		resp, err := p.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			PageSize: int32(size - len(out)), NextPageToken: token, Query: query})
		if visibility.BadPageToken(err) {
			return nil, nil, visibility.ErrPageToken
		}
		if err != nil {
			return nil, nil, fmt.Errorf("program: list: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			if !all && memoString(e.GetMemo().GetFields()[memoOwner]) != owner {
				continue
			}
			s := Summary{ProgramID: e.GetExecution().GetWorkflowId(), StartedAt: e.GetStartTime().AsTime(),
				State:  strings.TrimPrefix(e.GetStatus().String(), "WorkflowExecutionStatus"),
				Status: listedStatus(e.GetStatus(), memoString(e.GetSearchAttributes().GetIndexedFields()[visibility.Status.GetName()]))}
			if e.GetCloseTime() != nil {
				s.ClosedAt = e.GetCloseTime().AsTime()
			}
			out = append(out, s)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, nil, nil
		}
	}
	return out, visibility.SealPage(view, token), nil
}
