package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// SubjectPrefix starts the subjects of call events:
// toolfleet.events.call.<kit>.<tool>.<started|succeeded|failed>.
const SubjectPrefix = "toolfleet.events.call."

// Batching of event publishes.
const (
	maxBatch    = 256
	batchLinger = 2 * time.Millisecond
	// maxEventRejections is how often JetStream may refuse one event (e.g. a stream
	// limit with discard=new) before it is dropped, counted and logged. Events that
	// were not answered at all (NATS away, timeout) are retried without limit, as
	// long as they fit in the queue.
	maxEventRejections = 3
	// ackTimeout bounds the wait for a batch's acks.
	ackTimeout = 10 * time.Second
)

// Event kinds.
const (
	Started   = "started"
	Succeeded = "succeeded"
	Failed    = "failed"
	// InputRequired: the tool asked its caller for input; the caller's
	// repeat of the call with the answers ends with its own terminal event.
	InputRequired = "input_required"
)

// Publisher publishes call events to JetStream without ever blocking a call: events
// go into a bounded queue drained by one goroutine; while NATS is away they wait
// there, and when the queue is full new events are dropped, counted and logged.
// Delivery is at least once: every event is confirmed by its own JetStream ack;
// an unanswered event is sent again (Nats-Msg-Id lets the stream drop a copy it
// already stored) and an event the stream refuses is retried maxEventRejections
// times, then counted as dropped and logged.
type Publisher struct {
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.StreamConfig
	queue  chan *outEvent
	m      Metrics
	share  Share

	dropped atomic.Uint64
	// overShare counts the events not stored because their principal held
	// its share; lastShareWarn rate-limits the log line (unix nanos).
	overShare     atomic.Uint64
	lastShareWarn atomic.Int64
	wg            sync.WaitGroup
}

// Metrics count what a [Publisher] did with events.
type Metrics struct {
	// Published counts events JetStream acknowledged.
	Published prometheus.Counter
	// Dropped counts events given up: queue full, refused by the stream
	// repeatedly, left at shutdown, or over their principal's share.
	Dropped prometheus.Counter
}

// Share bounds the bytes of events one principal may store (the
// gateway's store shares): an event whose principal is over its share is
// not stored.
type Share interface {
	// Admit returns nil when principal may store an event, else why not.
	Admit(ctx context.Context, principal string) error
	// Charge counts n bytes of events stored for principal.
	Charge(principal string, n int64)
}

// SetShare bounds each principal's events by share (before [Publisher.Run]).
func (e *Publisher) SetShare(share Share) { e.share = share }

// New returns a publisher to stream (created when missing) over nc and js, that
// holds at most size events while NATS is away. Start it with [Publisher.Run].
func New(log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, stream jetstream.StreamConfig, size int, m Metrics) *Publisher {
	return &Publisher{log: log, nc: nc, js: js, stream: stream, queue: make(chan *outEvent, size), m: m}
}

// outEvent is one event on its way to JetStream.
type outEvent struct {
	msg nats.Msg
	// rejections counts the times JetStream refused it.
	rejections int
	// principal made the call (charged under the share).
	principal string
}

// Header values shared by every event (read-only once built).
var (
	ceSource = []string{"toolfleet/gateway"}
	ceTypes  = map[string][]string{
		Started:       {"toolfleet.call." + Started},
		Succeeded:     {"toolfleet.call." + Succeeded},
		Failed:        {"toolfleet.call." + Failed},
		InputRequired: {"toolfleet.call." + InputRequired},
	}
)

// Publish queues one event of kind for toolkit.tool of a call by principal,
// setting its id, kind and time; traceparent (W3C, "" for none) goes into
// the headers. It never blocks; a nil Publisher (no NATS) drops the event.
func (e *Publisher) Publish(principal, kind string, ev *toolfleetv1.CallEvent, toolkit, tool, traceparent string) {
	if e == nil {
		return
	}
	ev.Id = newID()
	ev.Kind = kind
	ev.Time = timestamppb.Now()
	b, err := marshalCallEvent(ev)
	if err != nil {
		e.log.Error("encode call event", "error", err)
		return
	}
	// CloudEvents-style headers; Nats-Msg-Id lets JetStream drop a re-sent copy.
	// One map literal sized for all of them instead of NewMsg plus a Set each.
	id := []string{ev.Id}
	h := make(nats.Header, 6)
	h[jetstream.MsgIDHeader] = id
	h["ce-id"] = id
	if t, ok := ceTypes[kind]; ok {
		h["ce-type"] = t
	} else {
		h["ce-type"] = []string{"toolfleet.call." + kind}
	}
	h["ce-source"] = ceSource
	h["ce-time"] = []string{ev.Time.AsTime().Format(time.RFC3339Nano)}
	if traceparent != "" {
		h["traceparent"] = []string{traceparent}
	}
	out := &outEvent{msg: nats.Msg{Subject: SubjectPrefix + toolkit + "." + tool + "." + kind, Header: h, Data: b}, principal: principal}
	select {
	case e.queue <- out:
	default:
		n := e.dropped.Add(1)
		e.m.Dropped.Inc()
		if n == 1 || n%1000 == 0 {
			e.log.Error("event queue full; call events dropped", "dropped_total", n, "queue", cap(e.queue))
		}
	}
}

// Backlog is the number of events queued and not yet handed to NATS.
func (e *Publisher) Backlog() int {
	if e == nil {
		return 0
	}
	return len(e.queue)
}

// Run starts draining the queue until ctx is done, then for at most a few
// seconds more; [Publisher.Wait] waits for that.
func (e *Publisher) Run(ctx context.Context) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ready := false
		// A batch waits in hand while NATS is away, so it counts against the
		// bound too: never hold more than the queue's size outside the queue.
		limit := min(maxBatch, cap(e.queue))
		for {
			var batch []*outEvent
			select {
			case <-ctx.Done():
				e.flushOnStop()
				return
			case m := <-e.queue:
				batch = append(batch, m)
			}
			// Linger briefly so that one flush carries the events of several calls.
			linger := time.NewTimer(batchLinger)
		fill:
			for len(batch) < limit {
				select {
				case m := <-e.queue:
					batch = append(batch, m)
				case <-linger.C:
					break fill
				case <-ctx.Done():
					break fill
				}
			}
			linger.Stop()
			batch = e.admit(ctx, batch)
			for len(batch) > 0 {
				if !ready {
					ready = e.EnsureStream(ctx) == nil
				}
				if ready {
					batch = e.send(ctx, batch)
				}
				if len(batch) == 0 {
					break
				}
				// NATS is away or the stream refused some: keep them and wait; new
				// events wait in the queue.
				ready = false
				select {
				case <-ctx.Done():
					e.requeue(batch)
					e.flushOnStop()
					return
				case <-time.After(250 * time.Millisecond):
				}
			}
		}
	}()
}

// admit keeps the events of batch whose principal is under its share,
// charging their bytes; the others are not stored: counted as dropped, and
// logged at most every 10 s. Asked once per event, on the drain goroutine,
// never on a call's path.
func (e *Publisher) admit(ctx context.Context, batch []*outEvent) []*outEvent {
	if e.share == nil {
		return batch
	}
	kept := batch[:0]
	for _, ev := range batch {
		if err := e.share.Admit(ctx, ev.principal); err != nil {
			n := e.overShare.Add(1)
			e.dropped.Add(1)
			e.m.Dropped.Inc()
			if now := time.Now().UnixNano(); now-e.lastShareWarn.Load() > int64(10*time.Second) {
				e.lastShareWarn.Store(now)
				e.log.Warn("call events of a principal over its share of the event stream are not stored",
					"principal", ev.principal, "reason", err, "over_share_total", n)
			}
			continue
		}
		e.share.Charge(ev.principal, msgBytes(&ev.msg))
		kept = append(kept, ev)
	}
	clear(batch[len(kept):])
	return kept
}

// msgBytes is what an event takes in the stream: subject, headers and body
// (JetStream's per-message overhead aside).
func msgBytes(m *nats.Msg) int64 {
	n := len(m.Subject) + len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// EnsureStream makes sure the event stream exists once NATS is reachable, with
// the configured replicas, byte bound and max age (jsassets.EnsureStream: a
// stream that already matches is not updated, so a gateway needs the update
// permission only to apply a changed setting). It returns nil when the stream
// is ready; a *jsassets.ChangeError (a storage change JetStream cannot make)
// will not go away by retrying.
func (e *Publisher) EnsureStream(ctx context.Context) error {
	if !e.nc.IsConnected() {
		return errNotConnected
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := jsassets.EnsureStream(cctx, e.js, e.stream); err != nil {
		e.log.Warn("event stream not ready", "stream", e.stream.Name, "error", err)
		return err
	}
	return nil
}

// errNotConnected: NATS is away.
var errNotConnected = errors.New("events: NATS is not connected")

// send publishes a batch, each event confirmed by its own ack, and returns the
// events to send again: those not sent or not answered in time, and those the
// stream refused fewer than maxEventRejections times. Events refused more often are
// counted as dropped and logged.
func (e *Publisher) send(ctx context.Context, batch []*outEvent) []*outEvent {
	if !e.nc.IsConnected() {
		return batch
	}
	acks := make([]jetstream.PubAckFuture, 0, len(batch))
	for _, ev := range batch {
		f, err := e.js.PublishMsgAsync(&ev.msg)
		if err != nil {
			break // not sent (e.g. disconnected): this one and the rest go again
		}
		acks = append(acks, f)
	}
	sent := len(acks)
	return append(e.await(ctx, batch[:sent], acks), batch[sent:]...)
}

// await collects the acks of sent events and returns those to send again.
func (e *Publisher) await(ctx context.Context, sent []*outEvent, acks []jetstream.PubAckFuture) []*outEvent {
	timeout := time.NewTimer(ackTimeout)
	defer timeout.Stop()
	var retry []*outEvent
	published := 0
	defer func() { e.m.Published.Add(float64(published)) }()
	for i, f := range acks {
		select {
		case <-f.Ok():
			published++
		case err := <-f.Err():
			if ev := sent[i]; e.refused(ev, err) {
				retry = append(retry, ev)
			}
		case <-timeout.C:
			return append(retry, sent[i:]...)
		case <-ctx.Done():
			return append(retry, sent[i:]...)
		}
	}
	return retry
}

// refused handles an event JetStream did not store and reports whether to send
// it again. Only answers from the stream (an API error) count as refusals; no
// answer (no responders, timeout, disconnection) is retried like NATS being away.
func (e *Publisher) refused(ev *outEvent, err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return true
	}
	ev.rejections++
	if ev.rejections < maxEventRejections {
		return true
	}
	n := e.dropped.Add(1)
	e.m.Dropped.Inc()
	e.log.Error("call event refused by the stream; dropped", "stream", e.stream.Name, "subject", ev.msg.Subject,
		"event_id", ev.msg.Header.Get(jetstream.MsgIDHeader), "attempts", ev.rejections, "error", err, "dropped_total", n)
	return false
}

func (e *Publisher) requeue(batch []*outEvent) {
	for _, m := range batch {
		select {
		case e.queue <- m:
		default:
			e.dropped.Add(1)
			e.m.Dropped.Inc()
		}
	}
}

// flushOnStop tries briefly to publish what is left, then reports the rest as dropped.
func (e *Publisher) flushOnStop() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var left []*outEvent
	for {
		select {
		case m := <-e.queue:
			left = append(left, m)
			continue
		default:
		}
		break
	}
	if len(left) > 0 {
		left = e.send(ctx, left)
	}
	if len(left) > 0 {
		n := e.dropped.Add(uint64(len(left)))
		e.m.Dropped.Add(float64(len(left)))
		e.log.Error("call events dropped at shutdown", "dropped", len(left), "dropped_total", n)
	}
}

// Wait blocks until the drain goroutine has stopped.
func (e *Publisher) Wait() {
	if e != nil {
		e.wg.Wait()
	}
}

// newID returns a random 128-bit event id in hex.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
