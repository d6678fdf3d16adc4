package console

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// programRow is one program in the list.
type programRow struct {
	ID, Status, Started, StartedAgo, Closed string
}

func programURL(id string) string { return Prefix + "programs/" + url.PathEscape(id) }

func (s *Server) programsPage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	f := filterOf(r.URL.Query())
	f.Model = "" // programs have no model
	req := &toolfleetv1.ListProgramsRequest{PageSize: runsPageSize}
	problem := f.programRequest(req)
	if p := r.URL.Query().Get("page"); p != "" {
		var err error
		if req.PageToken, err = base64.RawURLEncoding.DecodeString(p); err != nil {
			s.fail(w, r, ss, http.StatusBadRequest, "That page link is damaged: go back to the first page of programs.")
			return
		}
	}
	var rows []programRow
	next := ""
	if problem == "" {
		res, err := a.programs.ListPrograms(ctx, as(ss, req))
		switch connect.CodeOf(err) {
		case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
			problem = messageOf(err)
		default:
			if err != nil {
				s.failAPI(w, r, ss, "The programs", err)
				return
			}
			for _, p := range res.Msg.GetPrograms() {
				st := p.GetStatus()
				if st == "" {
					st = strings.ToLower(p.GetState())
				}
				rows = append(rows, programRow{ID: p.GetProgramId(), Status: st, Started: when(p.GetStartedAt()),
					StartedAgo: since(p.GetStartedAt()), Closed: when(p.GetClosedAt())})
			}
			if t := res.Msg.GetNextPageToken(); len(t) > 0 {
				q := f.query()
				q.Set("page", base64.RawURLEncoding.EncodeToString(t))
				next = Prefix + "programs?" + q.Encode()
			}
		}
	}
	first := ""
	if r.URL.Query().Get("page") != "" {
		first = Prefix + "programs"
		if q := f.query().Encode(); q != "" {
			first += "?" + q
		}
	}
	s.render(w, r, ss, "programs", http.StatusOK, map[string]any{"Programs": rows, "Next": next, "First": first,
		"Filter": f, "Statuses": statusChoices, "Problem": problem, "Filtered": len(f.query()) > 0})
}

// callView is one tool call of a program's page.
type callView struct {
	CallID, ToolID, Input, Result, ErrorKind, Error, Failure string
	// Asked: this round asked the caller these keys (answered in a later round).
	Asked                     []string
	Approver, Scheduled, Took string
	Attempts                  int32
	Running                   bool
}

// limitView is one limit of a program with what it used.
type limitView struct{ Name, Value, Used string }

func (s *Server) programPage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	s.renderProgram(w, r, ss, a, r.PathValue("id"), http.StatusOK, nil)
}

// renderProgram renders program id's page with status; refused, when set,
// shows an answer the API refused beside its question (questions.go).
func (s *Server) renderProgram(w http.ResponseWriter, r *http.Request, ss *session, a *apis, id string, status int, refused *refusal) {
	ctx, cancel := callCtx(r)
	defer cancel()
	data, err := programData(ctx, ss, a, id, refused)
	if err != nil {
		s.failAPI(w, r, ss, "Program "+id, err)
		return
	}
	if status != http.StatusOK {
		w.WriteHeader(status)
	}
	s.render(w, r, ss, "program", status, data)
}

// programData is what the program page and its live parts show: GetProgram
// with its detail, as ss's principal.
func programData(ctx context.Context, ss *session, a *apis, id string, refused *refusal) (map[string]any, error) {
	got, err := a.programs.GetProgram(ctx, as(ss, &toolfleetv1.GetProgramRequest{ProgramId: id, Detail: true}))
	if err != nil {
		return nil, err
	}
	g, d := got.Msg, got.Msg.GetDetail()
	state := strings.ToLower(strings.TrimPrefix(g.GetStatus().String(), "PROGRAM_STATUS_"))
	data := map[string]any{"ID": id, "URL": programURL(id), "Status": state, "CSRF": ss.csrf, "Done": g.GetDone(), "Source": d.GetSource(),
		"Filename": d.GetFilename(), "Args": prettyJSON(d.GetArgsJson()), "Tools": d.GetTools(), "Truncated": d.GetCallsTruncated(),
		"Approvals": approvalViews("program", id, g.GetPendingApprovals()),
		"Questions": refused.apply(questionViews("program", id, g.GetPendingQuestions()), "program", id)}
	if tc := d.GetToolCall(); tc != nil {
		in, _ := protojson.Marshal(tc.GetInput())
		data["ToolCall"] = map[string]string{"Tool": tc.GetToolId(), "Input": prettyJSON(string(in))}
	}
	if g.GetResult() != nil {
		if b, err := protojson.Marshal(g.GetResult()); err == nil {
			data["Result"] = prettyJSON(string(b))
		}
	}
	if e := g.GetProgramError(); e != nil {
		data["Error"] = e
	}
	var calls []callView
	for _, c := range d.GetCalls() {
		v := callView{CallID: c.GetCallId(), ToolID: c.GetToolId(), Input: prettyJSON(c.GetInputJson()), Result: prettyJSON(c.GetResultJson()),
			Failure: c.GetFailure(), Approver: c.GetApprover(), Attempts: c.GetAttempts(), Scheduled: when(c.GetScheduledAt()),
			Running: c.GetEndedAt() == nil, Asked: c.GetAsked()}
		if e := c.GetError(); e != nil {
			v.ErrorKind, v.Error = e.GetKind(), e.GetMessage()
		}
		if c.GetEndedAt() != nil && c.GetScheduledAt() != nil {
			v.Took = c.GetEndedAt().AsTime().Sub(c.GetScheduledAt().AsTime()).Round(time.Millisecond).String()
		}
		calls = append(calls, v)
	}
	data["Calls"] = calls
	l := d.GetLimits()
	data["Limits"] = []limitView{
		{"Tool calls", strconv.Itoa(int(l.GetMaxToolCalls())), strconv.Itoa(int(g.GetToolCalls()))},
		{"Steps", strconv.FormatInt(l.GetMaxSteps(), 10), usedSteps(d.GetSteps(), g.GetDone())},
		{"Calls in flight", strconv.Itoa(int(l.GetMaxWidth())), ""},
		{"Deadline", l.GetDeadline().AsDuration().String(), ""},
		{"Approval wait", l.GetApprovalWait().AsDuration().String(), ""},
		{"Value bytes", strconv.Itoa(int(l.GetMaxValueBytes())), ""},
		{"Result bytes", strconv.Itoa(int(l.GetMaxResultBytes())), ""},
		{"Memory bytes", strconv.FormatInt(l.GetMaxMemoryBytes(), 10), ""},
	}
	return data, nil
}

func usedSteps(steps uint64, done bool) string {
	if steps == 0 && !done {
		return ""
	}
	return strconv.FormatUint(steps, 10)
}
