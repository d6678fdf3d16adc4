package console

import (
	"context"
	"net/http"
	"strconv"
	"time"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// The program page's live part: GET /console/programs/{id}/events is a
// Server-Sent Events stream of the program's WatchProgram stream (its
// events from NATS), as the principal. After each event that changes what
// the page shows it sends "summary" (status, result or error, the forms of
// what waits) and "calls" (the calls so far), both rendered by
// html/template from GetProgram like the page; "end" when the program
// ended. Each event's stream sequence is its SSE id, so a reconnecting
// EventSource resumes after Last-Event-ID. The streams count against the
// same bounds as the live inbox (per session and in all), one lasts at most
// liveStreamMax before the browser reconnects, and it ends when the session
// does (openLive).

// liveStreamMax bounds one run or program stream.
const liveStreamMax = 10 * time.Minute

// programRefreshKinds are the events after which the live parts are re-rendered.
var programRefreshKinds = map[string]bool{"tool_call": true, "tool_result": true, "approval.requested": true,
	"approval.decided": true, "input.requested": true, "input.answered": true, "completed": true, "failed": true,
	"cancelled": true, "canceled": true}

func (s *Server) programEvents(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	id := r.PathValue("id")
	ctx, done, ok := s.openLive(w, r, ss, liveStreamMax)
	if !ok {
		return
	}
	defer done()
	var after uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		after, _ = strconv.ParseUint(v, 10, 64)
	}
	stream, err := a.programs.WatchProgram(ctx, as(ss, &toolfleetv1.WatchProgramRequest{ProgramId: id, AfterSequence: after}))
	if err != nil {
		s.sseRefuse(w, err)
		return
	}
	defer stream.Close()
	// The first message tells whether the principal may watch this program:
	// 404 before the stream starts, so EventSource gives up.
	if !stream.Receive() {
		if err := stream.Err(); err != nil && ctx.Err() == nil {
			s.sseRefuse(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent) // nothing after Last-Event-ID: it had ended
		return
	}
	rc := startSSE(w)
	for {
		m := stream.Msg()
		kind := m.GetEvent().GetKind()
		if err := writeSSE(w, strconv.FormatUint(m.GetSequence(), 10), "seen", kind); err != nil {
			return
		}
		if programRefreshKinds[kind] && s.sendProgram(ctx, w, ss, a, id) != nil {
			return
		}
		if terminal(kind) || kind == "canceled" {
			_ = writeSSE(w, "", "end", kind)
			_ = rc.Flush()
			return
		}
		if rc.Flush() != nil || !stream.Receive() {
			break
		}
	}
	if endLive(ctx, w, rc) {
		return
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		_ = writeSSE(w, "", "problem", "The live view lost the program ("+messageOf(err)+"); reconnecting…")
		_ = rc.Flush()
	}
}

// sendProgram writes the program's live parts as they are now.
func (s *Server) sendProgram(ctx context.Context, w http.ResponseWriter, ss *session, a *apis, id string) error {
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	data, err := programData(cctx, ss, a, id, nil)
	cancel()
	if err != nil {
		return nil // the next event tries again; the page still shows the last parts
	}
	for _, part := range []struct{ event, fragment string }{{"summary", "program-summary"}, {"calls", "program-calls"}} {
		html, err := s.fragment(part.fragment, data)
		if err != nil {
			return err
		}
		if err := writeSSE(w, "", part.event, html); err != nil {
			return err
		}
	}
	return nil
}
