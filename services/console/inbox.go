package console

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// maxInboxScan bounds the open runs and programs one inbox reads (as
// `toolfleet approvals list` does).
const maxInboxScan = 100

// inboxCountTTL is how long the header's count is reused for one session.
const inboxCountTTL = 5 * time.Second

// inboxItem is one thing waiting on the principal. Kind says which: an
// "approval" of a tool call or a tool's "question"; each kind has its own
// field and its own fragment.
type inboxItem struct {
	Kind     string
	Approval *approvalView
	Question *questionView
}

// inboxSource finds items of one kind across the principal's runs and programs.
type inboxSource func(ctx context.Context, ss *session, a *apis) ([]inboxItem, error)

// inboxSources are read in order for every inbox and count. A run's or a
// program's approvals and questions come from the same read of it.
var inboxSources = []inboxSource{runPending, programPending}

// pending finds every item waiting for ss's principal, the way `toolfleet
// approvals list` does; what the sources found before one failed is kept.
func pending(ctx context.Context, ss *session, a *apis) ([]inboxItem, error) {
	var out []inboxItem
	var first error
	for _, src := range inboxSources {
		items, err := src(ctx, ss, a)
		out = append(out, items...)
		if err != nil && first == nil {
			first = err
		}
	}
	return out, first
}

func approvalItems(v []approvalView) []inboxItem {
	out := make([]inboxItem, 0, len(v))
	for i := range v {
		out = append(out, inboxItem{Kind: "approval", Approval: &v[i]})
	}
	return out
}

// runPending are the calls and questions waiting in the principal's runs:
// the runs listed as waiting for approval or for input (visibility answers
// that), then each one's pending calls and questions; without search
// attributes every open run is asked.
func runPending(ctx context.Context, ss *session, a *apis) ([]inboxItem, error) {
	runs, err := waitingRuns(ctx, ss, a) // what one listing found is read even when the other failed
	if err != nil && runs == nil {
		return nil, err
	}
	var out []inboxItem
	for _, id := range runs {
		got, err := a.runs.GetRun(ctx, as(ss, &toolfleetv1.GetRunRequest{RunId: id}))
		if err != nil {
			continue // ended or restarting in between: nothing to decide now
		}
		out = append(out, approvalItems(approvalViews("run", id, got.Msg.GetPendingApprovals()))...)
		out = append(out, questionItems(questionViews("run", id, got.Msg.GetPendingQuestions()))...)
	}
	return out, err
}

// waitingRuns are the ids of the principal's open runs waiting for an
// approval or an answer (at most maxInboxScan of each), or of every open
// run when the namespace has no search attributes.
func waitingRuns(ctx context.Context, ss *session, a *apis) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	for _, st := range []toolfleetv1.RunStatus{toolfleetv1.RunStatus_RUN_STATUS_WAITING_APPROVAL, toolfleetv1.RunStatus_RUN_STATUS_WAITING_INPUT} {
		req := &toolfleetv1.ListRunsRequest{PageSize: maxInboxScan, Status: st}
		lr, err := a.runs.ListRuns(ctx, as(ss, req))
		all := connect.CodeOf(err) == connect.CodeFailedPrecondition // a namespace without the search attributes
		if all {
			req.Status = toolfleetv1.RunStatus_RUN_STATUS_UNSPECIFIED
			lr, err = a.runs.ListRuns(ctx, as(ss, req))
		}
		if err != nil {
			return ids, err
		}
		for _, r := range lr.Msg.GetRuns() {
			if r.GetState() == "Running" && !seen[r.GetRunId()] {
				seen[r.GetRunId()] = true
				ids = append(ids, r.GetRunId())
			}
		}
		if all {
			break // every open run is listed already
		}
	}
	return ids, nil
}

// programPending are the calls and questions waiting in the principal's programs.
func programPending(ctx context.Context, ss *session, a *apis) ([]inboxItem, error) {
	lp, err := a.programs.ListPrograms(ctx, as(ss, &toolfleetv1.ListProgramsRequest{PageSize: maxInboxScan}))
	if err != nil {
		return nil, err
	}
	var out []inboxItem
	for _, p := range lp.Msg.GetPrograms() {
		if p.GetState() != "Running" || (p.GetStatus() != "" && !strings.HasPrefix(p.GetStatus(), "waiting")) {
			continue
		}
		got, err := a.programs.GetProgram(ctx, as(ss, &toolfleetv1.GetProgramRequest{ProgramId: p.GetProgramId()}))
		if err != nil {
			continue
		}
		out = append(out, approvalItems(approvalViews("program", p.GetProgramId(), got.Msg.GetPendingApprovals()))...)
		out = append(out, questionItems(questionViews("program", p.GetProgramId(), got.Msg.GetPendingQuestions()))...)
	}
	return out, nil
}

func (s *Server) inboxPage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	items, err := pending(ctx, ss, a)
	problem := ""
	if err != nil {
		problem = "Some of your runs or programs could not be read: " + messageOf(err)
	}
	s.counts.set(ss.id, len(items), s.cfg.Now())
	s.render(w, r, ss, "inbox", http.StatusOK, inboxData{Items: items, Problem: problem, CSRF: ss.csrf})
}

func (s *Server) decideProgram(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	id := r.PathValue("id")
	callID, reason, approved, ok := decision(r)
	if !ok {
		s.fail(w, r, ss, http.StatusBadRequest, "Choose approve or deny for a call.")
		return
	}
	_, err := a.programs.DecideProgramApproval(ctx, as(ss, &toolfleetv1.DecideProgramApprovalRequest{ProgramId: id, CallId: callID, Approved: approved, Reason: reason}))
	if err != nil {
		s.failAPI(w, r, ss, "Deciding call "+callID, err)
		return
	}
	s.forgetInbox(ss)
	http.Redirect(w, r, back(r, programURL(id)), http.StatusSeeOther)
}

// inboxCount is the header's count of calls and questions waiting for ss's principal,
// reused for inboxCountTTL; -1 when it could not be read. A count that could
// not be read is reused too: a failing API is not asked again on every page.
func (s *Server) inboxCount(r *http.Request, ss *session, a *apis) int {
	now := s.cfg.Now()
	if n, ok := s.counts.get(ss.id, now); ok {
		return n
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	n := -1
	if items, err := pending(ctx, ss, a); err == nil || items != nil {
		n = len(items)
	}
	s.counts.set(ss.id, n, now)
	return n
}

func (s *Server) forgetInbox(ss *session) { s.counts.forget(ss.id) }

// countCache holds each session's inbox count for a moment.
type countCache struct {
	mu sync.Mutex
	m  map[string]cachedCount
}

type cachedCount struct {
	n  int
	at time.Time
}

func (c *countCache) get(id string, now time.Time) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc, ok := c.m[id]
	if !ok || now.Sub(cc.at) > inboxCountTTL {
		return 0, false
	}
	return cc.n, true
}

func (c *countCache) set(id string, n int, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.m {
		if now.Sub(v.at) > inboxCountTTL {
			delete(c.m, k)
		}
	}
	c.m[id] = cachedCount{n: n, at: now}
}

func (c *countCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}
