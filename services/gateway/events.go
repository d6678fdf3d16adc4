package gateway

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// EventSubjectPrefix starts the subjects of call events:
// toolfleet.events.call.<kit>.<tool>.<started|succeeded|failed>.
const EventSubjectPrefix = "toolfleet.events.call."

// Batching of event publishes.
const (
	maxBatch    = 256
	batchLinger = 2 * time.Millisecond
)

// Event kinds.
const (
	EventStarted   = "started"
	EventSucceeded = "succeeded"
	EventFailed    = "failed"
)

// events publishes call events to JetStream without ever blocking a call: events
// go into a bounded queue drained by one goroutine; while NATS is away they wait
// there, and when the queue is full new events are dropped, counted and logged.
type events struct {
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.StreamConfig
	queue  chan *nats.Msg
	m      *metrics

	dropped atomic.Uint64
	wg      sync.WaitGroup
}

func newEvents(log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, stream jetstream.StreamConfig, size int, m *metrics) *events {
	return &events{log: log, nc: nc, js: js, stream: stream, queue: make(chan *nats.Msg, size), m: m}
}

// Header values shared by every event (read-only once built).
var (
	ceSource = []string{"toolfleet/gateway"}
	ceTypes  = map[string][]string{
		EventStarted:   {"toolfleet.call." + EventStarted},
		EventSucceeded: {"toolfleet.call." + EventSucceeded},
		EventFailed:    {"toolfleet.call." + EventFailed},
	}
)

// publish queues one event; it never blocks.
func (e *events) publish(kind string, ev *toolfleetv1.CallEvent, toolkit, tool string) {
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
	if ev.TraceId != "" {
		h["traceparent"] = []string{traceParent(ev.TraceId)}
	}
	msg := &nats.Msg{Subject: EventSubjectPrefix + toolkit + "." + tool + "." + kind, Header: h, Data: b}
	select {
	case e.queue <- msg:
	default:
		n := e.dropped.Add(1)
		e.m.eventsDropped.Inc()
		if n == 1 || n%1000 == 0 {
			e.log.Error("event queue full; call events dropped", "dropped_total", n, "queue", cap(e.queue))
		}
	}
}

// newCallEvent fills the fields every event of a call shares.
func newCallEvent(req *toolfleetv1.CallToolRequest, callID, toolID string) *toolfleetv1.CallEvent {
	return &toolfleetv1.CallEvent{CallId: callID, ToolId: toolID, TraceId: req.GetTraceId(), UserId: req.GetContext().GetUserId()}
}

func withOutcome(ev *toolfleetv1.CallEvent, d time.Duration, kind, message string) *toolfleetv1.CallEvent {
	ev.Duration = durationpb.New(d)
	ev.FailureKind, ev.FailureMessage = kind, message
	return ev
}

// run drains the queue until ctx is done, then for at most a few seconds more.
func (e *events) run(ctx context.Context) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ready := false
		// A batch waits in hand while NATS is away, so it counts against the
		// bound too: never hold more than the queue's size outside the queue.
		limit := min(maxBatch, cap(e.queue))
		for {
			var batch []*nats.Msg
			select {
			case <-ctx.Done():
				e.flushOnStop()
				return
			case m := <-e.queue:
				batch = append(batch, m)
			}
			// Linger briefly so that one ack covers the events of several calls.
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
			for len(batch) > 0 {
				if !ready {
					ready = e.ensureStream(ctx)
				}
				if ready {
					batch = e.send(ctx, batch)
				}
				if len(batch) == 0 {
					break
				}
				// NATS is away: keep the batch and wait; new events wait in the queue.
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

// ensureStream creates the event stream once NATS is reachable.
func (e *events) ensureStream(ctx context.Context) bool {
	if !e.nc.IsConnected() {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := e.js.CreateOrUpdateStream(cctx, e.stream); err != nil {
		e.log.Warn("event stream not ready", "stream", e.stream.Name, "error", err)
		return false
	}
	return true
}

// send publishes a batch and returns it when it was not acknowledged. Only the
// last message asks for an ack: JetStream stores one connection's messages to a
// stream in order, so that ack confirms the whole batch, and a batch re-sent after
// a failure is deduplicated by Nats-Msg-Id. This saves an ack per event.
func (e *events) send(ctx context.Context, batch []*nats.Msg) []*nats.Msg {
	if !e.nc.IsConnected() {
		return batch
	}
	last := len(batch) - 1
	for _, m := range batch[:last] {
		if err := e.nc.PublishMsg(m); err != nil {
			return batch
		}
	}
	ack, err := e.js.PublishMsgAsync(batch[last])
	if err != nil {
		return batch
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	select {
	case <-ack.Ok():
		e.m.eventsPublished.Add(float64(len(batch)))
		return nil
	case <-ack.Err():
	case <-timeout.C:
	case <-ctx.Done():
	}
	return batch
}

func (e *events) requeue(batch []*nats.Msg) {
	for _, m := range batch {
		select {
		case e.queue <- m:
		default:
			e.dropped.Add(1)
			e.m.eventsDropped.Inc()
		}
	}
}

// flushOnStop tries briefly to publish what is left, then reports the rest as dropped.
func (e *events) flushOnStop() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var left []*nats.Msg
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
		e.m.eventsDropped.Add(float64(len(left)))
		e.log.Error("call events dropped at shutdown", "dropped", len(left), "dropped_total", n)
	}
}

// wait blocks until the drain goroutine has stopped.
func (e *events) wait() {
	if e != nil {
		e.wg.Wait()
	}
}
