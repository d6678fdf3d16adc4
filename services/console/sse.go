package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// The run page's live part: GET /console/runs/{id}/events is a
// Server-Sent Events stream of the run's WatchRun stream, as the principal.
// Each run event becomes an "entry" event whose data is the transcript
// entry rendered by html/template (so it is escaped like the page), with
// the event's sequence as its SSE id (a reconnecting EventSource resumes
// after Last-Event-ID); events that change what the run waits on also send
// "summary", the re-rendered summary panel; the model's streamed text is
// "delta" (JSON the script sets as text, never as HTML); the run's end is
// "end", after which the script closes the stream. It is bounded like the
// program's stream (openLive): per session and in all, at most
// liveStreamMax (the browser then reconnects after Last-Event-ID), and it
// ends ("end", "signed out") when the session does.

// eventView is one transcript entry.
type eventView struct {
	Kind, Label, Class, Time string
	Turn                     int32
	CallID, ToolID, Message  string
	// Head is the words before a JSON payload ("ok in 12ms"), JSON that
	// Message is the (indented) payload.
	Head                string
	JSON                bool
	InputTokens, Output int64
}

var eventLabels = map[string]string{
	"started": "Run started", "turn": "Model turn", "tool_call": "Tool call", "tool_result": "Tool result",
	"approval.requested": "Waiting for approval", "approval.decided": "Approval decided",
	"message": "Message received", "print": "Print", "completed": "Completed", "failed": "Failed", "cancelled": "Cancelled",
}

func viewEvent(ev *toolfleetv1.RunEvent) eventView {
	v := eventView{Kind: ev.GetKind(), Label: eventLabels[ev.GetKind()], Time: when(ev.GetTime()), Turn: ev.GetTurn(),
		CallID: ev.GetCallId(), ToolID: ev.GetToolId(), Message: ev.GetMessage(),
		InputTokens: ev.GetUsage().GetInputTokens(), Output: ev.GetUsage().GetOutputTokens()}
	if v.Label == "" {
		v.Label = ev.GetKind()
	}
	v.Class = "ev-" + strings.ReplaceAll(v.Kind, ".", "-")
	if isJSON(v.Message) {
		v.JSON, v.Message = true, prettyJSON(v.Message)
	} else if i := strings.Index(v.Message, ": "); i > 0 && isJSON(v.Message[i+2:]) {
		// A tool result's "ok in 12ms: {…}" or "failed: {…}".
		v.JSON, v.Head, v.Message = true, v.Message[:i], prettyJSON(v.Message[i+2:])
	}
	return v
}

// summaryKinds are the events after which the summary panel is re-rendered.
var summaryKinds = map[string]bool{"approval.requested": true, "approval.decided": true, "message": true,
	"input.requested": true, "input.answered": true,
	"turn": true, "tool_result": true, "completed": true, "failed": true, "cancelled": true}

func terminal(kind string) bool {
	return kind == "completed" || kind == "failed" || kind == "cancelled"
}

func (s *Server) runEvents(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	id := r.PathValue("id")
	var after uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		after, _ = strconv.ParseUint(v, 10, 64)
	}
	ctx, done, ok := s.openLive(w, r, ss, liveStreamMax)
	if !ok {
		return
	}
	defer done()
	stream, err := a.runs.WatchRun(ctx, as(ss, &toolfleetv1.WatchRunRequest{RunId: id, AfterSeq: after, Deltas: true}))
	if err != nil {
		s.sseRefuse(w, err)
		return
	}
	defer stream.Close()
	// The first message tells whether the principal may watch this run:
	// answer 404 before the stream starts, so EventSource gives up.
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			s.sseRefuse(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent) // nothing after Last-Event-ID: the run had ended
		return
	}
	rc := startSSE(w)
	for {
		if err := s.sseItem(w, r, ss, a, id, stream.Msg()); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if !stream.Receive() {
			break
		}
	}
	if endLive(ctx, w, rc) {
		return
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		writeSSE(w, "", "problem", "The live view lost the run ("+messageOf(err)+"); reconnecting…")
		_ = rc.Flush()
	}
}

// sseItem writes one WatchRun item as SSE events.
func (s *Server) sseItem(w http.ResponseWriter, r *http.Request, ss *session, a *apis, id string, m *toolfleetv1.WatchRunResponse) error {
	if d := m.GetDelta(); d != nil {
		b, _ := json.Marshal(map[string]any{"turn": d.GetTurn(), "attempt": d.GetAttempt(), "seq": d.GetSeq(), "text": d.GetText()})
		return writeSSE(w, "", "delta", string(b))
	}
	ev := m.GetEvent()
	if ev == nil {
		return nil
	}
	html, err := s.fragment("event", viewEvent(ev))
	if err != nil {
		return err
	}
	if err := writeSSE(w, strconv.FormatUint(ev.GetSeq(), 10), "entry", html); err != nil {
		return err
	}
	if summaryKinds[ev.GetKind()] {
		ctx, cancel := callCtx(r)
		got, err := a.runs.GetRun(ctx, as(ss, &toolfleetv1.GetRunRequest{RunId: id}))
		cancel()
		if err == nil {
			if html, err := s.fragment("summary", summarize(got.Msg, ss.csrf)); err == nil {
				if err := writeSSE(w, "", "summary", html); err != nil {
					return err
				}
			}
		}
	}
	if terminal(ev.GetKind()) {
		return writeSSE(w, "", "end", ev.GetKind())
	}
	return nil
}

// sseRefuse answers a watch the API refused with a status EventSource will
// not retry.
func (s *Server) sseRefuse(w http.ResponseWriter, err error) {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound, connect.CodePermissionDenied:
		http.Error(w, "run not found", http.StatusNotFound)
	case connect.CodeUnauthenticated:
		http.Error(w, "sign in again", http.StatusUnauthorized)
	default:
		http.Error(w, "the run cannot be watched now: "+messageOf(err), http.StatusBadGateway)
	}
}

// writeSSE writes one event. Every line break of data (\r\n, \r or \n: all
// end an SSE line) starts a new data line, so no payload can add a field.
func writeSSE(w http.ResponseWriter, id, event, data string) error {
	var b strings.Builder
	if id != "" {
		fmt.Fprintf(&b, "id: %s\n", id)
	}
	fmt.Fprintf(&b, "event: %s\n", event)
	data = strings.ReplaceAll(data, "\r\n", "\n")
	data = strings.ReplaceAll(data, "\r", "\n")
	for line := range strings.SplitSeq(data, "\n") {
		b.WriteString("data: ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, err := w.Write([]byte(b.String()))
	return err
}

// startSSE answers 200 with the headers of an event stream (no caching, no
// proxy buffering) and returns the controller that flushes each event.
func startSSE(w http.ResponseWriter) *http.ResponseController {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return http.NewResponseController(w)
}
