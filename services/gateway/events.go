package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	callevents "github.com/toolfleet/toolfleet/services/gateway/events"
)

// EventSubjectPrefix starts the subjects of call events:
// toolfleet.events.call.<kit>.<tool>.<started|succeeded|failed|input_required>.
const EventSubjectPrefix = callevents.SubjectPrefix

// Event kinds.
const (
	EventStarted   = callevents.Started
	EventSucceeded = callevents.Succeeded
	EventFailed    = callevents.Failed
	// EventInputRequired: the tool asked its caller for input (not terminal).
	EventInputRequired = callevents.InputRequired
)

// events is the call pipeline's handle on the event publisher (package events
// does the queueing, batching and acks); nil when the gateway has no NATS.
type events struct{ pub *callevents.Publisher }

func newEvents(log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, stream jetstream.StreamConfig, size int, m *metrics, shares *storeShares) *events {
	pub := callevents.New(log, nc, js, stream, size, callevents.Metrics{Published: m.eventsPublished, Dropped: m.eventsDropped})
	if shares != nil {
		pub.SetShare(storeShare{s: shares, store: shareEvents})
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolfleet_gateway_events_queued",
		Help: "Call events waiting in the gateway's queue for NATS (bounded by Events.Queue)."}, func() float64 { return float64(pub.Backlog()) }))
	return &events{pub: pub}
}

// publish queues one event of a call by principal; it never blocks.
func (e *events) publish(principal, kind string, ev *toolfleetv1.CallEvent, toolkit, tool string) {
	if e == nil {
		return
	}
	e.pub.Publish(principal, kind, ev, toolkit, tool, traceParent(ev.GetTraceId()))
}

func (e *events) run(ctx context.Context) { e.pub.Run(ctx) }

// wait blocks until the publisher has stopped.
func (e *events) wait() {
	if e != nil {
		e.pub.Wait()
	}
}

// newCallEvent fills the fields every event of a call shares.
func newCallEvent(req *toolfleetv1.CallToolRequest, callID, toolID string) *toolfleetv1.CallEvent {
	return &toolfleetv1.CallEvent{CallId: callID, ToolId: toolID, TraceId: req.GetTraceId(), UserId: req.GetContext().GetUserId()}
}

// withOutcome makes ev a terminal event of a call that started at start.
func withOutcome(ev *toolfleetv1.CallEvent, start time.Time, kind, message string) *toolfleetv1.CallEvent {
	ev.StartedAt = timestamppb.New(start)
	ev.Duration = durationpb.New(time.Since(start))
	ev.FailureKind, ev.FailureMessage = kind, message
	return ev
}

// ensureStream makes sure the event stream exists as configured (creating or
// updating it); readiness waits for it.
func (e *events) ensureStream(ctx context.Context) error { return e.pub.EnsureStream(ctx) }

// startedEvent publishes a call's started event once the call has run for
// the gateway's threshold (at once when the threshold is negative), so a fast
// call costs one event instead of two. Subscribers lose nothing: every call
// still ends with a terminal event, and slow calls still announce themselves.
type startedEvent struct {
	mu       sync.Mutex
	finished bool
	timer    *time.Timer
}

// announce arranges the started event of the call that ev describes.
func (e *events) announce(after time.Duration, principal string, ev func() *toolfleetv1.CallEvent, toolkit, tool string) *startedEvent {
	if e == nil {
		return nil
	}
	if after < 0 {
		e.publish(principal, EventStarted, ev(), toolkit, tool)
		return nil
	}
	s := &startedEvent{}
	s.timer = time.AfterFunc(after, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.finished {
			e.publish(principal, EventStarted, ev(), toolkit, tool)
		}
	})
	return s
}

// finish cancels a started event not yet published, or waits until one being
// published is queued, so that it always precedes the terminal event.
func (s *startedEvent) finish() {
	if s == nil || s.timer.Stop() {
		return
	}
	s.mu.Lock()
	s.finished = true
	s.mu.Unlock()
}
