package agentapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
)

// ListRuns implements AgentService: the caller's runs, newest first, with
// the request's filters answered by Temporal visibility.
func (s *Service) ListRuns(ctx context.Context, r *connect.Request[toolfleetv1.ListRunsRequest]) (*connect.Response[toolfleetv1.ListRunsResponse], error) {
	c, err := s.authorize(ctx, r.Header(), ScopeRead)
	if err != nil {
		return nil, err
	}
	out, err := s.listRuns(ctx, c, r.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// listRuns is ListRuns for a caller already authorized.
func (s *Service) listRuns(ctx context.Context, c Caller, m *toolfleetv1.ListRunsRequest) (*toolfleetv1.ListRunsResponse, error) {
	size := int32(min(max(m.GetPageSize(), 1), maxPageSize))
	if m.GetPageSize() == 0 {
		size = 20
	}
	all := c.Has(ScopeAdmin)
	indexed := s.Runs != nil && s.Runs.Visibility != nil && s.Runs.Visibility.Available(ctx)
	q, ownerInQuery, err := runsQuery(m, c.Subject, all, indexed)
	if err != nil {
		return nil, err
	}
	query, err := q.String()
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	// A page token is checked before Temporal sees it (visibility.OpenPage),
	// and is tied to the viewer and the filters.
	view := visibility.PageView("runs", c.Subject, all, query)
	token, err := visibility.OpenPage(view, m.GetPageToken())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	// With the starter in the query Temporal answers whole pages. Otherwise
	// (no search attributes, or a subject a query cannot carry) ownership is
	// known only after a run is fetched, so a page is filled from as many
	// Temporal pages as it takes, each asking only for the rows still
	// missing (so no row is skipped), up to maxListScans; a caller among
	// many tenants may then get a short page with a next_page_token, as
	// AIP-158 allows.
	out := &toolfleetv1.ListRunsResponse{}
	for scan := 0; scan < maxListScans && int32(len(out.Runs)) < size; scan++ {
		resp, err := s.Runs.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			PageSize: size - int32(len(out.Runs)), NextPageToken: token, Query: query})
		if visibility.BadPageToken(err) {
			return nil, connect.NewError(connect.CodeInvalidArgument, visibility.ErrPageToken)
		}
		if err != nil {
			return nil, s.fromTemporal("list runs", err)
		}
		for _, e := range resp.GetExecutions() {
			sum := runSummary(e)
			if !all && !ownerInQuery {
				p, err := s.Runs.Principal(ctx, sum.RunId)
				if err != nil || p.Subject != c.Subject {
					continue
				}
				sum.StartedBy = p.Subject
			}
			out.Runs = append(out.Runs, sum)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			break
		}
	}
	out.NextPageToken = visibility.SealPage(view, token)
	return out, nil
}

// runSummary is a listed execution as a RunSummary, its status as GetRun
// would say it.
func runSummary(e *workflowpb.WorkflowExecutionInfo) *toolfleetv1.RunSummary {
	attrs := e.GetSearchAttributes()
	sum := &toolfleetv1.RunSummary{RunId: e.GetExecution().GetWorkflowId(),
		State:     strings.TrimPrefix(e.GetStatus().String(), "WorkflowExecutionStatus"),
		StartedAt: e.GetStartTime(), ClosedAt: e.GetCloseTime(),
		Status:    listedStatus[visibility.ReaderStatus(e.GetStatus(), visibility.Keyword(attrs, visibility.Status.GetName()))],
		Model:     visibility.Keyword(attrs, visibility.Model.GetName()),
		StartedBy: visibility.Keyword(attrs, visibility.Principal.GetName()),
		Tools:     visibility.KeywordList(attrs, visibility.Tools.GetName())}
	return sum
}

// listedStatus maps visibility's status words to the API's.
var listedStatus = map[string]toolfleetv1.RunStatus{
	visibility.StatusRunning:      toolfleetv1.RunStatus_RUN_STATUS_RUNNING,
	visibility.StatusWaiting:      toolfleetv1.RunStatus_RUN_STATUS_WAITING_APPROVAL,
	visibility.StatusWaitingInput: toolfleetv1.RunStatus_RUN_STATUS_WAITING_INPUT,
	visibility.StatusDone:         toolfleetv1.RunStatus_RUN_STATUS_COMPLETED,
	visibility.StatusFailed:       toolfleetv1.RunStatus_RUN_STATUS_FAILED,
	visibility.StatusCanceled:     toolfleetv1.RunStatus_RUN_STATUS_CANCELED,
}

// filterStatus maps a status filter to visibility's word.
var filterStatus = map[toolfleetv1.RunStatus]string{
	toolfleetv1.RunStatus_RUN_STATUS_RUNNING:          visibility.StatusRunning,
	toolfleetv1.RunStatus_RUN_STATUS_WAITING_APPROVAL: visibility.StatusWaiting,
	toolfleetv1.RunStatus_RUN_STATUS_WAITING_INPUT:    visibility.StatusWaitingInput,
	toolfleetv1.RunStatus_RUN_STATUS_COMPLETED:        visibility.StatusDone,
	toolfleetv1.RunStatus_RUN_STATUS_FAILED:           visibility.StatusFailed,
	toolfleetv1.RunStatus_RUN_STATUS_CANCELED:         visibility.StatusCanceled,
}

// errNoAttributes refuses a filter the namespace cannot answer.
var errNoAttributes = errors.New("this filter needs the runs' search attributes, which the Temporal namespace does not have (the orchestrator registers them when it may)")

// runsQuery is the visibility query of a listing: runs, the filters, and the
// caller's subject when it sees only its own runs and a query can carry it
// (ownerInQuery). Filter values are validated, never escaped into the query.
func runsQuery(m *toolfleetv1.ListRunsRequest, subject string, all, indexed bool) (*visibility.Query, bool, error) {
	q := visibility.NewQuery(agent.WorkflowName)
	invalid := func(format string, a ...any) (*visibility.Query, bool, error) {
		return nil, false, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, a...))
	}
	attrFilter := m.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_UNSPECIFIED || m.GetModel() != "" || m.GetTool() != "" || m.GetStartedBy() != ""
	if attrFilter && !indexed {
		return nil, false, connect.NewError(connect.CodeFailedPrecondition, errNoAttributes)
	}
	if st := m.GetStatus(); st != toolfleetv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		word, ok := filterStatus[st]
		if !ok {
			if st == toolfleetv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED {
				return invalid("status: a run whose budget ran out is listed as FAILED; filter on that")
			}
			return invalid("status: unknown value %d", st)
		}
		q.Status(word)
	}
	for _, f := range []struct {
		name, attr, value string
	}{
		{"model", visibility.Model.GetName(), m.GetModel()},
		{"tool", visibility.Tools.GetName(), m.GetTool()},
		{"started_by", visibility.Principal.GetName(), m.GetStartedBy()},
	} {
		if f.value == "" {
			continue
		}
		if _, err := visibility.NewQuery("x").Is(f.attr, f.value).String(); err != nil {
			return invalid("%s: %w", f.name, visibility.ErrFilterValue)
		}
		q.Is(f.attr, f.value)
	}
	after, err := filterTime("started_after", m.GetStartedAfter())
	if err != nil {
		return nil, false, err
	}
	before, err := filterTime("started_before", m.GetStartedBefore())
	if err != nil {
		return nil, false, err
	}
	if !after.IsZero() && !before.IsZero() && !after.Before(before) {
		return invalid("started_after must be before started_before")
	}
	q.StartedAfter(after).StartedBefore(before)
	ownerInQuery := false
	if !all && indexed {
		if _, err := visibility.NewQuery("x").Is(visibility.Principal.GetName(), subject).String(); err == nil && subject != "" {
			q.Is(visibility.Principal.GetName(), subject)
			ownerInQuery = true
		}
	}
	return q, ownerInQuery, nil
}

// filterTime is a time filter's value (zero when unset).
func filterTime(name string, ts *timestamppb.Timestamp) (time.Time, error) {
	if ts == nil {
		return time.Time{}, nil
	}
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: not a valid time", name))
	}
	return ts.AsTime(), nil
}
