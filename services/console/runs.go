package console

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// runsPageSize is how many runs one page of the list shows.
const runsPageSize = 25

// runRow is one run in the list.
type runRow struct {
	ID, State, Status  string
	Started, Closed    string
	StartedAgo, Detail string
}

func (s *Server) runsPage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	var token []byte
	if p := r.URL.Query().Get("page"); p != "" {
		var err error
		if token, err = base64.RawURLEncoding.DecodeString(p); err != nil {
			s.fail(w, r, ss, http.StatusBadRequest, "That page link is damaged: go back to the first page of runs.")
			return
		}
	}
	res, err := a.runs.ListRuns(ctx, as(ss, &toolfleetv1.ListRunsRequest{PageSize: runsPageSize, PageToken: token}))
	if err != nil {
		s.failAPI(w, r, ss, "The runs", err)
		return
	}
	rows := make([]runRow, 0, len(res.Msg.GetRuns()))
	for _, run := range res.Msg.GetRuns() {
		row := runRow{ID: run.GetRunId(), State: run.GetState(), Status: strings.ToLower(run.GetState()),
			Started: when(run.GetStartedAt()), StartedAgo: since(run.GetStartedAt()), Closed: when(run.GetClosedAt())}
		if run.GetState() == "Running" {
			// Temporal's view says only "Running": ask the run what it waits on.
			if got, err := a.runs.GetRun(ctx, as(ss, &toolfleetv1.GetRunRequest{RunId: run.GetRunId()})); err == nil {
				row.Status = runStatus(got.Msg.GetStatus())
				if n := len(got.Msg.GetPendingApprovals()); n > 0 {
					row.Detail = plural(n, "call waits", "calls wait") + " for approval"
				}
			}
		}
		rows = append(rows, row)
	}
	next := ""
	if t := res.Msg.GetNextPageToken(); len(t) > 0 {
		next = Prefix + "runs?page=" + base64.RawURLEncoding.EncodeToString(t)
	}
	s.render(w, r, ss, "runs", http.StatusOK, map[string]any{
		"Runs": rows, "Next": next, "First": r.URL.Query().Get("page") != "",
		"Model": "scripted:demo", "Tools": "Calculator.*, Clock.*, KV.*, JSONQuery.*",
	})
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// runStatus is a RunStatus in words: "waiting_approval", "completed", …
func runStatus(st toolfleetv1.RunStatus) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "RUN_STATUS_"))
}

// list splits a form field of tool ids or globs on commas and spaces.
func list(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

func userText(text string) *toolfleetv1.Message {
	return &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_USER,
		Parts: []*toolfleetv1.Part{{Kind: &toolfleetv1.Part_Text{Text: text}}}}
}

// startRun starts a run from the runs page's form and opens its page.
func (s *Server) startRun(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	prompt := strings.TrimSpace(r.PostFormValue("prompt"))
	if prompt == "" {
		s.fail(w, r, ss, http.StatusBadRequest, "A run needs a first message: go back and write what the model should do.")
		return
	}
	req := &toolfleetv1.StartRunRequest{Model: strings.TrimSpace(r.PostFormValue("model")),
		Messages: []*toolfleetv1.Message{userText(prompt)}, Tools: list(r.PostFormValue("tools"))}
	if ap := list(r.PostFormValue("approve")); len(ap) > 0 {
		req.Approval = &toolfleetv1.ApprovalPolicy{Tools: ap}
	}
	res, err := a.runs.StartRun(ctx, as(ss, req))
	if err != nil {
		s.failAPI(w, r, ss, "Starting the run", err)
		return
	}
	http.Redirect(w, r, runURL(res.Msg.GetRunId()), http.StatusSeeOther)
}

func runURL(id string) string { return Prefix + "runs/" + url.PathEscape(id) }

// approvalView is a call waiting for a decision.
type approvalView struct {
	Kind, OwnerID, OwnerURL, DecideURL string
	CallID, ToolID, Arguments, Since   string
	Requested                          string
}

func approvalViews(kind, owner string, p []*toolfleetv1.PendingApproval) []approvalView {
	out := make([]approvalView, 0, len(p))
	for _, ap := range p {
		v := approvalView{Kind: kind, OwnerID: owner, CallID: ap.GetCallId(), ToolID: ap.GetToolId(),
			Requested: when(ap.GetRequestedAt()), Since: since(ap.GetRequestedAt())}
		if args, err := protojson.Marshal(ap.GetArguments()); err == nil && ap.GetArguments() != nil {
			v.Arguments = prettyJSON(string(args))
		}
		if kind == "run" {
			v.OwnerURL, v.DecideURL = runURL(owner), runURL(owner)+"/decide"
		} else {
			v.OwnerURL, v.DecideURL = "", Prefix+"programs/"+url.PathEscape(owner)+"/decide"
		}
		out = append(out, v)
	}
	return out
}

// summaryView is the run page's summary panel (re-rendered live).
type summaryView struct {
	RunID, Status, Started, Failure, Answer, Budget string
	Turns, ToolCalls                                int32
	InputTokens, OutputTokens                       int64
	Finished, Idle                                  bool
	Approvals                                       []approvalView
	CSRF                                            string
}

func summarize(g *toolfleetv1.GetRunResponse, csrf string) summaryView {
	st := runStatus(g.GetStatus())
	v := summaryView{RunID: g.GetRunId(), Status: st, Started: when(g.GetStartedAt()), Failure: g.GetFailureMessage(),
		Answer: g.GetAnswer(), Budget: g.GetBudget(), Turns: g.GetTurns(), ToolCalls: g.GetToolCalls(),
		InputTokens: g.GetUsage().GetInputTokens(), OutputTokens: g.GetUsage().GetOutputTokens(), Idle: g.GetIdle(),
		Approvals: approvalViews("run", g.GetRunId(), g.GetPendingApprovals()), CSRF: csrf}
	switch g.GetStatus() {
	case toolfleetv1.RunStatus_RUN_STATUS_COMPLETED, toolfleetv1.RunStatus_RUN_STATUS_FAILED,
		toolfleetv1.RunStatus_RUN_STATUS_CANCELED, toolfleetv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED:
		v.Finished = true
	}
	return v
}

func (s *Server) runPage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	id := r.PathValue("id")
	got, err := a.runs.GetRun(ctx, as(ss, &toolfleetv1.GetRunRequest{RunId: id}))
	if err != nil {
		s.failAPI(w, r, ss, "Run "+id, err)
		return
	}
	s.render(w, r, ss, "run", http.StatusOK, map[string]any{
		"ID": id, "URL": runURL(id), "Summary": summarize(got.Msg, ss.csrf), "CSRF": ss.csrf,
	})
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	id := r.PathValue("id")
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" {
		reason = "cancelled from the console by " + ss.subject
	}
	if _, err := a.runs.CancelRun(ctx, as(ss, &toolfleetv1.CancelRunRequest{RunId: id, Reason: reason})); err != nil {
		s.failAPI(w, r, ss, "Cancelling run "+id, err)
		return
	}
	http.Redirect(w, r, runURL(id), http.StatusSeeOther)
}

func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	id := r.PathValue("id")
	text := strings.TrimSpace(r.PostFormValue("text"))
	if text == "" {
		s.fail(w, r, ss, http.StatusBadRequest, "The message is empty: go back and write one.")
		return
	}
	if _, err := a.runs.SendMessage(ctx, as(ss, &toolfleetv1.SendMessageRequest{RunId: id, Message: userText(text)})); err != nil {
		s.failAPI(w, r, ss, "Sending the message to run "+id, err)
		return
	}
	http.Redirect(w, r, runURL(id), http.StatusSeeOther)
}

// decision reads an approve/deny form: the decision, the call and the reason.
func decision(r *http.Request) (callID, reason string, approved bool, ok bool) {
	callID = r.PostFormValue("call_id")
	switch r.PostFormValue("decision") {
	case "approve":
		approved = true
	case "deny":
	default:
		return "", "", false, false
	}
	return callID, strings.TrimSpace(r.PostFormValue("reason")), approved, callID != ""
}

// back is where a decision form returns to: the inbox or the run page.
func back(r *http.Request, fallback string) string {
	if r.PostFormValue("back") == "inbox" {
		return Prefix + "inbox"
	}
	return fallback
}

func (s *Server) decideRun(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	id := r.PathValue("id")
	callID, reason, approved, ok := decision(r)
	if !ok {
		s.fail(w, r, ss, http.StatusBadRequest, "Choose approve or deny for a call.")
		return
	}
	_, err := a.runs.DecideApproval(ctx, as(ss, &toolfleetv1.DecideApprovalRequest{RunId: id, CallId: callID, Approved: approved, Reason: reason}))
	if err != nil {
		s.failAPI(w, r, ss, "Deciding call "+callID, err)
		return
	}
	s.forgetInbox(ss)
	http.Redirect(w, r, back(r, runURL(id)), http.StatusSeeOther)
}
