package console

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// runsPageSize is how many runs one page of the list shows.
const runsPageSize = 25

// runRow is one run in the list.
type runRow struct {
	ID, Status, State, Model, StartedBy string
	Started, Closed, StartedAgo, Detail string
	Tools                               []string
}

// runFilter is the runs list's filter form, as the query string carries it.
type runFilter struct {
	Status, Model, Tool, StartedBy, From, To string
}

// statusChoices are the statuses the filter offers, as RunStatus names.
var statusChoices = []string{"running", "waiting_approval", "waiting_input", "completed", "failed", "canceled"}

// timeForm is how a datetime-local input writes a time (read as UTC).
const timeForm = "2006-01-02T15:04"

func filterOf(q url.Values) runFilter {
	f := runFilter{Status: q.Get("status"), Model: strings.TrimSpace(q.Get("model")), Tool: strings.TrimSpace(q.Get("tool")),
		StartedBy: strings.TrimSpace(q.Get("started_by")), From: q.Get("from"), To: q.Get("to")}
	return f
}

// query is the filter as a query string (for the pager's links).
func (f runFilter) query() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"status": f.Status, "model": f.Model, "tool": f.Tool, "started_by": f.StartedBy, "from": f.From, "to": f.To} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// request fills req's filters, or says in the reader's words what is wrong.
func (f runFilter) request(req *toolfleetv1.ListRunsRequest) string {
	if f.Status != "" {
		st, ok := toolfleetv1.RunStatus_value["RUN_STATUS_"+strings.ToUpper(f.Status)]
		if !ok {
			return "There is no status " + f.Status + " to filter on."
		}
		req.Status = toolfleetv1.RunStatus(st)
	}
	req.Model, req.Tool, req.StartedBy = f.Model, f.Tool, f.StartedBy
	return f.times(&req.StartedAfter, &req.StartedBefore)
}

// programRequest fills a ListPrograms request's filters (programs have no
// model), or says in the reader's words what is wrong.
func (f runFilter) programRequest(req *toolfleetv1.ListProgramsRequest) string {
	if f.Status != "" {
		st, ok := toolfleetv1.ProgramStatus_value["PROGRAM_STATUS_"+strings.ToUpper(f.Status)]
		if !ok {
			return "There is no status " + f.Status + " to filter on."
		}
		req.Status = toolfleetv1.ProgramStatus(st)
	}
	req.Tool, req.StartedBy = f.Tool, f.StartedBy
	return f.times(&req.StartedAfter, &req.StartedBefore)
}

// times reads the From and To fields into after and before.
func (f runFilter) times(after, before **timestamppb.Timestamp) string {
	for _, t := range []struct {
		name, value string
		to          **timestamppb.Timestamp
	}{{"From", f.From, after}, {"To", f.To, before}} {
		if t.value == "" {
			continue
		}
		at, err := time.ParseInLocation(timeForm, t.value, time.UTC)
		if err != nil {
			return t.name + " is not a time like 2026-11-27T14:30."
		}
		*t.to = timestamppb.New(at)
	}
	return ""
}

func (s *Server) runsPage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	f := filterOf(r.URL.Query())
	req := &toolfleetv1.ListRunsRequest{PageSize: runsPageSize}
	problem := f.request(req)
	if p := r.URL.Query().Get("page"); p != "" {
		var err error
		if req.PageToken, err = base64.RawURLEncoding.DecodeString(p); err != nil {
			s.fail(w, r, ss, http.StatusBadRequest, "That page link is damaged: go back to the first page of runs.")
			return
		}
	}
	var rows []runRow
	next := ""
	if problem == "" {
		res, err := a.runs.ListRuns(ctx, as(ss, req))
		switch connect.CodeOf(err) {
		case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
			problem = messageOf(err)
		default:
			if err != nil {
				s.failAPI(w, r, ss, "The runs", err)
				return
			}
			rows = s.runRows(ctx, ss, a, res.Msg.GetRuns())
			if t := res.Msg.GetNextPageToken(); len(t) > 0 {
				q := f.query()
				q.Set("page", base64.RawURLEncoding.EncodeToString(t))
				next = Prefix + "runs?" + q.Encode()
			}
		}
	}
	first := ""
	if r.URL.Query().Get("page") != "" {
		first = Prefix + "runs"
		if q := f.query().Encode(); q != "" {
			first += "?" + q
		}
	}
	s.render(w, r, ss, "runs", http.StatusOK, map[string]any{
		"Runs": rows, "Next": next, "First": first, "Filter": f, "Statuses": statusChoices, "Problem": problem,
		"Filtered": len(f.query()) > 0,
		"Model":    "scripted:demo", "Tools": "Calculator.*, Clock.*, KV.*, JSONQuery.*",
	})
}

// runRows are the listed runs; a run waiting for approval says how many
// calls wait (one GetRun for each such run only).
func (s *Server) runRows(ctx context.Context, ss *session, a *apis, runs []*toolfleetv1.RunSummary) []runRow {
	rows := make([]runRow, 0, len(runs))
	for _, run := range runs {
		row := runRow{ID: run.GetRunId(), State: run.GetState(), Status: runStatus(run.GetStatus()), Model: run.GetModel(),
			StartedBy: run.GetStartedBy(), Tools: run.GetTools(),
			Started: when(run.GetStartedAt()), StartedAgo: since(run.GetStartedAt()), Closed: when(run.GetClosedAt())}
		if run.GetStatus() == toolfleetv1.RunStatus_RUN_STATUS_UNSPECIFIED {
			row.Status = strings.ToLower(run.GetState()) // started without search attributes
		}
		if run.GetStatus() == toolfleetv1.RunStatus_RUN_STATUS_WAITING_APPROVAL {
			if got, err := a.runs.GetRun(ctx, as(ss, &toolfleetv1.GetRunRequest{RunId: run.GetRunId()})); err == nil {
				if n := len(got.Msg.GetPendingApprovals()); n > 0 {
					row.Detail = plural(n, "call waits", "calls wait") + " for approval"
				}
			}
		}
		rows = append(rows, row)
	}
	return rows
}
