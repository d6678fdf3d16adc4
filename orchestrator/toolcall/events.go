package toolcall

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Subjects and the stream of run events (runs and programs share them, so
// one watcher follows both).
const (
	// EventSubjectPrefix starts toolfleet.events.run.<id>.<kind>.
	EventSubjectPrefix = "toolfleet.events.run."
	// DeltaSubjectPrefix starts toolfleet.stream.run.<id> (core NATS, ephemeral).
	DeltaSubjectPrefix = "toolfleet.stream.run."
	// DefaultEventStream is the JetStream stream holding run events.
	DefaultEventStream = "TOOLFLEET_RUN_EVENTS"
)

// EventSubject is the subject of an event of run or program id.
func EventSubject(id, kind string) string { return EventSubjectPrefix + id + "." + kind }

// DeltaSubject is the subject of a run's token deltas.
func DeltaSubject(id string) string { return DeltaSubjectPrefix + id }

// Event kinds published on toolfleet.events.run.<id>.<kind>.
const (
	EventStarted           = "started"
	EventTurn              = "turn"
	EventToolCall          = "tool_call"
	EventToolResult        = "tool_result"
	EventApprovalRequested = "approval.requested"
	EventApprovalDecided   = "approval.decided"
	EventMessage           = "message"
	EventPrint             = "print"
	EventCompleted         = "completed"
	EventFailed            = "failed"
	EventCancelled         = "cancelled"
)

// Final reports whether an event of kind ends a run or a program.
func Final(kind string) bool {
	return kind == EventCompleted || kind == EventFailed || kind == EventCancelled
}

// Usage counts tokens.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Event is a run or program event for a publishing activity.
type Event struct {
	RunID   string `json:"run_id"`
	Kind    string `json:"kind"`
	Turn    int    `json:"turn,omitempty"`
	CallID  string `json:"call_id,omitempty"`
	ToolID  string `json:"tool_id,omitempty"`
	Message string `json:"message,omitempty"`
	// Usage is the model turn's tokens (turn events only).
	Usage *Usage `json:"usage,omitempty"`
	// Limit names the limit a failed program hit (programs' failed events);
	// it feeds the orchestrator's metrics and is not published.
	Limit string `json:"limit,omitempty"`
	// ID dedupes the event in JetStream (Nats-Msg-Id); deterministic per step.
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
}

// Publisher publishes events; a repeat of an event id must be dropped.
// agent.Events (JetStream, Nats-Msg-Id) implements it.
type Publisher interface {
	Publish(ctx context.Context, ev Event) error
	// PublishNew is Publish that also reports whether the event was new (not
	// a repeat of its id), so metrics count an ending once.
	PublishNew(ctx context.Context, ev Event) (stored bool, _ error)
}

// EventPublisher publishes events; a repeat of an event id must be
// dropped. A [Publisher] also says whether an event was new.
type EventPublisher interface {
	Publish(ctx context.Context, ev Event) error
}

// PublishEvent is the one event activity of runs and programs, each
// registering it under its own name ("PublishEvent", "PublishProgramEvent"):
// it publishes ev through pub (nil: nowhere) and, for an event that ends the
// run or program ([Final]), calls ended — once when pub is a [Publisher]
// (a retry whose event the stream already has is not counted again), at
// least once otherwise.
func PublishEvent(ctx context.Context, pub EventPublisher, ev Event, ended func(Event)) error {
	stored := true
	var err error
	switch p := pub.(type) {
	case nil:
	case Publisher:
		stored, err = p.PublishNew(ctx, ev)
	default:
		err = p.Publish(ctx, ev)
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", ev.Kind, err)
	}
	if stored && Final(ev.Kind) {
		ended(ev)
	}
	return nil
}

// DecodeEvent parses a run event message body.
func DecodeEvent(data []byte) (*toolfleetv1.RunEvent, error) {
	ev := &toolfleetv1.RunEvent{}
	if err := protojson.Unmarshal(data, ev); err != nil {
		return nil, fmt.Errorf("toolcall: decode event: %w", err)
	}
	return ev, nil
}
