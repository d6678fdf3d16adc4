// Package agentapi serves toolfleet.v1.AgentService (Connect, gRPC, gRPC-Web)
// over agent.Runs. It is implemented next to the workflows and mounted at the
// gateway's address by cmd/, so callers have one front door and one auth.
//
// Scopes: runs:start (StartRun, SendMessage), runs:read (GetRun, ListRuns,
// WatchRun), runs:approve (DecideApproval, AnswerInput), runs:cancel (CancelRun). A caller
// sees and steers only the runs it started unless it holds runs:admin. A run's
// tool calls use the starter's subject and scopes, recorded at StartRun.
package agentapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// Scopes of the AgentService.
const (
	ScopeStart   = "runs:start"
	ScopeRead    = "runs:read"
	ScopeApprove = "runs:approve"
	ScopeCancel  = "runs:cancel"
	ScopeAdmin   = "runs:admin"
)

// Limits of the service.
const (
	maxMessages = 256
	maxPageSize = 100
	// maxListScans bounds the Temporal pages one ListRuns call reads to fill a page.
	maxListScans    = 10
	maxWatch        = time.Hour
	deltaBuffer     = 256
	maxRequestBytes = 4 << 20
)

// Caller is the authenticated caller of one request.
type Caller = apibase.Caller

// Authenticator authenticates a request from its headers (Authorization).
type Authenticator = apibase.Authenticator

// Service implements toolfleetv1connect.AgentServiceHandler.
type Service struct {
	Runs *agent.Runs
	JS   jetstream.JetStream
	NC   *nats.Conn
	Auth Authenticator
	Log  *slog.Logger
	// Endpoints, with CheckEndpoints, refuses at StartRun a model key sent
	// to a base URL it is not bound to (agent.Endpoints), so the caller
	// learns it at once. Without CheckEndpoints the orchestrator still
	// refuses it before its first model call, and the run fails.
	Endpoints      *agent.Endpoints
	CheckEndpoints bool
	// Models, when set, is asked at StartRun whether the run's model would
	// open (agent.Resolver.CheckModel): a run whose key is missing is
	// refused with FailedPrecondition rather than started to fail at its
	// first turn. Set it only where the runs' model turns read keys — the
	// process whose environment the resolver sees — not in a gateway that
	// fronts an orchestrator elsewhere.
	Models agent.ModelChecker
}

var _ toolfleetv1connect.AgentServiceHandler = (*Service)(nil)

// Handler returns the path prefix and handler to mount. A request message
// larger than 4 MiB (the gateway's default MaxRequestBytes) is refused with
// ResourceExhausted before it is decoded, and a panic in a handler becomes
// Internal ("internal error") for that caller alone, logged with its stack.
func (s *Service) Handler() (string, http.Handler) {
	return toolfleetv1connect.NewAgentServiceHandler(s, connect.WithReadMaxBytes(maxRequestBytes), apibase.Recover(s.log()))
}

func (s *Service) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// authorize authenticates and checks scope.
func (s *Service) authorize(ctx context.Context, h http.Header, scope string) (Caller, error) {
	return apibase.Authorize(ctx, s.Auth, h, scope)
}

// own checks that c may see or steer runID: its starter, an admin, or anyone
// with auth off. An unknown run and a run of someone else look the same.
func (s *Service) own(ctx context.Context, c Caller, runID string) error {
	if err := agent.ValidRunID(runID); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	p, err := s.Runs.Principal(ctx, runID)
	if errors.Is(err, agent.ErrNotFound) || (err == nil && !c.Sees(p.Subject, ScopeAdmin)) {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("no run %q", runID))
	}
	if err != nil {
		return s.internal("read run", err)
	}
	return nil
}

// internal logs err and returns an error that does not leak it.
func (s *Service) internal(what string, err error) error {
	s.log().Error("agent service", "op", what, "error", err)
	return connect.NewError(connect.CodeUnavailable, errors.New(what+" failed; try again"))
}

// fromTemporal maps a Temporal error to a connect error without internals.
func (s *Service) fromTemporal(what string, err error) error {
	var nf *serviceerror.NotFound
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &nf):
		return connect.NewError(connect.CodeNotFound, errors.New("the run is not running"))
	case errors.As(err, &app):
		return connect.NewError(connect.CodeFailedPrecondition, errors.New(app.Message()))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return s.internal(what, err)
}

// quotaError is RESOURCE_EXHAUSTED with what the caller's runs hold and
// what to do, for a start or message over the caller's quota; nil for any
// other error. It names only the caller's own figures.
func quotaError(err error) error {
	var qe *runstore.QuotaError
	if !errors.As(err, &qe) {
		return nil
	}
	return connect.NewError(connect.CodeResourceExhausted, errors.New(qe.Error()))
}

// spec turns a StartRunRequest into a run spec and its first messages.
func spec(req *toolfleetv1.StartRunRequest) (agent.RunSpec, []*toolfleetv1.Message, error) {
	var sp agent.RunSpec
	if m := req.GetModelSpec(); m != nil {
		sp.Model = agent.ModelSpec{Spec: llm.Spec{Provider: m.GetProvider(), Name: m.GetName(), BaseURL: m.GetBaseUrl(), KeyRef: m.GetKeyRef()},
			MaxTokens: int(m.GetMaxTokens())}
	} else {
		m, err := agent.ParseModel(req.GetModel())
		if err != nil {
			return sp, nil, err
		}
		sp.Model = m
	}
	if sp.Model.Provider == "" || sp.Model.Name == "" {
		return sp, nil, errors.New("a model is required (model \"provider:name\" or model_spec)")
	}
	if err := agent.CheckProtocol(req.GetToolProtocol()); err != nil {
		return sp, nil, err
	}
	sp.Tools, sp.ToolSearch, sp.ToolProtocol, sp.Sequential = req.GetTools(), req.GetToolSearch(), req.GetToolProtocol(), req.GetSequential()
	sp.CodeMode = req.GetCodeMode()
	sp.Labels = req.GetLabels()
	b := req.GetBudget()
	sp.Budget = agent.Budget{MaxTurns: int(b.GetMaxTurns()), MaxToolCalls: int(b.GetMaxToolCalls()),
		MaxInputTokens: b.GetMaxInputTokens(), MaxOutputTokens: b.GetMaxOutputTokens(), Deadline: b.GetDeadline().AsDuration()}
	if err := sp.Budget.Check(); err != nil {
		return sp, nil, err
	}
	sp.Approval = agent.ApprovalPolicy{Tools: req.GetApproval().GetTools(), Timeout: req.GetApproval().GetTimeout().AsDuration()}
	if sp.Approval.Timeout < 0 {
		return sp, nil, fmt.Errorf("approval.timeout %s is negative: want 0 (the default, %s) or more", sp.Approval.Timeout, agent.DefaultApprovalTimeout)
	}
	if sp.Model.MaxTokens < 0 {
		return sp, nil, fmt.Errorf("model_spec.max_tokens %d is negative", sp.Model.MaxTokens)
	}
	q, err := questionPolicy(req.GetQuestions())
	if err != nil {
		return sp, nil, err
	}
	sp.Questions = q
	if req.GetIdleTimeout() != nil {
		sp.IdleTimeout = req.GetIdleTimeout().AsDuration()
	}
	var msgs []*toolfleetv1.Message
	if req.GetSystemPrompt() != "" {
		msgs = append(msgs, llm.System(req.GetSystemPrompt()))
	}
	msgs = append(msgs, req.GetMessages()...)
	if len(msgs) > maxMessages {
		return sp, nil, fmt.Errorf("%d messages: at most %d", len(msgs), maxMessages)
	}
	if !slices.ContainsFunc(msgs, func(m *toolfleetv1.Message) bool { return m.GetRole() == toolfleetv1.Role_ROLE_USER }) {
		return sp, nil, errors.New("at least one user message is required")
	}
	return sp, msgs, nil
}

// StartRun implements AgentService.
func (s *Service) StartRun(ctx context.Context, r *connect.Request[toolfleetv1.StartRunRequest]) (*connect.Response[toolfleetv1.StartRunResponse], error) {
	c, err := s.authorize(ctx, r.Header(), ScopeStart)
	if err != nil {
		return nil, err
	}
	sp, msgs, err := spec(r.Msg)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if s.CheckEndpoints {
		if err := s.Endpoints.Check(sp.Model.Spec); err != nil {
			return nil, connect.NewError(connect.CodePermissionDenied, err)
		}
	}
	if s.Models != nil {
		err := s.Models.CheckModel(sp.Model)
		switch {
		case errors.Is(err, agent.ErrModelKeyMissing):
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New(strings.TrimPrefix(err.Error(), "agent: ")))
		case err != nil:
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New(strings.TrimPrefix(err.Error(), "agent: ")))
		}
	}
	runID := r.Msg.GetRunId()
	if runID != "" {
		if err := agent.ValidRunID(runID); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		if ids.Reserved(runID) { // the system makes these ids (triggers, code mode)
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("run id %q is reserved; choose another", runID))
		}
	}
	p := toolcall.Principal{Subject: c.Subject, Scopes: c.Scopes}
	id, err := s.Runs.Start(ctx, runID, sp, p, msgs...)
	if errors.Is(err, agent.ErrRunIDTaken) { // a run id is an idempotency key of its starter only
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("run id %q is taken", runID))
	}
	if errors.Is(err, agent.ErrRunSpecDiffers) { // a repeat must be the same start, not a new one
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("run %q was started with another spec; continue it with SendMessage", runID))
	}
	if errors.Is(err, agent.ErrCodeModeContent) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New(strings.TrimPrefix(err.Error(), "agent: ")))
	}
	if qe := quotaError(err); qe != nil {
		return nil, qe
	}
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("run %q already ran; continue it with SendMessage", runID))
		}
		return nil, s.fromTemporal("start run", err)
	}
	return connect.NewResponse(&toolfleetv1.StartRunResponse{RunId: id}), nil
}

// GetRun implements AgentService.
func (s *Service) GetRun(ctx context.Context, r *connect.Request[toolfleetv1.GetRunRequest]) (*connect.Response[toolfleetv1.GetRunResponse], error) {
	c, err := s.authorize(ctx, r.Header(), ScopeRead)
	if err != nil {
		return nil, err
	}
	if err := s.own(ctx, c, r.Msg.GetRunId()); err != nil {
		return nil, err
	}
	st, err := s.Runs.Get(ctx, r.Msg.GetRunId())
	if err != nil {
		return nil, s.fromTemporal("get run", err)
	}
	// A run that keeps content out of history names its answer by digest;
	// the text is in the transcript.
	answer, err := s.Runs.Answer(ctx, st)
	if err != nil {
		s.log().Warn("agent service: the answer is not in the transcript", "run_id", st.RunID, "error", err)
	}
	resp := &toolfleetv1.GetRunResponse{RunId: st.RunID, Status: runStatus(st.Status), Turns: int32(st.Turn), ToolCalls: int32(st.ToolCalls),
		Usage:  &toolfleetv1.Usage{InputTokens: st.Usage.InputTokens, OutputTokens: st.Usage.OutputTokens},
		Answer: answer, Idle: st.Idle, StartedAt: timestamppb.New(st.StartedAt)}
	if st.Status == agent.StatusBudgetExhausted {
		resp.Budget = st.Failure
	} else {
		resp.FailureMessage = st.Failure
	}
	for _, p := range st.Pending {
		pa := &toolfleetv1.PendingApproval{CallId: p.CallID, ToolId: p.ToolID, RequestedAt: timestamppb.New(p.RequestedAt)}
		if args, err := s.Runs.CallArguments(ctx, st.RunID, p.CallSeq, p.Index); err == nil {
			pa.Arguments = args
		}
		resp.PendingApprovals = append(resp.PendingApprovals, pa)
	}
	resp.PendingQuestions = apibase.PendingQuestions(st.Questions)
	if r.Msg.GetDetail() {
		if resp.Detail, err = s.detail(ctx, st.RunID); err != nil {
			return nil, s.fromTemporal("read the run's history", err)
		}
	}
	return connect.NewResponse(resp), nil
}

func runStatus(s string) toolfleetv1.RunStatus {
	if v, ok := toolfleetv1.RunStatus_value["RUN_STATUS_"+s]; ok {
		return toolfleetv1.RunStatus(v)
	}
	return toolfleetv1.RunStatus_RUN_STATUS_UNSPECIFIED
}

// SendMessage implements AgentService (start or continue in one call).
func (s *Service) SendMessage(ctx context.Context, r *connect.Request[toolfleetv1.SendMessageRequest]) (*connect.Response[toolfleetv1.SendMessageResponse], error) {
	c, err := s.authorize(ctx, r.Header(), ScopeStart)
	if err != nil {
		return nil, err
	}
	if err := s.own(ctx, c, r.Msg.GetRunId()); err != nil {
		return nil, err
	}
	m := r.Msg.GetMessage()
	if m == nil || len(m.GetParts()) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("an empty message"))
	}
	m.Role = toolfleetv1.Role_ROLE_USER
	var caller *toolcall.Principal // whose current scopes cut the run's (none with auth off)
	if !c.Anonymous {
		caller = &toolcall.Principal{Subject: c.Subject, Scopes: c.Scopes}
	}
	err = s.Runs.SendMessageAs(ctx, r.Msg.GetRunId(), caller, m)
	if errors.Is(err, agent.ErrRunIDTaken) { // the id holds a workflow that is not a run
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no run %q", r.Msg.GetRunId()))
	}
	if errors.Is(err, agent.ErrRunClosed) { // failed, cancelled or spent: it stays closed
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New(strings.TrimPrefix(err.Error(), "agent: ")))
	}
	if qe := quotaError(err); qe != nil {
		return nil, qe
	}
	if err != nil {
		return nil, s.fromTemporal("send message", err)
	}
	return connect.NewResponse(&toolfleetv1.SendMessageResponse{}), nil
}

// DecideApproval implements AgentService; the caller is the approver.
func (s *Service) DecideApproval(ctx context.Context, r *connect.Request[toolfleetv1.DecideApprovalRequest]) (*connect.Response[toolfleetv1.DecideApprovalResponse], error) {
	c, err := s.authorize(ctx, r.Header(), ScopeApprove)
	if err != nil {
		return nil, err
	}
	if err := s.own(ctx, c, r.Msg.GetRunId()); err != nil {
		return nil, err
	}
	approver := c.Subject
	if approver == "" {
		approver = "anonymous"
	}
	err = s.Runs.Decide(ctx, r.Msg.GetRunId(), toolcall.Decision{CallID: r.Msg.GetCallId(), Approved: r.Msg.GetApproved(),
		Approver: approver, Reason: r.Msg.GetReason()})
	if err != nil {
		return nil, s.fromTemporal("decide approval", err)
	}
	return connect.NewResponse(&toolfleetv1.DecideApprovalResponse{}), nil
}

// CancelRun implements AgentService.
func (s *Service) CancelRun(ctx context.Context, r *connect.Request[toolfleetv1.CancelRunRequest]) (*connect.Response[toolfleetv1.CancelRunResponse], error) {
	c, err := s.authorize(ctx, r.Header(), ScopeCancel)
	if err != nil {
		return nil, err
	}
	if err := s.own(ctx, c, r.Msg.GetRunId()); err != nil {
		return nil, err
	}
	if err := s.Runs.Cancel(ctx, r.Msg.GetRunId()); err != nil {
		return nil, s.fromTemporal("cancel run", err)
	}
	return connect.NewResponse(&toolfleetv1.CancelRunResponse{}), nil
}

// WatchRun implements AgentService: stored events after after_seq, then live
// ones (and token deltas when asked) until the run's terminal event, the
// client leaves, or an hour passes (resume with the last seq).
func (s *Service) WatchRun(ctx context.Context, r *connect.Request[toolfleetv1.WatchRunRequest], stream *connect.ServerStream[toolfleetv1.WatchRunResponse]) error {
	return s.watch(ctx, r.Header(), r.Msg, stream.Send)
}

// watch is WatchRun for every transport.
func (s *Service) watch(ctx context.Context, h http.Header, req *toolfleetv1.WatchRunRequest, send func(*toolfleetv1.WatchRunResponse) error) error {
	c, err := s.authorize(ctx, h, ScopeRead)
	if err != nil {
		return err
	}
	runID := req.GetRunId()
	if err := s.own(ctx, c, runID); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, maxWatch)
	defer cancel()

	var deltas chan *nats.Msg
	if req.GetDeltas() {
		deltas = make(chan *nats.Msg, deltaBuffer) // a slow watcher loses deltas, never events
		sub, err := s.NC.ChanSubscribe(toolcall.DeltaSubject(runID), deltas)
		if err != nil {
			return s.internal("watch deltas", err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := s.NC.FlushWithContext(ctx); err != nil { // the server knows the subscription before we replay
			return s.internal("watch deltas", err)
		}
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{toolcall.EventSubject(runID, ">")}}
	if after := req.GetAfterSeq(); after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := s.JS.OrderedConsumer(ctx, toolcall.DefaultEventStream, cfg)
	if err != nil {
		return s.internal("watch events", err)
	}
	events := make(chan *toolfleetv1.RunEvent)
	errs := make(chan error, 1)
	go func() { // owned by this handler: ends with ctx
		for {
			msg, err := cons.Next(jetstream.FetchContext(ctx))
			if err != nil {
				errs <- err
				return
			}
			ev, err := toolcall.DecodeEvent(msg.Data())
			if err != nil {
				continue
			}
			if md, err := msg.Metadata(); err == nil {
				ev.Seq = md.Sequence.Stream
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			return s.internal("watch events", err)
		case m := <-deltas:
			d := &toolfleetv1.RunDelta{Turn: header(m, agent.HeaderTurn), Attempt: header(m, agent.HeaderAttempt),
				Seq: header(m, agent.HeaderSeq), Text: string(m.Data)}
			if err := send(&toolfleetv1.WatchRunResponse{Item: &toolfleetv1.WatchRunResponse_Delta{Delta: d}}); err != nil {
				return err
			}
		case ev := <-events:
			if err := send(&toolfleetv1.WatchRunResponse{Item: &toolfleetv1.WatchRunResponse_Event{Event: ev}}); err != nil {
				return err
			}
			switch ev.GetKind() {
			case toolcall.EventCompleted, toolcall.EventFailed, toolcall.EventCancelled:
				return nil
			}
		}
	}
}

func header(m *nats.Msg, k string) int32 {
	var n int32
	_, _ = fmt.Sscan(m.Header.Get(k), &n)
	return n
}
