package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/internal/jsonerr"
)

// The task methods (docs/mcp.md "Tasks"): create, get, result, cancel,
// update and list, each against the Tasks backend, and a task's wire form.

// createTask starts a task for a tools/call.
func (s *Server) createTask(ctx context.Context, tb Tasks, kind TaskKind, builtin bool, p taskParams, rev revision) (any, *jsonrpc.Error) {
	start := TaskStart{Kind: kind, Input: &structpb.Struct{}}
	if raw := p.Arguments; len(raw) > 0 && string(raw) != "null" {
		if err := protojson.Unmarshal(raw, start.Input); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("arguments of %s must be a JSON object: %v", p.Name, jsonerr.Describe(raw, err))}
		}
	}
	if !builtin {
		id, jerr := s.callable(ctx, p.Name)
		if jerr != nil {
			return nil, jerr
		}
		start.Kind, start.ToolID = TaskToolCall, id
		if rev.extension {
			if start.Answers, start.RequestState, jerr = taskAnswers(p, rev, s.needsInput(p.Name)); jerr != nil {
				return nil, jerr
			}
		}
	}
	start.AskPeople = rev.extension && rev.can("elicitation")
	st, err := tb.StartTask(ctx, start)
	if err != nil {
		return nil, asRPC(ctx, err)
	}
	if rev.extension {
		out := s.taskWire(st, rev, false)
		out["resultType"] = "task"
		return out, nil
	}
	return map[string]any{"task": s.taskWire(st, rev, false),
		"_meta": map[string]any{"io.modelcontextprotocol/model-immediate-response": fmt.Sprintf(
			"Started task %s (%s); its result comes later.", st.ID, p.Name)}}, nil
}

// getTask answers tasks/get.
func (s *Server) getTask(ctx context.Context, tb Tasks, id string, rev revision) (any, *jsonrpc.Error) {
	st, err := tb.GetTask(ctx, id)
	if err != nil {
		return nil, taskLookupError(ctx, err)
	}
	if rev.extension && st.Status == TaskInputRequired {
		connectLinks(ctx, tb, st.Questions)
	}
	out := s.taskWire(st, rev, rev.extension)
	if rev.extension {
		out["resultType"] = "complete"
	}
	return out, nil
}

// connectLinks fills the URL of the connect items of qs when tb can make
// links; one that cannot be made leaves the item's message to say how.
func connectLinks(ctx context.Context, tb Tasks, qs []TaskQuestion) {
	cl, ok := tb.(ConnectLinker)
	if !ok {
		return
	}
	for i := range qs {
		if qs[i].Provider == "" {
			continue
		}
		if url, err := cl.ConnectLink(ctx, qs[i].Provider, qs[i].Scopes); err == nil {
			qs[i].URL = url
		}
	}
}

// taskResult answers tasks/result (2025-11-25): it waits (at most
// Options.TaskResultWait, and while the client waits) for the task to end,
// then returns what the tools/call would have.
func (s *Server) taskResult(ctx context.Context, tb Tasks, id string) (any, *jsonrpc.Error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.TaskResultWait)
	defer cancel()
	t := time.NewTicker(s.opts.TaskPollInterval)
	defer t.Stop()
	for {
		st, err := tb.GetTask(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return nil, stillRunning(id, s.opts.TaskResultWait)
			}
			return nil, taskLookupError(ctx, err)
		}
		if st.Status.terminal() {
			res, jerr := s.outcome(ctx, st)
			related := map[string]any{metaRelatedTask: map[string]any{"taskId": st.ID}}
			if jerr != nil {
				data, _ := json.Marshal(map[string]any{"_meta": related, "cause": json.RawMessage(orNull(jerr.Data))})
				return nil, &jsonrpc.Error{Code: jerr.Code, Message: jerr.Message, Data: data}
			}
			if res.Meta == nil {
				res.Meta = sdk.Meta{}
			}
			res.Meta[metaRelatedTask] = related[metaRelatedTask]
			return res, nil
		}
		select {
		case <-ctx.Done():
			return nil, stillRunning(id, s.opts.TaskResultWait)
		case <-t.C:
		}
	}
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// stillRunning is the answer of a tasks/result that waited its bound.
func stillRunning(id string, waited time.Duration) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
		"task %s is still running after %s (this server's bound on tasks/result); call tasks/result again or poll tasks/get", id, waited)}
}

// cancelTask answers tasks/cancel: at 2026-07-28 an acknowledgement; at
// 2025-11-25 the task once cancelled (a terminal task is refused).
func (s *Server) cancelTask(ctx context.Context, tb Tasks, id string, rev revision) (any, *jsonrpc.Error) {
	st, err := tb.GetTask(ctx, id)
	if err != nil {
		return nil, taskLookupError(ctx, err)
	}
	if st.Status.terminal() {
		if rev.extension {
			return map[string]any{"resultType": "complete"}, nil // cooperative: nothing left to stop
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("task %s is already %s", id, st.Status)}
	}
	if err := tb.CancelTask(ctx, id); err != nil {
		return nil, taskLookupError(ctx, err)
	}
	if rev.extension {
		return map[string]any{"resultType": "complete"}, nil
	}
	// 2025-11-25: answer with the cancelled task; Temporal cancels
	// cooperatively, so wait (bounded) until the workflow says so.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if st, err = tb.GetTask(wctx, id); err == nil && st.Status.terminal() {
			break
		}
		select {
		case <-wctx.Done():
			st = &TaskState{ID: id, Status: TaskWorking, CreatedAt: st.CreatedAt, UpdatedAt: time.Now(),
				Message: "cancellation requested; the task has not stopped yet"}
			return s.taskWire(st, rev, false), nil
		case <-time.After(100 * time.Millisecond):
		}
	}
	return s.taskWire(st, rev, false), nil
}

// updateTask answers tasks/update: approval answers to the task's waiting
// calls. Keys that are not outstanding are ignored, as the extension says.
func (s *Server) updateTask(ctx context.Context, tb Tasks, id string, answers map[string]json.RawMessage) (any, *jsonrpc.Error) {
	st, err := tb.GetTask(ctx, id)
	if err != nil {
		return nil, taskLookupError(ctx, err)
	}
	waiting := map[string]bool{}
	for _, a := range st.Approvals {
		waiting[a.CallID] = true
	}
	if jerr := s.answerQuestions(ctx, tb, id, st.Questions, answers); jerr != nil {
		return nil, jerr
	}
	for key, answer := range answers {
		callID, ok := cutPrefix(key, TaskApprovalPrefix)
		if !ok || !waiting[callID] {
			continue
		}
		var probe struct {
			Action *string `json:"action"`
		}
		var er sdk.ElicitResult
		if json.Unmarshal(answer, &probe) != nil || probe.Action == nil || json.Unmarshal(answer, &er) != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("inputResponses[%q] must be an elicitation result", key)}
		}
		approve, _ := er.Content["approve"].(bool)
		approve = approve && er.Action == "accept"
		reason := "declined in the MCP client"
		if approve {
			reason = ""
		}
		if err := tb.DecideTask(ctx, id, callID, approve, reason); err != nil {
			return nil, taskLookupError(ctx, err)
		}
	}
	return map[string]any{"resultType": "complete"}, nil
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return "", false
}

// badCursor answers a tasks/list cursor this server did not issue (made up,
// garbled, or another caller's): -32602 at once, never a server error.
const badCursor = "the cursor is not one this server issued; start again without it"

// listTasks answers tasks/list (2025-11-25): the caller's tasks, one bounded page.
func (s *Server) listTasks(ctx context.Context, tb Tasks, cursor string) (any, *jsonrpc.Error) {
	if len(cursor) > 4096 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: badCursor}
	}
	list, next, err := tb.ListTasks(ctx, cursor, s.opts.TaskPageSize)
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: badCursor}
		}
		return nil, asRPC(ctx, err)
	}
	tasks := make([]map[string]any, 0, len(list))
	for _, st := range list {
		tasks = append(tasks, s.taskWire(st, revision{}, false))
	}
	out := map[string]any{"tasks": tasks}
	if next != "" {
		out["nextCursor"] = next
	}
	return out, nil
}

// taskWire renders a task for a revision; detailed adds the status payload of
// the extension's tasks/get (inputRequests, result, error).
func (s *Server) taskWire(st *TaskState, rev revision, detailed bool) map[string]any {
	status := st.Status
	var res *sdk.CallToolResult
	var jerr *jsonrpc.Error
	if status == TaskCompleted {
		res, jerr = s.outcome(context.Background(), st)
		switch {
		case jerr != nil:
			status = TaskFailed
		case res.IsError && !rev.extension:
			status = TaskFailed // 2025-11-25: an isError result is a failed task
		}
	}
	updated := st.UpdatedAt
	if updated.IsZero() {
		updated = time.Now()
	}
	out := map[string]any{"taskId": st.ID, "status": string(status),
		"createdAt": st.CreatedAt.UTC().Format(time.RFC3339Nano), "lastUpdatedAt": updated.UTC().Format(time.RFC3339Nano)}
	msg := st.Message
	if msg == "" && jerr != nil {
		msg = jerr.Message
	}
	if msg != "" {
		out["statusMessage"] = msg
	}
	ttl, poll := s.opts.TaskTTL.Milliseconds(), s.opts.TaskPollInterval.Milliseconds()
	if rev.extension {
		out["ttlMs"], out["pollIntervalMs"] = ttl, poll
	} else {
		out["ttl"], out["pollInterval"] = ttl, poll
	}
	if !detailed {
		return out
	}
	switch status {
	case TaskInputRequired:
		reqs := sdk.InputRequestMap{}
		for _, a := range st.Approvals {
			reqs[TaskApprovalPrefix+a.CallID] = approvalQuestion(a.ToolID, orEmpty(a.Arguments), "the task waits for this approval").InputRequests[ApprovalInput]
		}
		for _, q := range st.Questions {
			reqs[q.inputKey()] = questionRequest(q, rev)
		}
		out["inputRequests"] = reqs
	case TaskCompleted:
		out["result"] = res
	case TaskFailed:
		if jerr != nil {
			out["error"] = map[string]any{"code": jerr.Code, "message": jerr.Message, "data": json.RawMessage(orNull(jerr.Data))}
		} else {
			out["error"] = map[string]any{"code": jsonrpc.CodeInternalError, "message": orDefault(st.Message, "the task failed")}
		}
	}
	return out
}

func orEmpty(s *structpb.Struct) *structpb.Struct {
	if s == nil {
		return &structpb.Struct{}
	}
	return s
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// outcome renders a completed task's outcome as the tools/call would have:
// a result (possibly isError; content blocks for a tool whose results are
// content), or a JSON-RPC error.
func (s *Server) outcome(ctx context.Context, st *TaskState) (*sdk.CallToolResult, *jsonrpc.Error) {
	switch {
	case st.Status == TaskCancelled:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("task %s was cancelled", st.ID)}
	case st.Status == TaskFailed:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: orDefault(st.Message, "the task failed")}
	case st.Err != nil:
		res, err := failure(ctx, "", st.Err)
		if err != nil {
			var je *jsonrpc.Error
			if errors.As(err, &je) {
				return nil, je
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task failed"}
		}
		return res, nil
	case st.Response != nil:
		res, err := result(st.Response, s.isContent(st.Response.GetToolId()))
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task's result could not be rendered"}
		}
		return res, nil
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "null"}}}, nil
}

// taskLookupError maps a backend error for a task id: NOT_FOUND (and an
// invalid id) is the spec's -32602 "task not found", for unknown and
// other callers' tasks alike.
func taskLookupError(ctx context.Context, err error) *jsonrpc.Error {
	switch status.Code(err) {
	case codes.NotFound, codes.InvalidArgument:
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
	}
	return asRPC(ctx, err)
}

// asRPC renders a backend error as a JSON-RPC error (see [rpcError]).
func asRPC(ctx context.Context, err error) *jsonrpc.Error {
	var je *jsonrpc.Error
	if errors.As(rpcError(ctx, "", err), &je) {
		return je
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the request was cancelled"}
}

// questionRequest is the elicitation of a task's question: a form, or for a
// connect item with a link, a url-mode elicitation to a client that
// declared elicitation.url (any other reads the link in the message). The
// elicitation id names the link (single use). Once the person has connected,
// the gateway resumes the call itself; the client's accept changes nothing.
func questionRequest(q TaskQuestion, rev revision) *sdk.ElicitParams {
	msg := q.Message
	if q.Provider != "" && q.URL != "" {
		if rev.urlElicitation {
			sum := sha256.Sum256([]byte(q.URL))
			return &sdk.ElicitParams{Mode: "url", Message: msg, URL: q.URL, ElicitationID: hex.EncodeToString(sum[:16])}
		}
		msg += " Connect at " + q.URL + " ."
	}
	p := &sdk.ElicitParams{Mode: "form", Message: msg}
	if q.Schema != nil {
		p.RequestedSchema = q.Schema.AsMap()
	}
	return p
}
