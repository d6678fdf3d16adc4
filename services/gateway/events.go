package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	callevents "github.com/toolfleet/toolfleet/services/gateway/events"
)

// EventSubjectPrefix starts the subjects of call events:
// toolfleet.events.call.<kit>.<tool>.<started|succeeded|failed>.
const EventSubjectPrefix = callevents.SubjectPrefix

// Event kinds.
const (
	EventStarted   = callevents.Started
	EventSucceeded = callevents.Succeeded
	EventFailed    = callevents.Failed
)

// events is the call pipeline's handle on the event publisher (package events
// does the queueing, batching and acks); nil when the gateway has no NATS.
type events struct{ pub *callevents.Publisher }

func newEvents(log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, stream jetstream.StreamConfig, size int, m *metrics) *events {
	return &events{pub: callevents.New(log, nc, js, stream, size, callevents.Metrics{Published: m.eventsPublished, Dropped: m.eventsDropped})}
}

// publish queues one event of the call; it never blocks.
func (e *events) publish(kind string, ev *toolfleetv1.CallEvent, toolkit, tool string) {
	if e == nil {
		return
	}
	e.pub.Publish(kind, ev, toolkit, tool, traceParent(ev.GetTraceId()))
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

func withOutcome(ev *toolfleetv1.CallEvent, d time.Duration, kind, message string) *toolfleetv1.CallEvent {
	ev.Duration = durationpb.New(d)
	ev.FailureKind, ev.FailureMessage = kind, message
	return ev
}

// ensureStream reports whether the event stream exists (creating it if needed);
// readiness waits for it.
func (e *events) ensureStream(ctx context.Context) bool { return e.pub.EnsureStream(ctx) }
