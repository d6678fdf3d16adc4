package console

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The live inbox: GET /console/inbox/events is a Server-Sent Events stream
// that every console page opens. It reads the principal's inbox every
// inboxPoll and, when what waits changed, sends "count" (the header's
// number) and "inbox" (the inbox list rendered by html/template, escaped
// like the page). It is bounded per session and in all, lasts at most
// inboxStreamMax (the browser's EventSource then reconnects), and stops
// when the page closes (the request's context ends) or the session ends.

const (
	inboxPoll       = 3 * time.Second
	inboxStreamMax  = 10 * time.Minute
	maxLivePerUser  = 16
	maxLiveInboxAll = 512
)

// errSignedOut ends a live stream whose session ended (signed out here or
// at another replica, or expired).
var errSignedOut = errors.New("console: signed out")

// openLive starts a live stream of ss: it counts against the live bounds
// (over them it answers 429 and ok is false), lasts at most max, and ends
// within inboxPoll of ss's session ending, with cause errSignedOut (see
// endLive). done releases it.
func (s *Server) openLive(w http.ResponseWriter, r *http.Request, ss *session, max time.Duration) (ctx context.Context, done func(), ok bool) {
	if !s.live.acquire(ss.id) {
		http.Error(w, "too many live views are open: close some console tabs", http.StatusTooManyRequests)
		return nil, nil, false
	}
	cctx, cancel := context.WithCancelCause(r.Context())
	ctx, stop := context.WithTimeout(cctx, max)
	watched := make(chan struct{})
	go func() { // owned by the stream: ends with ctx, which done ends
		defer close(watched)
		if s.cfg.AuthOff {
			return
		}
		tick := time.NewTicker(inboxPoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if cur, err := s.sessions.byID(ctx, ss.id); err == nil && cur == nil {
				cancel(errSignedOut)
				return
			}
		}
	}()
	return ctx, func() {
		stop()
		cancel(nil)
		<-watched
		s.live.release(ss.id)
	}, true
}

// endLive tells the page a stream ended because its session did ("end",
// "signed out"); it reports whether it did.
func endLive(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController) bool {
	if !errors.Is(context.Cause(ctx), errSignedOut) {
		return false
	}
	_ = writeSSE(w, "", "end", "signed out")
	_ = rc.Flush()
	return true
}

// inboxData is what the inbox page and its live list render.
type inboxData struct {
	Items         []inboxItem
	Problem, CSRF string
}

// liveLimits counts the open live inbox streams, per session and in all.
type liveLimits struct {
	mu    sync.Mutex
	per   map[string]int
	total int
}

func (l *liveLimits) acquire(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.per == nil {
		l.per = map[string]int{}
	}
	if l.per[id] >= maxLivePerUser || l.total >= maxLiveInboxAll {
		return false
	}
	l.per[id]++
	l.total++
	return true
}

func (l *liveLimits) release(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.per[id]--; l.per[id] <= 0 {
		delete(l.per, id)
	}
	l.total--
}

// inboxKey identifies what waits (not how long it has waited), so an
// unchanged inbox sends nothing.
func inboxKey(d inboxData) string {
	var b strings.Builder
	b.WriteString(d.Problem)
	for _, it := range d.Items {
		b.WriteString("\x00" + it.Kind)
		if a := it.Approval; a != nil {
			b.WriteString("\x00" + a.Kind + "\x00" + a.OwnerID + "\x00" + a.CallID)
		}
		if q := it.Question; q != nil {
			b.WriteString("\x00" + q.Kind + "\x00" + q.OwnerID + "\x00" + q.CallID + "\x00" + q.Key)
		}
	}
	return b.String()
}

func (s *Server) inboxEvents(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, done, ok := s.openLive(w, r, ss, inboxStreamMax)
	if !ok {
		return
	}
	defer done()
	rc := startSSE(w)
	tick := time.NewTicker(inboxPoll)
	defer tick.Stop()
	last := "\xff" // differs from every key: the first read is always sent
	for {
		cctx, ccancel := context.WithTimeout(ctx, apiTimeout)
		items, err := pending(cctx, ss, a)
		ccancel()
		if ctx.Err() != nil {
			endLive(ctx, w, rc)
			return
		}
		d := inboxData{Items: items, CSRF: ss.csrf}
		if err != nil {
			d.Problem = "Some of your runs or programs could not be read: " + messageOf(err)
		}
		s.counts.set(ss.id, len(items), s.cfg.Now())
		if key := inboxKey(d); key != last {
			html, ferr := s.fragment("inbox-items", d)
			if ferr != nil {
				return
			}
			if writeSSE(w, "", "count", strconv.Itoa(len(items))) != nil || writeSSE(w, "", "inbox", html) != nil || rc.Flush() != nil {
				return
			}
			last = key
		}
		select {
		case <-ctx.Done():
			endLive(ctx, w, rc)
			return
		case <-tick.C:
		}
	}
}
