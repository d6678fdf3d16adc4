package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/dialect"
)

// Activity defaults.
const (
	// DefaultInlineLimit is the largest tool result kept whole in the
	// transcript; larger ones are stored once as a blob and previewed.
	DefaultInlineLimit = 16 << 10
	// previewBytes is the size of the preview of a large result.
	previewBytes = 2 << 10
	// summaryBytes bounds the text previews that travel in history.
	summaryBytes = 160
	// maxTools bounds the tools one run may declare to a model.
	maxTools = 128
)

// ErrTypeModel is the error type of a model's non-retryable failure.
const ErrTypeModel = "ModelError"

// Activities are the agent run's activities; their dependencies are the
// fields. Register them with [Register].
type Activities struct {
	Store  *runstore.Store
	Events *Events
	// Gateway calls tools. Give it client.WithRetry(client.RetryPolicy{MaxAttempts: 1}):
	// retries are Temporal's, with the delay the tool asked for.
	Gateway *client.Client
	Models  Models
	// InlineLimit overrides DefaultInlineLimit.
	InlineLimit int
	// Metrics, when set, records runs, model turns and tool calls.
	Metrics *metrics.Metrics
}

func (a *Activities) inlineLimit() int {
	if a.InlineLimit > 0 {
		return a.InlineLimit
	}
	return DefaultInlineLimit
}

// PrepareRun resolves the run's tools (as the run's principal), stores their
// definitions as one blob and appends the initial messages.
func (a *Activities) PrepareRun(ctx context.Context, in PrepareInput) (PrepareResult, error) {
	defer toolcall.Heartbeat(ctx)()
	defs, err := a.resolveTools(toolcall.OnBehalfOf(ctx, in.Principal), in.Spec)
	if err != nil {
		return PrepareResult{}, err
	}
	// The model sees the tools, or in code mode run_program and a prompt
	// section with the tools as stubs; the workflow keeps the tools' summaries.
	offered, section := defs, ""
	if in.Spec.CodeMode {
		if section, err = program.PromptFor(defs); err != nil {
			return PrepareResult{}, temporal.NewNonRetryableApplicationError("code mode: "+err.Error(), toolcall.ErrTypeConfig, nil)
		}
		offered = []*toolfleetv1.ToolDefinition{runProgramDefinition()}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&toolfleetv1.ListToolsResponse{Tools: offered})
	if err != nil {
		return PrepareResult{}, fmt.Errorf("agent: encode tools: %w", err)
	}
	ref, err := a.Store.PutBlob(ctx, in.RunID, b)
	if err != nil {
		return PrepareResult{}, err
	}
	res := PrepareResult{ToolsRef: ref}
	for _, d := range defs {
		res.Tools = append(res.Tools, toolcall.ToolOf(d))
	}
	// A run id used before (a conversation continued after its workflow
	// closed) keeps its transcript and its turn numbers, so call ids stay unique.
	existing, err := a.Store.Load(ctx, in.RunID, -1)
	if err != nil {
		return PrepareResult{}, err
	}
	res.Seq = len(existing)
	for _, m := range existing {
		if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			res.Turn++
		}
	}
	if in.InputRef == "" {
		return res, nil
	}
	msgs, err := a.Store.Messages(ctx, in.InputRef)
	if err != nil {
		return PrepareResult{}, err
	}
	if section != "" {
		// A new transcript (or the one an earlier attempt started) opens with the section.
		if first := withProgramPrompt(msgs, section); len(existing) == 0 || (len(existing) == len(first) && hasTail(existing, first)) {
			msgs = first
		}
	}
	if hasTail(existing, msgs) {
		res.Seq -= len(msgs) // an earlier attempt appended them already
	}
	if err := a.Store.Append(ctx, in.RunID, res.Seq, msgs...); err != nil {
		return PrepareResult{}, err
	}
	res.Seq += len(msgs)
	return res, nil
}

// hasTail reports whether msgs are the last messages of all.
func hasTail(all, msgs []*toolfleetv1.Message) bool {
	if len(msgs) == 0 || len(msgs) > len(all) {
		return false
	}
	tail := all[len(all)-len(msgs):]
	for i := range msgs {
		if !proto.Equal(tail[i], msgs[i]) {
			return false
		}
	}
	return true
}

// resolveTools turns ids, globs and a search query into definitions, in the
// order given, without duplicates.
func (a *Activities) resolveTools(ctx context.Context, spec RunSpec) ([]*toolfleetv1.ToolDefinition, error) {
	var out []*toolfleetv1.ToolDefinition
	seen := map[string]bool{}
	add := func(d *toolfleetv1.ToolDefinition) {
		if !seen[d.GetId()] && len(out) < maxTools {
			seen[d.GetId()] = true
			out = append(out, d)
		}
	}
	var all []*toolfleetv1.ToolDefinition
	for _, pat := range spec.Tools {
		if !strings.ContainsAny(pat, "*?[") {
			d, err := a.Gateway.GetTool(ctx, pat)
			if err != nil {
				return nil, toolcall.Refusal(fmt.Sprintf("tool %q", pat), err)
			}
			add(d)
			continue
		}
		if all == nil {
			var err error
			if all, err = a.Gateway.Tools(ctx, nil); err != nil {
				return nil, toolcall.Refusal("list tools", err)
			}
		}
		matched := false
		for _, d := range all {
			bare := d.GetToolkit() + "." + d.GetName()
			if ok, _ := path.Match(pat, bare); ok {
				add(d)
				matched = true
			} else if ok, _ := path.Match(pat, d.GetModelName()); ok {
				add(d)
				matched = true
			}
		}
		if !matched {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("no tool matches %q", pat), toolcall.ErrTypeConfig, nil)
		}
	}
	if spec.ToolSearch != "" {
		resp, err := a.Gateway.SearchTools(ctx, &toolfleetv1.SearchToolsRequest{Query: spec.ToolSearch, Limit: 8})
		if err != nil {
			return nil, toolcall.Refusal("search tools", err)
		}
		for _, r := range resp.GetResults() {
			add(r.GetTool())
		}
	}
	return out, nil
}

// tools reads the definitions stored by PrepareRun.
func (a *Activities) tools(ctx context.Context, ref string) ([]*toolfleetv1.ToolDefinition, error) {
	if ref == "" {
		return nil, nil
	}
	b, err := a.Store.Blob(ctx, ref)
	if err != nil {
		return nil, err
	}
	resp := &toolfleetv1.ListToolsResponse{}
	if err := proto.Unmarshal(b, resp); err != nil {
		return nil, fmt.Errorf("agent: decode tools: %w", err)
	}
	return resp.GetTools(), nil
}

// AppendInput appends the messages of a blob (SendMessage) and returns how many.
func (a *Activities) AppendInput(ctx context.Context, in AppendInput) (int, error) {
	defer toolcall.Heartbeat(ctx)()
	msgs, err := a.Store.Messages(ctx, in.Ref)
	if err != nil {
		return 0, err
	}
	return len(msgs), a.Store.Append(ctx, in.RunID, in.Seq, msgs...)
}

// PublishEvent publishes one run event (deduplicated by its id): the one
// event activity (toolcall.PublishEvent). The event that ends a run counts
// it once: a retry whose event the stream already has is not counted again.
func (a *Activities) PublishEvent(ctx context.Context, ev toolcall.Event) error {
	return toolcall.PublishEvent(ctx, a.Events, ev, func(ev toolcall.Event) { a.Metrics.RunFinished(endStatus(ev)) })
}

// endStatus is the status of a run that ev ends, or "" when ev ends none.
func endStatus(ev toolcall.Event) string {
	switch ev.Kind {
	case toolcall.EventCompleted:
		return StatusCompleted
	case toolcall.EventCancelled:
		return StatusCanceled
	case toolcall.EventFailed:
		// finish writes "<status>: <reason>".
		if strings.HasPrefix(ev.Message, StatusBudgetExhausted+":") {
			return StatusBudgetExhausted
		}
		return StatusFailed
	}
	return ""
}

// ModelTurn runs one model turn over the first in.Seq messages, streaming
// token deltas, and appends the reply at in.Seq. A reply already at in.Seq
// (an earlier attempt that crashed after writing) is returned as is, so the
// model is not asked twice.
func (a *Activities) ModelTurn(ctx context.Context, in ModelTurnInput) (ModelTurnResult, error) {
	if msg, err := a.Store.At(ctx, in.RunID, in.Seq); err != nil {
		return ModelTurnResult{}, err
	} else if msg != nil {
		return turnSummary(msg, in.Seq+1, in.NoContent), nil
	}
	stop := toolcall.Heartbeat(ctx)
	defer stop()
	history, err := a.Store.Load(ctx, in.RunID, in.Seq)
	if err != nil {
		return ModelTurnResult{}, err
	}
	defs, err := a.tools(ctx, in.ToolsRef)
	if err != nil {
		return ModelTurnResult{}, err
	}
	model, err := a.Models.Model(ctx, in.Model)
	if err != nil {
		return ModelTurnResult{}, temporal.NewNonRetryableApplicationError(err.Error(), toolcall.ErrTypeConfig, nil)
	}
	model, err = withProtocol(model, in.Protocol)
	if err != nil {
		return ModelTurnResult{}, temporal.NewNonRetryableApplicationError(err.Error(), toolcall.ErrTypeConfig, nil)
	}
	req := &llm.Request{Model: in.Model.Name, Messages: history, Tools: defs, MaxTokens: in.Model.MaxTokens, Stream: true}
	if in.Sequential {
		req.ParallelToolCalls = new(bool)
	}
	attempt := int(activity.GetInfo(ctx).Attempt)
	seq := 0
	began := time.Now()
	msg, err := model.Stream(ctx, req, func(d llm.Delta) error {
		if d.Text == "" {
			return nil
		}
		seq++
		// Deltas are best effort: a watcher that misses them still gets the turn event.
		_ = a.Events.Delta(in.RunID, in.Turn, attempt, seq, d.Text)
		return nil
	})
	// Tokens are counted when the provider reports them: they are spent even
	// if this attempt then loses the race to append.
	a.Metrics.ModelTurn(in.Model.Provider, in.Model.Name, time.Since(began),
		msg.GetUsage().GetInputTokens(), msg.GetUsage().GetOutputTokens())
	if err != nil {
		return ModelTurnResult{}, modelError(ctx, err)
	}
	msg.Role = toolfleetv1.Role_ROLE_ASSISTANT
	if in.Sequential {
		msg = firstCallOnly(msg)
	}
	if err := a.Store.Append(ctx, in.RunID, in.Seq, msg); errors.Is(err, runstore.ErrConflict) {
		// A zombie attempt won the race: its reply is the turn.
		if msg, err = a.Store.At(ctx, in.RunID, in.Seq); err != nil {
			return ModelTurnResult{}, err
		}
	} else if err != nil {
		return ModelTurnResult{}, err
	}
	res := turnSummary(msg, in.Seq+1, in.NoContent)
	ev := toolcall.Event{RunID: in.RunID, Kind: toolcall.EventTurn, Turn: in.Turn, ID: fmt.Sprintf("%s/%d/turn", in.RunID, in.Turn),
		Time: time.Now(), Message: fmt.Sprintf("%d tool calls; %s", len(res.Calls), res.Text()), Usage: &res.Usage}
	if err := a.Events.Publish(ctx, ev); err != nil {
		return ModelTurnResult{}, err
	}
	return res, nil
}

// modelError maps a provider error: retryable ones are retried by Temporal
// after the provider's retry-after, others fail the turn.
//
// Its message becomes the run's failure, which the run's starter and
// watchers see. For a provider's HTTP error it is the provider, the status
// and the error code only: the provider's message is whatever the server
// at the base URL chose to send (a run names that URL), so it goes to the
// activity's log, bounded, and never into the run.
func modelError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var apiErr *llm.APIError
	if errors.As(err, &apiErr) {
		msg := apiErrorSummary(apiErr)
		if activity.IsActivity(ctx) {
			activity.GetLogger(ctx).Warn("model call failed", "provider", apiErr.Provider, "status", apiErr.StatusCode,
				"code", clip(apiErr.Code, 100), "message", clip(apiErr.Message, maxLoggedModelError))
		}
		if apiErr.Retryable() {
			return temporal.NewApplicationErrorWithOptions(msg, "ModelRetryable",
				temporal.ApplicationErrorOptions{NextRetryDelay: apiErr.RetryAfter})
		}
		return temporal.NewNonRetryableApplicationError(msg, ErrTypeModel, nil)
	}
	if errors.Is(err, llm.ErrRetryable) {
		return fmt.Errorf("model: %w", err)
	}
	return temporal.NewNonRetryableApplicationError("model: "+clip(err.Error(), maxModelError), ErrTypeModel, nil)
}

const (
	// maxLoggedModelError bounds the provider's error message in the log.
	maxLoggedModelError = 512
	// maxModelError bounds the text of another model error in a run.
	maxModelError = 400
)

// apiErrorSummary is a provider HTTP error without the provider's message:
// "model: anthropic: HTTP 400 Bad Request (invalid_request_error)". The
// code is kept only when it looks like one (letters, digits, "_", "-",
// "."; at most 64).
func apiErrorSummary(e *llm.APIError) string {
	msg := fmt.Sprintf("model: %s: HTTP %d", e.Provider, e.StatusCode)
	if text := http.StatusText(e.StatusCode); text != "" {
		msg += " " + text
	}
	if errorCode(e.Code) {
		msg += " (" + e.Code + ")"
	}
	return msg
}

func errorCode(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func withProtocol(m llm.Model, p string) (llm.Model, error) {
	switch p {
	case "", ProtocolNative:
		return m, nil
	case ProtocolAuto:
		return dialect.WithAutoFallback(m), nil
	}
	if tp, ok := dialect.TextProtocolByName(p); ok {
		return dialect.WithTextProtocol(m, tp), nil
	}
	return nil, fmt.Errorf("agent: %w", CheckProtocol(p))
}

// firstCallOnly keeps the first tool call of msg (parallel calls off).
func firstCallOnly(msg *toolfleetv1.Message) *toolfleetv1.Message {
	out := proto.Clone(msg).(*toolfleetv1.Message)
	out.Parts = out.Parts[:0]
	calls := 0
	for _, p := range msg.GetParts() {
		if p.GetToolCall() != nil {
			if calls++; calls > 1 {
				continue
			}
		}
		out.Parts = append(out.Parts, p)
	}
	return out
}

func turnSummary(msg *toolfleetv1.Message, seq int, noContent bool) ModelTurnResult {
	res := ModelTurnResult{Seq: seq, StopReason: msg.GetStopReason(),
		Usage: toolcall.Usage{InputTokens: msg.GetUsage().GetInputTokens(), OutputTokens: msg.GetUsage().GetOutputTokens()}}
	if text := llm.MessageText(msg); noContent {
		res.TextSHA256, res.TextBytes = contentDigest(text), len(text)
	} else {
		res.Preview = clip(text, summaryBytes)
	}
	for i, c := range llm.ToolCalls(msg) {
		res.Calls = append(res.Calls, CallSummary{Index: i, ID: c.GetId(), Name: c.GetName(), Digest: digest(c)})
	}
	return res
}

// digest identifies a call by tool and arguments, to count repeated failures.
func digest(c *toolfleetv1.ToolCall) string {
	args, _ := protojson.MarshalOptions{}.Marshal(c.GetArguments())
	// protojson output is not canonical; re-encode through a sorted map.
	var v any
	if json.Unmarshal(args, &v) == nil {
		args, _ = json.Marshal(v)
	}
	sum := sha256.Sum256(append([]byte(c.GetName()+"\x00"), args...))
	return hex.EncodeToString(sum[:8])
}

// clip returns at most n bytes of s, cut at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// CallTool runs one tool call through the gateway as the run's principal,
// with the deterministic call id <run_id>/<turn>/<index>, and appends its
// result at in.ResultSeq: the one call activity (toolcall.CallActivity)
// with the run's engine. Failures the model can act on become is_error
// results; a retryable execution error is retried by Temporal after the
// delay the tool asked for, and on the last attempt becomes an error result
// too.
func (a *Activities) CallTool(ctx context.Context, in CallToolInput) (CallToolResult, error) {
	return toolcall.CallActivity[CallToolInput, CallToolResult](a.Gateway, runCalls{a})(ctx, in)
}

// runCalls is the call activity's engine of runs: the call is read from the
// transcript, its result appended to it.
type runCalls struct{ a *Activities }

// Prepare reads call in.Index of the assistant message at in.CallSeq; a
// result already at in.ResultSeq (an earlier attempt appended it) is done.
func (e runCalls) Prepare(ctx context.Context, in CallToolInput) (toolcall.Call, *CallToolResult, error) {
	if msg, err := e.a.Store.At(ctx, in.RunID, in.ResultSeq); err != nil {
		return toolcall.Call{}, nil, err
	} else if msg != nil {
		res := resultSummary(msg, "", in.NoContent)
		return toolcall.Call{}, &res, nil
	}
	assistant, err := e.a.Store.At(ctx, in.RunID, in.CallSeq)
	if err != nil {
		return toolcall.Call{}, nil, err
	}
	calls := llm.ToolCalls(assistant)
	if in.Index >= len(calls) {
		return toolcall.Call{}, nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("message %d has no call %d", in.CallSeq, in.Index), toolcall.ErrTypeConfig, nil)
	}
	call := calls[in.Index]
	c := toolcall.Call{RunID: in.RunID, Turn: in.Turn, CallID: ids.RunCall(in.RunID, in.Turn, in.Index), ToolID: call.GetName(),
		Input: call.GetArguments(), Principal: in.Principal, Approver: in.Approver, Origin: call}
	if in.Tool != nil {
		c.ToolID = in.Tool.ID
	}
	switch {
	case in.Program != nil:
		c.Decided = &toolcall.Outcome{Kind: in.Program.Kind, Message: in.Program.Content}
	case in.Denial != "":
		c.Decided = &toolcall.Outcome{Kind: toolcall.KindDenied, Message: in.Denial}
	case in.Tool == nil:
		c.Decided = &toolcall.Outcome{Kind: toolcall.KindUnknownTool}
	default:
		c.Final = int(activity.GetInfo(ctx).Attempt) >= in.MaxAttempts
	}
	return c, nil, nil
}

// Render appends the outcome at in.ResultSeq as the call's result; the
// attempt that appended it counts it.
func (e runCalls) Render(ctx context.Context, in CallToolInput, c toolcall.Call, o toolcall.Outcome) (toolcall.Rendered[CallToolResult], error) {
	part, kind, ref, took, err := e.a.resultPart(ctx, in, c, o)
	if err != nil {
		return toolcall.Rendered[CallToolResult]{}, err
	}
	counted := false
	msg := llm.NewMessage(toolfleetv1.Role_ROLE_TOOL, part)
	if err := e.a.Store.Append(ctx, in.RunID, in.ResultSeq, msg); errors.Is(err, runstore.ErrConflict) {
		if msg, err = e.a.Store.At(ctx, in.RunID, in.ResultSeq); err != nil {
			return toolcall.Rendered[CallToolResult]{}, err
		}
	} else if err != nil {
		return toolcall.Rendered[CallToolResult]{}, err
	} else {
		counted = true // by the attempt that appended the result: once per call
	}
	res := resultSummary(msg, kind, in.NoContent)
	res.Duration, res.Ref = took, ref
	status := "ok"
	if res.IsError {
		status = "error (" + string(res.Kind) + ")"
	}
	return toolcall.Rendered[CallToolResult]{Out: res, Kind: kind, Counted: counted,
		Message: fmt.Sprintf("%s in %s: %s", status, took.Round(time.Millisecond), res.Text())}, nil
}

// Publish publishes an event of the call; an event that cannot be published
// fails the attempt.
func (e runCalls) Publish(ctx context.Context, ev toolcall.Event) error {
	return e.a.Events.Publish(ctx, ev)
}

func (e runCalls) GatewayCall(d time.Duration) { e.a.Metrics.AgentGatewayCall(d) }
func (e runCalls) ToolCall(k toolcall.Kind)    { e.a.Metrics.AgentToolCall(string(k)) }

// resultPart renders an outcome as the result part the model reads.
func (a *Activities) resultPart(ctx context.Context, in CallToolInput, c toolcall.Call, o toolcall.Outcome) (_ *toolfleetv1.Part, kind toolcall.Kind, ref string, took time.Duration, _ error) {
	call := c.Origin
	switch {
	case in.Program != nil:
		return llm.ResultPart(call.GetId(), call.GetName(), o.Message, o.Kind != toolcall.KindOK), o.Kind, "", 0, nil
	case o.Kind == toolcall.KindDenied:
		return llm.ResultPart(call.GetId(), call.GetName(), "The call was not approved: "+o.Message, true), o.Kind, "", 0, nil
	case o.Kind == toolcall.KindUnknownTool:
		return llm.ResultPart(call.GetId(), call.GetName(),
			fmt.Sprintf("There is no tool named %q in this run; use one of the declared tools.", call.GetName()), true), o.Kind, "", 0, nil
	case o.Kind == toolcall.KindValidation:
		return llm.ResultPart(call.GetId(), call.GetName(), validationText(o), true), toolcall.KindValidation, "", 0, nil
	case o.Kind == toolcall.KindRefused, o.Kind == toolcall.KindRetry && !o.ToolRetry:
		// A refusal, or a gateway that stayed away on the last attempt.
		return llm.ResultPart(call.GetId(), call.GetName(), o.Message, true), toolcall.KindRefused, "", 0, nil
	case o.Kind == toolcall.KindRetry, o.Kind == toolcall.KindExecution:
		text := o.Message
		if o.Hint != "" {
			text += "\n" + o.Hint
		}
		return llm.ResultPart(call.GetId(), call.GetName(), text, true), toolcall.KindExecution, "", o.Duration, nil
	}
	text, err := json.Marshal(o.Value.AsInterface())
	if err != nil {
		return nil, "", "", 0, temporal.NewNonRetryableApplicationError("encode result: "+err.Error(), toolcall.ErrTypeConfig, nil)
	}
	if len(text) <= a.inlineLimit() {
		p := llm.ResultPart(call.GetId(), call.GetName(), string(text), false)
		p.GetToolResult().Structured = o.Value
		return p, toolcall.KindOK, "", o.Duration, nil
	}
	if ref, err = a.Store.PutBlob(ctx, in.RunID, text); err != nil {
		return nil, "", "", 0, err
	}
	preview := fmt.Sprintf("%s\n[result truncated: %d bytes in total; this is the first %d. Full result stored as %s.]",
		clip(string(text), previewBytes), len(text), previewBytes, ref)
	return llm.ResultPart(call.GetId(), call.GetName(), preview, false), toolcall.KindOK, ref, o.Duration, nil
}

// validationText lists a validation error's field messages for a model, each
// said once.
func validationText(o toolcall.Outcome) string {
	return "The input was invalid. " + (&client.ValidationError{Message: o.Message, ParameterErrors: o.Fields}).Text()
}

// contentDigest identifies content without holding it: the first 16 bytes
// of its sha256, in hex.
func contentDigest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:16])
}

// digestText is how a digest and size read in events and states.
func digestText(sum string, n int) string { return fmt.Sprintf("sha256:%s (%d bytes)", sum, n) }

// Text is the reply's preview, or its digest and size with NoContent.
func (r ModelTurnResult) Text() string {
	if r.TextSHA256 != "" {
		return digestText(r.TextSHA256, r.TextBytes)
	}
	return r.Preview
}

// Text is the result's preview, or its digest and size with NoContent.
func (r CallToolResult) Text() string {
	if r.ContentSHA256 != "" {
		return digestText(r.ContentSHA256, r.ContentBytes)
	}
	return r.Preview
}

func resultSummary(msg *toolfleetv1.Message, kind toolcall.Kind, noContent bool) CallToolResult {
	var r *toolfleetv1.ToolResult
	for _, p := range msg.GetParts() {
		if tr := p.GetToolResult(); tr != nil {
			r = tr
			break
		}
	}
	if kind == "" {
		kind = toolcall.KindOK
		if r.GetIsError() {
			kind = toolcall.KindExecution
		}
	}
	if noContent {
		return CallToolResult{Kind: kind, IsError: r.GetIsError(), ContentSHA256: contentDigest(r.GetContent()), ContentBytes: len(r.GetContent())}
	}
	return CallToolResult{Kind: kind, IsError: r.GetIsError(), Preview: clip(r.GetContent(), summaryBytes)}
}
