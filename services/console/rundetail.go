package console

import (
	"net/url"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// runCallView is one tool call in a run page's table.
type runCallView struct {
	CallID, ToolID, Arguments, Kind, Preview, Digest string
	Ref, Failure, Approver, Denial, Scheduled, Took  string
	ToolTime                                         string
	Turn, Attempts                                   int32
	IsError, Running, Local                          bool
}

func runCallViews(calls []*toolfleetv1.RunToolCall) []runCallView {
	out := make([]runCallView, 0, len(calls))
	for _, c := range calls {
		v := runCallView{CallID: c.GetCallId(), ToolID: c.GetToolId(), Kind: c.GetKind(), Preview: prettyJSON(c.GetPreview()),
			Ref: c.GetResultRef(), Failure: c.GetFailure(), Approver: c.GetApprover(), Denial: c.GetDenial(),
			Scheduled: when(c.GetScheduledAt()), Turn: c.GetTurn(), Attempts: c.GetAttempts(), IsError: c.GetIsError(),
			Running: c.GetEndedAt() == nil, Local: c.GetReadOnlyLocal()}
		if c.GetArguments() != nil {
			if b, err := protojson.Marshal(c.GetArguments()); err == nil {
				v.Arguments = prettyJSON(string(b))
			}
		}
		if c.GetContentSha256() != "" {
			v.Digest = c.GetContentSha256() + " (" + strconv.FormatInt(c.GetContentBytes(), 10) + " bytes)"
		}
		if c.GetEndedAt() != nil && c.GetScheduledAt() != nil && !v.Local {
			v.Took = c.GetEndedAt().AsTime().Sub(c.GetScheduledAt().AsTime()).Round(time.Millisecond).String()
		}
		if d := c.GetDuration().AsDuration(); d > 0 {
			v.ToolTime = d.Round(time.Millisecond).String()
		}
		out = append(out, v)
	}
	return out
}

// budgetView is one budget of a run with what it used.
type budgetView struct{ Name, Limit, Used string }

func budgetViews(g *toolfleetv1.GetRunResponse, b *toolfleetv1.Budget) []budgetView {
	limit := func(n int64) string {
		if n <= 0 {
			return "default"
		}
		return strconv.FormatInt(n, 10)
	}
	dl := "default"
	if d := b.GetDeadline().AsDuration(); d > 0 {
		dl = d.String()
	}
	elapsed := ""
	if g.GetStartedAt() != nil {
		elapsed = time.Since(g.GetStartedAt().AsTime()).Round(time.Second).String() + " since start"
	}
	return []budgetView{
		{"Turns", limit(int64(b.GetMaxTurns())), strconv.Itoa(int(g.GetTurns()))},
		{"Tool calls", limit(int64(b.GetMaxToolCalls())), strconv.Itoa(int(g.GetToolCalls()))},
		{"Input tokens", limit(b.GetMaxInputTokens()), strconv.FormatInt(g.GetUsage().GetInputTokens(), 10)},
		{"Output tokens", limit(b.GetMaxOutputTokens()), strconv.FormatInt(g.GetUsage().GetOutputTokens(), 10)},
		{"Deadline", dl, elapsed},
	}
}

// temporalLink is the workflow's page in the Temporal Web UI ("" without one).
func (s *Server) temporalLink(workflowID, runID string) string {
	if s.cfg.TemporalUI == "" || workflowID == "" {
		return ""
	}
	ns := s.cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	u := s.cfg.TemporalUI + "/namespaces/" + url.PathEscape(ns) + "/workflows/" + url.PathEscape(workflowID)
	if runID != "" {
		u += "/" + url.PathEscape(runID)
	}
	return u + "/history"
}
