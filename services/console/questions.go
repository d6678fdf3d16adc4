package console

import (
	"net/http"
	"net/url"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// A tool's question (MCP's elicitation) waits in a run or a program until
// a person answers it. The inbox shows it as a form generated from its
// requested schema by the try-it generator (formFields), and posts the
// answer to runs/{id}/answer or programs/{id}/answer, which call
// AnswerInput or AnswerProgramInput with the session's token: the API
// checks the principal and validates the answer.

// questionView is a question waiting for an answer.
type questionView struct {
	Kind, OwnerID, OwnerURL, AnswerURL string
	CallID, ToolID, Key, Message       string
	Since, Requested, Expires          string
	Fields                             []formField
	// Provider and Scopes: the call waits for the principal to connect this
	// provider's account (method toolfleet/connect). The item then offers
	// the connections page's connect (a fresh flow of the session's own;
	// no URL is ever kept in the run) and an answer without fields.
	Provider string
	Scopes   []string
	// Problem is the API's refusal of the last answer to this question.
	Problem string
}

// answerActions are the answers a person can give (MCP's elicitation actions).
var answerActions = map[string]bool{"accept": true, "decline": true, "cancel": true}

func questionViews(kind, owner string, qs []*toolfleetv1.PendingQuestion) []questionView {
	out := make([]questionView, 0, len(qs))
	for _, q := range qs {
		v := questionView{Kind: kind, OwnerID: owner, CallID: q.GetCallId(), ToolID: q.GetToolId(), Key: q.GetKey(),
			Message: q.GetMessage(), Requested: when(q.GetRequestedAt()), Since: since(q.GetRequestedAt()),
			Fields: formFields(q.GetRequestedSchema(), nil), Provider: q.GetConnectProvider(), Scopes: q.GetConnectScopes()}
		if q.GetExpiresAt() != nil {
			v.Expires = when(q.GetExpiresAt())
		}
		if kind == "run" {
			v.OwnerURL = runURL(owner)
		} else {
			v.OwnerURL = programURL(owner)
		}
		v.AnswerURL = v.OwnerURL + "/answer"
		out = append(out, v)
	}
	return out
}

func questionItems(v []questionView) []inboxItem {
	out := make([]inboxItem, 0, len(v))
	for i := range v {
		out = append(out, inboxItem{Kind: "question", Question: &v[i]})
	}
	return out
}

// questionForm is what the "question" fragment renders; Back is the page
// the answer returns to ("inbox", "run" or "program").
type questionForm struct {
	Q    questionView
	CSRF string
	Back string
}

// refusal is an answer the API refused: its question and the words, and
// the values posted, shown again beside the question.
type refusal struct {
	q       *toolfleetv1.PendingQuestion
	problem string
	posted  url.Values
}

// apply marks the refused question among views (of kind's owner id), or
// adds it first when it is not among them. A nil refusal changes nothing.
func (f *refusal) apply(views []questionView, kind, id string) []questionView {
	if f == nil {
		return views
	}
	for i := range views {
		if views[i].CallID == f.q.GetCallId() && views[i].Key == f.q.GetKey() {
			views[i].Problem, views[i].Fields = f.problem, formFields(f.q.GetRequestedSchema(), f.posted)
			return views
		}
	}
	v := questionViews(kind, id, []*toolfleetv1.PendingQuestion{f.q})[0]
	v.Problem, v.Fields = f.problem, formFields(f.q.GetRequestedSchema(), f.posted)
	return append([]questionView{v}, views...)
}

func (s *Server) answerRun(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	s.answer(w, r, ss, a, "run")
}

func (s *Server) answerProgram(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	s.answer(w, r, ss, a, "program")
}

// answer sends the form's answer to the question of call_id and key in the
// run or program of the path. The question is read first (as the
// principal: another one's run is not found) for the schema the form's
// values are typed by; a refused answer shows the inbox again with the
// API's words beside the question and the values as they were posted.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, ss *session, a *apis, kind string) {
	ctx, cancel := callCtx(r)
	defer cancel()
	id := r.PathValue("id")
	callID, key, action := r.PostFormValue("call_id"), r.PostFormValue("key"), r.PostFormValue("action")
	if callID == "" || !answerActions[action] {
		s.fail(w, r, ss, http.StatusBadRequest, "Choose submit, decline or cancel for a question.")
		return
	}
	what := "Question " + key + " of call " + callID
	var pending []*toolfleetv1.PendingQuestion
	if kind == "run" {
		got, err := a.runs.GetRun(ctx, as(ss, &toolfleetv1.GetRunRequest{RunId: id}))
		if err != nil {
			s.failAPI(w, r, ss, "Run "+id, err)
			return
		}
		pending = got.Msg.GetPendingQuestions()
	} else {
		got, err := a.programs.GetProgram(ctx, as(ss, &toolfleetv1.GetProgramRequest{ProgramId: id}))
		if err != nil {
			s.failAPI(w, r, ss, "Program "+id, err)
			return
		}
		pending = got.Msg.GetPendingQuestions()
	}
	q := findQuestion(pending, callID, key)
	if q == nil {
		s.fail(w, r, ss, http.StatusNotFound, what+" is not waiting for an answer: it was answered, or its call ended.")
		return
	}
	var content *structpb.Struct
	if action == "accept" {
		in, problem := formInput(q.GetRequestedSchema(), r.PostForm)
		if problem != "" {
			s.refusedAnswer(w, r, ss, a, kind, id, q, problem)
			return
		}
		content = in
	}
	var err error
	if kind == "run" {
		_, err = a.runs.AnswerInput(ctx, as(ss, &toolfleetv1.AnswerInputRequest{RunId: id, CallId: callID, Key: q.GetKey(), Action: action, Content: content}))
	} else {
		_, err = a.programs.AnswerProgramInput(ctx, as(ss, &toolfleetv1.AnswerProgramInputRequest{ProgramId: id, CallId: callID, Key: q.GetKey(), Action: action, Content: content}))
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		s.refusedAnswer(w, r, ss, a, kind, id, q, messageOf(err))
		return
	}
	if err != nil {
		s.failAPI(w, r, ss, what, err)
		return
	}
	s.forgetInbox(ss)
	http.Redirect(w, r, answerBack(r, kind, id), http.StatusSeeOther)
}

// answerBack is where an answer form returns to: its owner's page when it
// was posted there, else the inbox.
func answerBack(r *http.Request, kind, id string) string {
	switch {
	case r.PostFormValue("back") == "run" && kind == "run":
		return runURL(id)
	case r.PostFormValue("back") == "program" && kind == "program":
		return programURL(id)
	}
	return Prefix + "inbox"
}

// findQuestion is the question of callID and key among pending; an empty
// key names the call's only question.
func findQuestion(pending []*toolfleetv1.PendingQuestion, callID, key string) *toolfleetv1.PendingQuestion {
	var found *toolfleetv1.PendingQuestion
	n := 0
	for _, q := range pending {
		if q.GetCallId() != callID {
			continue
		}
		if q.GetKey() == key {
			return q
		}
		found, n = q, n+1
	}
	if key == "" && n == 1 {
		return found
	}
	return nil
}

// refusedAnswer shows the inbox (422) with problem beside the question and
// its form holding the values posted.
func (s *Server) refusedAnswer(w http.ResponseWriter, r *http.Request, ss *session, a *apis, kind, id string, q *toolfleetv1.PendingQuestion, problem string) {
	// Posted on the run's or program's page: that page again, the problem beside.
	switch back := answerBack(r, kind, id); back {
	case runURL(id):
		s.renderRun(w, r, ss, a, id, http.StatusUnprocessableEntity, &refusal{q: q, problem: problem, posted: r.PostForm})
		return
	case programURL(id):
		s.renderProgram(w, r, ss, a, id, http.StatusUnprocessableEntity, &refusal{q: q, problem: problem, posted: r.PostForm})
		return
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	items, err := pending(ctx, ss, a)
	d := inboxData{Items: items, CSRF: ss.csrf}
	if err != nil {
		d.Problem = "Some of your runs or programs could not be read: " + messageOf(err)
	}
	shown := false
	for _, it := range items {
		if v := it.Question; v != nil && v.Kind == kind && v.OwnerID == id && v.CallID == q.GetCallId() && v.Key == q.GetKey() {
			v.Problem, v.Fields, shown = problem, formFields(q.GetRequestedSchema(), r.PostForm), true
		}
	}
	if !shown { // not listed (e.g. beyond the scan): show it alone
		v := questionViews(kind, id, []*toolfleetv1.PendingQuestion{q})[0]
		v.Problem, v.Fields = problem, formFields(q.GetRequestedSchema(), r.PostForm)
		d.Items = append([]inboxItem{{Kind: "question", Question: &v}}, d.Items...)
	}
	w.WriteHeader(http.StatusUnprocessableEntity)
	s.render(w, r, ss, "inbox", http.StatusUnprocessableEntity, d)
}
