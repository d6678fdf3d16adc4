package toolcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// A tool's questions inside the durable half.
//
// A tool may ask its caller for input during a call (sdk/tool.AskInput): the
// gateway answers the call with input_required and a sealed request_state.
// Inside a run or a program the caller is the workflow, and the person it
// serves answers: the call activity hands the questions back ([Asked]), the
// workflow keeps them as pending input ([Desk], durable like an approval,
// answered with a validated Update), and when every question of the round
// has an answer the call is made again with the same call id, the answers
// and the sealed state. Workflows that take no questions do not declare any
// client input, so the gateway refuses a tool that needs it before it runs,
// and a tool that asks anyway gets [Call.Declined] as its result.

// Bounds of pending input.
const (
	// MaxAnswerBytes bounds one answer's content (JSON).
	MaxAnswerBytes = 64 << 10
	// MaxPendingQuestions bounds the questions waiting in one workflow.
	MaxPendingQuestions = tool.MaxInputRequests
	// MaxInputRounds bounds the rounds of questions of one call: a tool that
	// keeps asking still ends.
	MaxInputRounds = 8
	// maxQuestionParamsBytes bounds the message and schema kept in history
	// per question.
	maxQuestionParamsBytes = 32 << 10
)

// Event kinds of questions (published on the run events' subjects).
const (
	EventInputRequested = "input.requested"
	EventInputAnswered  = "input.answered"
)

// Answer actions (MCP's ElicitResult.action).
const (
	ActionAccept  = "accept"
	ActionDecline = "decline"
	ActionCancel  = "cancel"
)

// AskedRequest is one question of a round, as the gateway relayed it.
type AskedRequest struct {
	Key    string `json:"key"`
	Method string `json:"method"`
	// ParamsJSON is the MCP params of Method (message, requestedSchema).
	ParamsJSON string `json:"params_json,omitempty"`
}

// Asked is a call's round of questions: what the call activity returns
// instead of a result when the tool asked for input.
type Asked struct {
	Requests []AskedRequest `json:"requests"`
	// State is the gateway's sealed request_state, echoed on the next round.
	State string `json:"state"`
}

// askedOf reads the gateway's input_required, requests sorted by key (the
// gateway's map has no order; history must).
func askedOf(ir *toolfleetv1.InputRequired) *Asked {
	a := &Asked{State: ir.GetRequestState()}
	for key, r := range ir.GetRequests() {
		params, err := protojson.Marshal(r.GetParams())
		if err != nil || len(params) > maxQuestionParamsBytes {
			params = nil
		}
		a.Requests = append(a.Requests, AskedRequest{Key: key, Method: r.GetMethod(), ParamsJSON: string(params)})
	}
	sort.Slice(a.Requests, func(i, j int) bool { return a.Requests[i].Key < a.Requests[j].Key })
	return a
}

// Question is one question pending in a workflow.
type Question struct {
	CallID string `json:"call_id"`
	ToolID string `json:"tool_id"`
	Key    string `json:"key"`
	Method string `json:"method"`
	// Message is what the tool says; SchemaJSON the answer's JSON Schema.
	Message     string    `json:"message,omitempty"`
	SchemaJSON  string    `json:"schema_json,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// Reply is the argument of the answer Update: one question's answer.
type Reply struct {
	CallID string `json:"call_id"`
	Key    string `json:"key"`
	// Action is accept, decline or cancel; ContentJSON the accepted fields.
	Action      string `json:"action"`
	ContentJSON string `json:"content_json,omitempty"`
	Answerer    string `json:"answerer"`
}

// Desk holds the pending questions of one workflow execution and their
// replies. Workflow code: install it with [Desk.Register], then [Desk.Ask]
// per round.
type Desk struct {
	pending []Question
	replies map[string]Reply
}

// NewDesk returns an empty desk.
func NewDesk() *Desk { return &Desk{replies: map[string]Reply{}} }

// Pending returns a copy of the questions waiting for a reply, in request
// order. A question already answered is not waiting any more, though its
// round still waits for the others: answered one at a time, the questions
// of a round leave the list one at a time.
func (d *Desk) Pending() []Question {
	return slices.DeleteFunc(slices.Clone(d.pending), func(q Question) bool {
		_, answered := d.replies[replyKey(q.CallID, q.Key)]
		return answered
	})
}

func replyKey(callID, key string) string { return callID + "\x00" + key }

// Register installs the answer Update under name. Its validator refuses a
// reply without an answerer, for a question that is not waiting or already
// answered, with an unknown action, or whose content is too large or does
// not match the question's schema; a refused Update leaves no trace in history.
func (d *Desk) Register(ctx workflow.Context, name string) error {
	err := workflow.SetUpdateHandlerWithOptions(ctx, name,
		func(_ workflow.Context, r Reply) error {
			d.replies[replyKey(r.CallID, r.Key)] = r
			return nil
		},
		workflow.UpdateHandlerOptions{Validator: d.validate})
	if err != nil {
		return fmt.Errorf("toolcall: answer update %s: %w", name, err)
	}
	return nil
}

func (d *Desk) validate(r Reply) error {
	if r.Answerer == "" {
		return errors.New("an answer needs an answerer")
	}
	i := slices.IndexFunc(d.pending, func(q Question) bool { return q.CallID == r.CallID && q.Key == r.Key })
	if _, done := d.replies[replyKey(r.CallID, r.Key)]; done || i < 0 {
		return fmt.Errorf("call %q has no question %q waiting for an answer", r.CallID, r.Key)
	}
	return CheckReply(d.pending[i], r)
}

// CheckReply checks r against q: a known action, and for accept content
// within [MaxAnswerBytes] that matches q's schema. Its errors speak to the
// person who answered.
func CheckReply(q Question, r Reply) error {
	switch r.Action {
	case ActionDecline, ActionCancel:
		if r.ContentJSON != "" {
			return fmt.Errorf("a %s carries no content", r.Action)
		}
		return nil
	case ActionAccept:
	default:
		return fmt.Errorf("action %q: want accept, decline or cancel", r.Action)
	}
	if len(r.ContentJSON) > MaxAnswerBytes {
		return fmt.Errorf("the answer is %d bytes: at most %d", len(r.ContentJSON), MaxAnswerBytes)
	}
	return CheckContent(q.SchemaJSON, r.ContentJSON)
}

// Asking is one round of a call's questions, as [Desk.Ask] runs it.
type Asking struct {
	CallID, ToolID string
	Asked          *Asked
	// Wait is how long the round waits for its replies; Deadline, when set,
	// is the end of the workflow's own time ([ErrDeadline] after it).
	Wait     time.Duration
	Deadline time.Time
	// Announce publishes a question's event (kind, key, message).
	Announce func(ctx workflow.Context, kind, key, msg string)
	// Waiting is told true when questions start waiting, false when none
	// waits any more.
	Waiting func(bool)
}

// Ask makes the round's questions pending, waits for every reply, and
// returns the answers keyed as the tool asked (MCP ElicitResults) for the
// next round. unanswered, when not empty, is why the call cannot go on (a
// kind of question people do not answer, too many questions, no reply in
// time): the call's result says so. err is the context's error or
// [ErrDeadline].
func (d *Desk) Ask(ctx workflow.Context, a Asking) (answers map[string]string, unanswered string, err error) {
	now := workflow.Now(ctx)
	var round []Question
	for _, r := range a.Asked.Requests {
		if r.Method != tool.MethodElicit {
			return nil, fmt.Sprintf("the tool asked for %s, which only an interactive client answers, not the people of a run or program", r.Method), nil
		}
		q := Question{CallID: a.CallID, ToolID: a.ToolID, Key: r.Key, Method: r.Method, RequestedAt: now, ExpiresAt: now.Add(a.Wait)}
		var p struct {
			Message string          `json:"message"`
			Schema  json.RawMessage `json:"requestedSchema"`
		}
		if err := json.Unmarshal([]byte(r.ParamsJSON), &p); err != nil {
			return nil, "the tool's question " + r.Key + " could not be read", nil
		}
		q.Message, q.SchemaJSON = p.Message, string(p.Schema)
		round = append(round, q)
	}
	if len(round) == 0 {
		return nil, "the tool asked for input without a question", nil
	}
	if len(d.pending)+len(round) > MaxPendingQuestions {
		return nil, fmt.Sprintf("more than %d questions would wait at once", MaxPendingQuestions), nil
	}
	d.pending = append(d.pending, round...)
	a.Waiting(true)
	for _, q := range round {
		a.Announce(ctx, EventInputRequested, q.Key, q.Message)
	}
	answeredAll := func() bool {
		for _, q := range round {
			if _, ok := d.replies[replyKey(q.CallID, q.Key)]; !ok {
				return false
			}
		}
		return true
	}
	ok, err := workflow.AwaitWithTimeout(ctx, a.Wait, answeredAll)
	d.pending = slices.DeleteFunc(d.pending, func(p Question) bool { return p.CallID == a.CallID })
	if len(d.pending) == 0 {
		a.Waiting(false)
	}
	if err != nil {
		return nil, "", err
	}
	if !ok && !a.Deadline.IsZero() && !workflow.Now(ctx).Before(a.Deadline) {
		return nil, "", ErrDeadline
	}
	answers = map[string]string{}
	var missing []string
	for _, q := range round {
		r, got := d.replies[replyKey(q.CallID, q.Key)]
		delete(d.replies, replyKey(q.CallID, q.Key)) // the next round may reuse the key
		if !got {
			missing = append(missing, q.Key)
			continue
		}
		a.Announce(ctx, EventInputAnswered, q.Key, r.Action+" by "+r.Answerer)
		res := map[string]any{"action": r.Action}
		if r.Action == ActionAccept {
			res["content"] = json.RawMessage(orEmptyObject(r.ContentJSON))
		}
		b, _ := json.Marshal(res)
		answers[q.Key] = string(b)
	}
	if len(missing) > 0 {
		return nil, fmt.Sprintf("no answer to the tool's question (%s) within %s", missing[0], a.Wait), nil
	}
	return answers, "", nil
}

func orEmptyObject(s string) string {
	if s == "" {
		return "{}"
	}
	return s
}

// Responses turns answers ([Desk.Ask]) into a call's input_responses.
func Responses(answers map[string]string) (map[string]*structpb.Struct, error) {
	if len(answers) == 0 {
		return nil, nil
	}
	out := make(map[string]*structpb.Struct, len(answers))
	for k, v := range answers {
		s := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(v), s); err != nil {
			return nil, fmt.Errorf("toolcall: answer %q: %w", k, err)
		}
		out[k] = s
	}
	return out, nil
}
