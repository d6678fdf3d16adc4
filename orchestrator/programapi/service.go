package programapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
)

// Scopes of ProgramService.
const (
	ScopeRun     = "programs:run"
	ScopeRead    = "programs:read"
	ScopeApprove = "programs:approve"
	// ScopeAdmin reads and steers every subject's programs.
	ScopeAdmin = "programs:admin"
)

// authorize authenticates the request and checks scope. With auth off (dev on
// loopback) the anonymous caller holds every scope.
func (s *Service) authorize(ctx context.Context, h http.Header, scope string) (apibase.Caller, error) {
	return apibase.Authorize(ctx, s.Auth, h, scope)
}

// sees reports whether c may read or steer a program started by owner: its
// starter, an admin, or anyone with auth off.
func sees(c apibase.Caller, owner string) bool { return c.Sees(owner, ScopeAdmin) }

// Service implements ProgramService (Connect, gRPC and HTTP JSON through the
// gateway's mount) over [program.Programs].
type Service struct {
	Programs *program.Programs
	// Events is the JetStream holding run events (WatchProgram).
	Events jetstream.JetStream
	// Auth authenticates callers from their headers, as for the AgentService; required.
	Auth apibase.Authenticator
	// Triggers lists the configured triggers (ListTriggers); nil lists none.
	Triggers func() []*toolfleetv1.Trigger
	// MaxWait bounds RunProgram with wait set when the request has no
	// deadline. Default 5 minutes.
	MaxWait time.Duration
}

var _ toolfleetv1connect.ProgramServiceHandler = (*Service)(nil)

// RunProgram starts a program, and with wait returns its outcome.
func (s *Service) RunProgram(ctx context.Context, req *connect.Request[toolfleetv1.RunProgramRequest]) (*connect.Response[toolfleetv1.RunProgramResponse], error) {
	c, err := s.authorize(ctx, req.Header(), ScopeRun)
	if err != nil {
		return nil, err
	}
	p := toolcall.Principal{Subject: c.Subject, Scopes: c.Scopes}
	m := req.Msg
	if len(m.GetSource()) > program.MaxSourceBytes {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("source is over %d bytes", program.MaxSourceBytes))
	}
	if n := m.GetLimits().GetMaxSteps(); n < 0 { // limitsOf would take it for the default
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("limits.%s %d is negative: want 0 (the default) up to %d", program.LimitSteps, n, program.MaxSteps))
	}
	if ids.Reserved(m.GetProgramId()) { // the system makes these ids (triggers, code mode)
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("program id %q is reserved; choose another", m.GetProgramId()))
	}
	call, err := toolCallOf(m)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	ask, err := asksPeople(m.GetQuestions())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	in := program.Input{ProgramID: m.GetProgramId(), Filename: m.GetFilename(), Source: m.GetSource(), Tools: m.GetTools(),
		Principal: p, Limits: limitsOf(m.GetLimits()), Call: call, AskPeople: ask}
	if call != nil {
		in.Tools = []string{call.ToolID}
	}
	if m.GetArgs() != nil {
		b, err := protojson.Marshal(m.GetArgs())
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("args are not a JSON object"))
		}
		in.ArgsJSON = string(b)
	}
	id, err := s.Programs.Start(ctx, in)
	var pe *program.ProgramError
	switch {
	case errors.As(err, &pe):
		return connect.NewResponse(&toolfleetv1.RunProgramResponse{ProgramId: in.ProgramID,
			Status: toolfleetv1.ProgramStatus_PROGRAM_STATUS_FAILED, ProgramError: errorProto(pe), Error: pe.Error()}), nil
	case err != nil:
		return nil, startError(err)
	}
	resp := &toolfleetv1.RunProgramResponse{ProgramId: id, Status: toolfleetv1.ProgramStatus_PROGRAM_STATUS_RUNNING}
	if !m.GetWait() {
		return connect.NewResponse(resp), nil
	}
	wctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		maxWait := s.MaxWait
		if maxWait <= 0 {
			maxWait = 5 * time.Minute
		}
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, maxWait)
		defer cancel()
	}
	st, err := s.wait(wctx, id)
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return connect.NewResponse(resp), nil // still running: GetProgram later
		}
		return nil, internal(err)
	}
	out := statusProto(st)
	resp.Status, resp.Result, resp.ProgramError, resp.ToolCalls = out.GetStatus(), out.GetResult(), out.GetProgramError(), out.GetToolCalls()
	resp.Error = out.GetError()
	return connect.NewResponse(resp), nil
}

// GetProgram returns a program's status and outcome.
func (s *Service) GetProgram(ctx context.Context, req *connect.Request[toolfleetv1.GetProgramRequest]) (*connect.Response[toolfleetv1.GetProgramResponse], error) {
	c, err := s.authorize(ctx, req.Header(), ScopeRead)
	if err != nil {
		return nil, err
	}
	st, err := s.Programs.Get(ctx, req.Msg.GetProgramId())
	if err != nil {
		return nil, lookupError(err)
	}
	if !sees(c, st.Owner) {
		return nil, lookupError(program.ErrNotFound) // another caller's program does not exist for this one
	}
	resp := statusProto(st)
	if req.Msg.GetDetail() {
		var steps uint64
		if st.Output != nil {
			steps = st.Output.Steps
		}
		if resp.Detail, err = s.detail(ctx, req.Msg.GetProgramId(), steps); err != nil {
			return nil, lookupError(err)
		}
	}
	return connect.NewResponse(resp), nil
}

// CancelProgram cancels a running program.
func (s *Service) CancelProgram(ctx context.Context, req *connect.Request[toolfleetv1.CancelProgramRequest]) (*connect.Response[toolfleetv1.CancelProgramResponse], error) {
	if _, err := s.own(ctx, req.Header(), ScopeRun, req.Msg.GetProgramId()); err != nil {
		return nil, err
	}
	if err := s.Programs.Cancel(ctx, req.Msg.GetProgramId()); err != nil {
		return nil, lookupError(err)
	}
	return connect.NewResponse(&toolfleetv1.CancelProgramResponse{}), nil
}

// DecideProgramApproval grants or denies a call waiting for approval.
func (s *Service) DecideProgramApproval(ctx context.Context, req *connect.Request[toolfleetv1.DecideProgramApprovalRequest]) (*connect.Response[toolfleetv1.DecideProgramApprovalResponse], error) {
	m := req.Msg
	c, err := s.own(ctx, req.Header(), ScopeApprove, m.GetProgramId())
	if err != nil {
		return nil, err
	}
	approver := c.Subject
	if approver == "" {
		approver = "anonymous"
	}
	d := toolcall.Decision{CallID: m.GetCallId(), Approved: m.GetApproved(), Approver: approver, Reason: m.GetReason()}
	if err := s.Programs.Decide(ctx, m.GetProgramId(), d); err != nil {
		// The validator's refusal (unknown or decided call) is the caller's to fix.
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("no such call is waiting for approval in this program"))
	}
	return connect.NewResponse(&toolfleetv1.DecideProgramApprovalResponse{}), nil
}

// WatchProgram streams the program's events until it ends.
func (s *Service) WatchProgram(ctx context.Context, req *connect.Request[toolfleetv1.WatchProgramRequest], stream *connect.ServerStream[toolfleetv1.WatchProgramResponse]) error {
	return s.watch(ctx, req.Header(), req.Msg, stream.Send)
}

// watch serves WatchProgram for Connect and gRPC alike.
func (s *Service) watch(ctx context.Context, h http.Header, req *toolfleetv1.WatchProgramRequest, send func(*toolfleetv1.WatchProgramResponse) error) error {
	id := req.GetProgramId()
	if _, err := s.own(ctx, h, ScopeRead, id); err != nil {
		return err
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{toolcall.EventSubject(id, ">")}}
	if seq := req.GetAfterSequence(); seq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	}
	cons, err := s.Events.OrderedConsumer(ctx, toolcall.DefaultEventStream, cfg)
	if err != nil {
		return internal(err)
	}
	for ctx.Err() == nil {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if quiet(err) {
			// Quiet (e.g. a call waits for approval): end the watch if the
			// program ended without a final event (e.g. terminated), else keep
			// waiting. A failed look (no worker answers the query while an
			// orchestrator restarts) is no reason to end it either.
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a query waits for a worker
			st, err := s.Programs.Get(gctx, id)
			cancel()
			if err == nil && st.Done() {
				return nil
			}
			continue
		}
		if err != nil {
			return internal(err)
		}
		ev, err := toolcall.DecodeEvent(msg.Data())
		if err != nil {
			continue
		}
		var seq uint64
		if md, _ := msg.Metadata(); md != nil {
			seq = md.Sequence.Stream
		}
		if err := send(&toolfleetv1.WatchProgramResponse{Event: ev, Sequence: seq}); err != nil {
			return err
		}
		switch ev.GetKind() {
		case toolcall.EventCompleted, toolcall.EventFailed, toolcall.EventCancelled:
			return nil
		}
	}
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}

// wait returns the outcome of program id once it ended. It waits on the
// program's final event in NATS, not on Temporal's history long poll, whose
// close notification can be dropped (docs/architecture.md), then reads the
// outcome, which the workflow records a moment after that event.
func (s *Service) wait(ctx context.Context, id string) (*program.Status, error) {
	cons, err := s.Events.OrderedConsumer(ctx, toolcall.DefaultEventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{toolcall.EventSubject(id, toolcall.EventCompleted), toolcall.EventSubject(id, toolcall.EventFailed),
			toolcall.EventSubject(id, toolcall.EventCancelled)}})
	if err != nil {
		return nil, err
	}
	final := false
	for {
		// A query waits for a worker to answer it: bound each look.
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := s.Programs.Get(gctx, id)
		cancel()
		switch {
		case errors.Is(err, program.ErrNotFound):
			return nil, err
		case err != nil:
			// No worker answers the query while the orchestrator restarts:
			// the program is still there, so wait on (bounded by ctx).
			st = &program.Status{ProgramID: id, Status: program.StatusRunning}
		case st.Done():
			return st, nil
		}
		if final { // the workflow is closing: look again shortly
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		// Until a final event arrives (or a second passes, for programs that
		// ended without one), then look again.
		_, err = cons.Next(jetstream.FetchMaxWait(time.Second))
		switch {
		case err == nil:
			final = true
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
	}
}

// quiet reports whether a consumer's Next found no message in its wait
// (jetstream's ordered consumer says so with nats.ErrTimeout).
func quiet(err error) bool {
	return errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// maxPageSize bounds a ListPrograms page.
const maxPageSize = 100

// ListPrograms lists the caller's programs (every subject's for an admin).
func (s *Service) ListPrograms(ctx context.Context, req *connect.Request[toolfleetv1.ListProgramsRequest]) (*connect.Response[toolfleetv1.ListProgramsResponse], error) {
	c, err := s.authorize(ctx, req.Header(), ScopeRead)
	if err != nil {
		return nil, err
	}
	size := int(min(max(req.Msg.GetPageSize(), 1), maxPageSize))
	if req.Msg.GetPageSize() == 0 {
		size = 20
	}
	f, err := listFilter(req.Msg)
	if err != nil {
		return nil, err
	}
	list, next, err := s.Programs.List(ctx, c.Subject, sees(c, ""), size, req.Msg.GetPageToken(), f)
	switch {
	case errors.Is(err, program.ErrNoAttributes):
		return nil, connect.NewError(connect.CodeFailedPrecondition, program.ErrNoAttributes)
	case errors.Is(err, visibility.ErrFilterValue):
		return nil, connect.NewError(connect.CodeInvalidArgument, visibility.ErrFilterValue)
	case err != nil:
		return nil, lookupError(err)
	}
	resp := &toolfleetv1.ListProgramsResponse{NextPageToken: next}
	for _, p := range list {
		sum := &toolfleetv1.ProgramSummary{ProgramId: p.ProgramID, State: p.State, Status: p.Status, StartedAt: timestamppb.New(p.StartedAt)}
		if !p.ClosedAt.IsZero() {
			sum.ClosedAt = timestamppb.New(p.ClosedAt)
		}
		resp.Programs = append(resp.Programs, sum)
	}
	return connect.NewResponse(resp), nil
}

// filterStatus maps a status filter to visibility's word.
var filterStatus = map[toolfleetv1.ProgramStatus]string{
	toolfleetv1.ProgramStatus_PROGRAM_STATUS_RUNNING:          visibility.StatusRunning,
	toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_APPROVAL: visibility.StatusWaiting,
	toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_INPUT:    visibility.StatusWaitingInput,
	toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED:        visibility.StatusDone,
	toolfleetv1.ProgramStatus_PROGRAM_STATUS_FAILED:           visibility.StatusFailed,
	toolfleetv1.ProgramStatus_PROGRAM_STATUS_CANCELED:         visibility.StatusCanceled,
}

// listFilter reads ListPrograms' filters, naming the field that is wrong.
func listFilter(m *toolfleetv1.ListProgramsRequest) (program.ListFilter, error) {
	invalid := func(format string, a ...any) (program.ListFilter, error) {
		return program.ListFilter{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, a...))
	}
	var f program.ListFilter
	if st := m.GetStatus(); st != toolfleetv1.ProgramStatus_PROGRAM_STATUS_UNSPECIFIED {
		word, ok := filterStatus[st]
		if !ok {
			return invalid("status: unknown value %d", st)
		}
		f.Status = word
	}
	for _, v := range []struct {
		name, value string
		to          *string
	}{{"tool", m.GetTool(), &f.Tool}, {"started_by", m.GetStartedBy(), &f.StartedBy}} {
		if v.value == "" {
			continue
		}
		if _, err := visibility.NewQuery("x").Is("x", v.value).String(); err != nil {
			return invalid("%s: %w", v.name, visibility.ErrFilterValue)
		}
		*v.to = v.value
	}
	for _, t := range []struct {
		name string
		ts   *timestamppb.Timestamp
		to   *time.Time
	}{{"started_after", m.GetStartedAfter(), &f.StartedAfter}, {"started_before", m.GetStartedBefore(), &f.Before}} {
		if t.ts == nil {
			continue
		}
		if err := t.ts.CheckValid(); err != nil {
			return invalid("%s: not a valid time", t.name)
		}
		*t.to = t.ts.AsTime()
	}
	if !f.StartedAfter.IsZero() && !f.Before.IsZero() && !f.StartedAfter.Before(f.Before) {
		return invalid("started_after must be before started_before")
	}
	return f, nil
}

// ListTriggers lists the configured triggers.
func (s *Service) ListTriggers(ctx context.Context, req *connect.Request[toolfleetv1.ListTriggersRequest]) (*connect.Response[toolfleetv1.ListTriggersResponse], error) {
	if _, err := s.authorize(ctx, req.Header(), ScopeRead); err != nil {
		return nil, err
	}
	resp := &toolfleetv1.ListTriggersResponse{}
	if s.Triggers != nil {
		resp.Triggers = s.Triggers()
	}
	return connect.NewResponse(resp), nil
}

// own checks that the caller holds scope and may see program id; an unknown
// program and another subject's look the same.
func (s *Service) own(ctx context.Context, h http.Header, scope, id string) (apibase.Caller, error) {
	c, err := s.authorize(ctx, h, scope)
	if err != nil {
		return c, err
	}
	if err := program.ValidProgramID(id); err != nil {
		return c, connect.NewError(connect.CodeInvalidArgument, err)
	}
	owner, err := s.Programs.Owner(ctx, id)
	if err != nil {
		return c, lookupError(err)
	}
	if !sees(c, owner) {
		return c, lookupError(program.ErrNotFound)
	}
	return c, nil
}

// Handler returns the path prefix and handler to mount at the gateway.
func (s *Service) Handler() (string, http.Handler) {
	return toolfleetv1connect.NewProgramServiceHandler(s, connect.WithReadMaxBytes(program.MaxSourceBytes+(64<<10)), apibase.Recover(nil))
}

func limitsOf(l *toolfleetv1.ProgramLimits) program.Limits {
	if l == nil {
		return program.Limits{}
	}
	return program.Limits{MaxSteps: uint64(max(l.GetMaxSteps(), 0)), MaxToolCalls: int(l.GetMaxToolCalls()),
		MaxWidth: int(l.GetMaxWidth()), Deadline: l.GetDeadline().AsDuration(), MaxValueBytes: int(l.GetMaxValueBytes()),
		MaxResultBytes: int(l.GetMaxResultBytes()), ApprovalWait: l.GetApprovalWait().AsDuration(),
		MaxMemoryBytes: l.GetMaxMemoryBytes()}
}

// errorProto renders a program's error for the API.
func errorProto(e *program.ProgramError) *toolfleetv1.ProgramError {
	if e == nil {
		return nil
	}
	return &toolfleetv1.ProgramError{Kind: e.Kind, Limit: e.Limit, Message: e.Message, Position: e.Position, Line: e.Line}
}

var statusCodes = map[string]toolfleetv1.ProgramStatus{
	program.StatusRunning:         toolfleetv1.ProgramStatus_PROGRAM_STATUS_RUNNING,
	program.StatusWaitingApproval: toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_APPROVAL,
	program.StatusWaitingInput:    toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_INPUT,
	program.StatusCompleted:       toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED,
	program.StatusFailed:          toolfleetv1.ProgramStatus_PROGRAM_STATUS_FAILED,
	program.StatusCanceled:        toolfleetv1.ProgramStatus_PROGRAM_STATUS_CANCELED,
}

// statusProto renders a program.Status as GetProgram's response.
func statusProto(st *program.Status) *toolfleetv1.GetProgramResponse {
	resp := &toolfleetv1.GetProgramResponse{ProgramId: st.ProgramID, Status: statusCodes[st.Status], Done: st.Done()}
	if st.State != nil {
		resp.ToolCalls = int32(st.State.ToolCalls)
		for _, pa := range st.State.Pending {
			args := &structpb.Struct{}
			if err := protojson.Unmarshal([]byte(pa.InputJSON), args); err != nil {
				args = nil
			}
			resp.PendingApprovals = append(resp.PendingApprovals, &toolfleetv1.PendingApproval{CallId: pa.CallID,
				ToolId: pa.ToolID, Arguments: args, RequestedAt: timestamppb.New(pa.RequestedAt)})
		}
		resp.PendingQuestions = apibase.PendingQuestions(st.State.Questions)
	}
	if st.Output != nil {
		resp.ToolCalls = int32(st.Output.ToolCalls)
		var v any
		if err := json.Unmarshal([]byte(st.Output.ResultJSON), &v); err == nil {
			if pv, err := structpb.NewValue(v); err == nil {
				resp.Result = pv
			}
		}
	}
	if st.Error != nil {
		resp.ProgramError, resp.Error = errorProto(st.Error), st.Error.Error()
		resp.ToolCalls = int32(st.Error.ToolCalls)
	}
	return resp
}

func lookupError(err error) error {
	if errors.Is(err, visibility.ErrPageToken) {
		return connect.NewError(connect.CodeInvalidArgument, visibility.ErrPageToken)
	}
	if errors.Is(err, program.ErrNotFound) {
		return connect.NewError(connect.CodeNotFound, errors.New("no such program"))
	}
	return internal(err)
}

func startError(err error) error {
	// Bad ids and limits are the caller's; the messages name the field.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the program could not be started in time"))
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	if errors.Is(err, program.ErrProgramIDTaken) {
		return connect.NewError(connect.CodeAlreadyExists, errors.New("the program id is taken; choose another"))
	}
	if errors.Is(err, program.ErrProgramSpecDiffers) {
		return connect.NewError(connect.CodeAlreadyExists, errors.New("the program was started with another spec; choose another id"))
	}
	var ie *program.InputError
	if errors.As(err, &ie) {
		return connect.NewError(connect.CodeInvalidArgument, ie)
	}
	var qe *program.QuotaError
	if errors.As(err, &qe) {
		// The owner's quota (RESOURCE_EXHAUSTED) or a full shared store
		// (UNAVAILABLE, try later); the messages name no internals.
		if runstore.IsFull(qe) {
			return connect.NewError(connect.CodeUnavailable, errors.New(qe.Err.Error()))
		}
		return connect.NewError(connect.CodeResourceExhausted, errors.New(qe.Err.Error()))
	}
	return internal(err)
}

// internal hides an internal error's text from callers.
func internal(error) error {
	return connect.NewError(connect.CodeUnavailable, errors.New("the orchestrator is not available, try again"))
}

// toolCallOf is the ToolCall of a RunProgramRequest, nil when it has none.
func toolCallOf(m *toolfleetv1.RunProgramRequest) (*program.ToolCall, error) {
	tc := m.GetToolCall()
	switch {
	case tc == nil:
		return nil, nil
	case m.GetSource() != "" || m.GetArgs() != nil || len(m.GetTools()) > 0:
		return nil, errors.New("tool_call is a program of its own: leave source, args and tools empty")
	case tc.GetToolId() == "" || strings.ContainsAny(tc.GetToolId(), "*?[]"):
		return nil, fmt.Errorf("tool_call.tool_id %q: want a tool id, e.g. \"Calculator.Add\" (no glob)", tc.GetToolId())
	}
	c := &program.ToolCall{ToolID: tc.GetToolId()}
	if tc.GetInput() != nil {
		b, err := protojson.Marshal(tc.GetInput())
		if err != nil {
			return nil, errors.New("tool_call.input is not a JSON object")
		}
		c.InputJSON = string(b)
	}
	if n := len(tc.GetInputResponses()); n > toolcall.MaxPendingQuestions {
		return nil, fmt.Errorf("tool_call.input_responses has %d answers: at most %d", n, toolcall.MaxPendingQuestions)
	}
	for key, r := range tc.GetInputResponses() {
		b, err := protojson.Marshal(r)
		if err != nil || len(b) > toolcall.MaxAnswerBytes {
			return nil, fmt.Errorf("tool_call.input_responses[%q]: want a JSON object of at most %d bytes", key, toolcall.MaxAnswerBytes)
		}
		if c.Answers == nil {
			c.Answers = map[string]string{}
		}
		c.Answers[key] = string(b)
	}
	if len(tc.GetRequestState()) > maxRequestState {
		return nil, fmt.Errorf("tool_call.request_state is over %d bytes", maxRequestState)
	}
	c.RequestState = tc.GetRequestState()
	return c, nil
}

// maxRequestState bounds a sealed request_state a one-call program carries
// (the worker's state is at most 64 KiB before sealing).
const maxRequestState = 128 << 10
