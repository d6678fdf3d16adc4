package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

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
			v.OwnerURL, v.DecideURL = programURL(owner), programURL(owner)+"/decide"
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
	Questions                                       []questionView
	CSRF                                            string
}

func summarize(g *toolfleetv1.GetRunResponse, csrf string) summaryView {
	st := runStatus(g.GetStatus())
	v := summaryView{RunID: g.GetRunId(), Status: st, Started: when(g.GetStartedAt()), Failure: g.GetFailureMessage(),
		Answer: g.GetAnswer(), Budget: g.GetBudget(), Turns: g.GetTurns(), ToolCalls: g.GetToolCalls(),
		InputTokens: g.GetUsage().GetInputTokens(), OutputTokens: g.GetUsage().GetOutputTokens(), Idle: g.GetIdle(),
		Approvals: approvalViews("run", g.GetRunId(), g.GetPendingApprovals()),
		Questions: questionViews("run", g.GetRunId(), g.GetPendingQuestions()), CSRF: csrf}
	switch g.GetStatus() {
	case toolfleetv1.RunStatus_RUN_STATUS_COMPLETED, toolfleetv1.RunStatus_RUN_STATUS_FAILED,
		toolfleetv1.RunStatus_RUN_STATUS_CANCELED, toolfleetv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED:
		v.Finished = true
	}
	return v
}

func (s *Server) runPage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	s.renderRun(w, r, ss, a, r.PathValue("id"), http.StatusOK, nil)
}

// renderRun renders run id's page with status; refused, when set, shows an
// answer the API refused beside its question (questions.go).
func (s *Server) renderRun(w http.ResponseWriter, r *http.Request, ss *session, a *apis, id string, status int, refused *refusal) {
	ctx, cancel := callCtx(r)
	defer cancel()
	got, err := a.runs.GetRun(ctx, as(ss, &toolfleetv1.GetRunRequest{RunId: id, Detail: true}))
	if err != nil {
		s.failAPI(w, r, ss, "Run "+id, err)
		return
	}
	sum := summarize(got.Msg, ss.csrf)
	sum.Questions = refused.apply(sum.Questions, "run", id)
	d := got.Msg.GetDetail()
	if status != http.StatusOK {
		w.WriteHeader(status)
	}
	s.render(w, r, ss, "run", status, map[string]any{
		"ID": id, "URL": runURL(id), "Summary": sum, "CSRF": ss.csrf,
		"Calls": runCallViews(d.GetCalls()), "Truncated": d.GetCallsTruncated(), "Model": d.GetModel(),
		"Budgets": budgetViews(got.Msg, d.GetBudget()), "Temporal": s.temporalLink(d.GetWorkflowId(), d.GetWorkflowRunId()),
		// A completed run takes a follow-up message (SendMessage continues it);
		// a failed, cancelled or spent one stays closed.
		"CanMessage": !sum.Finished || sum.Status == "completed", "Continue": sum.Finished && sum.Status == "completed",
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
