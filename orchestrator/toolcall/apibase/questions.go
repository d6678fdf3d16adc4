package apibase

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// What the AgentService and the ProgramService share of a tool's questions.

// PendingQuestions renders a workflow's pending questions for the API.
func PendingQuestions(qs []toolcall.Question) []*toolfleetv1.PendingQuestion {
	out := make([]*toolfleetv1.PendingQuestion, 0, len(qs))
	for _, q := range qs {
		pq := &toolfleetv1.PendingQuestion{CallId: q.CallID, ToolId: q.ToolID, Key: q.Key, Method: q.Method, Message: q.Message,
			RequestedAt: timestamppb.New(q.RequestedAt), ExpiresAt: timestamppb.New(q.ExpiresAt),
			ConnectProvider: q.Provider, ConnectScopes: slices.Clone(q.Scopes)}
		if q.SchemaJSON != "" {
			s := &structpb.Struct{}
			if protojson.Unmarshal([]byte(q.SchemaJSON), s) == nil {
				pq.RequestedSchema = s
			}
		}
		out = append(out, pq)
	}
	return out
}

// ReplyOf builds a reply from an API request: action defaults to accept,
// content is bounded; answerer is the caller's subject ("anonymous" with
// auth off).
func ReplyOf(callID, key, action string, content *structpb.Struct, answerer string) (toolcall.Reply, error) {
	if callID == "" {
		return toolcall.Reply{}, errors.New("call_id is required")
	}
	if action == "" {
		action = toolcall.ActionAccept
	}
	if answerer == "" {
		answerer = "anonymous"
	}
	reply := toolcall.Reply{CallID: callID, Key: key, Action: action, Answerer: answerer}
	if content != nil {
		b, err := protojson.Marshal(content)
		if err != nil {
			return reply, fmt.Errorf("content: %w", err)
		}
		if len(b) > toolcall.MaxAnswerBytes {
			return reply, fmt.Errorf("the answer is %d bytes: at most %d", len(b), toolcall.MaxAnswerBytes)
		}
		reply.ContentJSON = string(b)
	}
	return reply, nil
}

// FindQuestion finds the question reply answers among pending, filling in
// reply.Key when the call has one open question; open is the number of the
// call's questions still open.
func FindQuestion(pending []toolcall.Question, reply *toolcall.Reply) (q toolcall.Question, open int, err error) {
	var ofCall []toolcall.Question
	for _, p := range pending {
		if p.CallID == reply.CallID {
			ofCall = append(ofCall, p)
		}
	}
	if len(ofCall) == 0 {
		return q, 0, fmt.Errorf("call %q has no question waiting for an answer", reply.CallID)
	}
	if reply.Key == "" {
		if len(ofCall) > 1 {
			keys := make([]string, len(ofCall))
			for i, p := range ofCall {
				keys[i] = p.Key
			}
			return q, 0, fmt.Errorf("call %q asks %d questions (%v): name one with key", reply.CallID, len(ofCall), keys)
		}
		reply.Key = ofCall[0].Key
	}
	i := slices.IndexFunc(ofCall, func(p toolcall.Question) bool { return p.Key == reply.Key })
	if i < 0 {
		return q, 0, fmt.Errorf("call %q has no question %q waiting for an answer", reply.CallID, reply.Key)
	}
	return ofCall[i], len(ofCall), nil
}

// MaxResumeScan bounds the runs (or programs) of one principal that
// ResumeConnected reads after a connection is made.
const MaxResumeScan = 100

// ResumeConnected answers, as subject, every item of the open runs or
// programs ids that waits for subject to connect provider: pending reads
// one's pending items (an error skips it: ended or restarting in between),
// answer sends one reply (a refusal skips it: answered meanwhile). It
// returns how many items it answered.
func ResumeConnected(ctx context.Context, ids []string, subject, provider string,
	pending func(ctx context.Context, id string) ([]toolcall.Question, error),
	answer func(ctx context.Context, id string, reply toolcall.Reply) error) int {
	n := 0
	for _, id := range ids {
		qs, err := pending(ctx, id)
		if err != nil {
			continue
		}
		for _, reply := range ConnectReplies(qs, provider, subject) {
			if answer(ctx, id, reply) == nil {
				n++
			}
		}
	}
	return n
}

// ConnectReplies are the answers that resume every item of pending waiting
// for its principal to connect provider: accept, by answerer (the principal,
// who just connected). The call is then made again under its call id; if the
// gateway still finds no connection it waits again.
func ConnectReplies(pending []toolcall.Question, provider, answerer string) []toolcall.Reply {
	var out []toolcall.Reply
	for _, q := range pending {
		if q.Method == toolcall.MethodConnect && q.Provider == provider {
			out = append(out, toolcall.Reply{CallID: q.CallID, Key: q.Key, Action: toolcall.ActionAccept, Answerer: answerer})
		}
	}
	return out
}
