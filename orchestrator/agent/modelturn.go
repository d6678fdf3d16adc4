package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/dialect"
)

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
		Time: time.Now(), Message: fmt.Sprintf("%s; %s", plural(len(res.Calls), "tool call"), res.Text()), Usage: &res.Usage}
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

// Text is the reply's preview, or its digest and size with NoContent.
func (r ModelTurnResult) Text() string {
	if r.TextSHA256 != "" {
		return digestText(r.TextSHA256, r.TextBytes)
	}
	return r.Preview
}

// plural is "1 tool call", "2 tool calls".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
