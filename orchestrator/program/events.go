package program

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// EventSubjectPrefix starts toolfleet.events.run.<program_id>.<kind>: programs
// share the subjects (and the stream) of agent run events.
const EventSubjectPrefix = "toolfleet.events.run."

// EventSubject is the subject of a program event.
func EventSubject(programID, kind string) string { return EventSubjectPrefix + programID + "." + kind }

// JetStreamEvents publishes program events to a JetStream stream that holds
// toolfleet.events.run.> (the agent runs' stream), deduplicated by event id.
type JetStreamEvents struct{ JS jetstream.JetStream }

// Publish stores ev and waits for JetStream's ack.
func (e JetStreamEvents) Publish(ctx context.Context, ev Event) error {
	pb := &toolfleetv1.RunEvent{Id: ev.ID, RunId: ev.ProgramID, Kind: ev.Kind, Time: timestamppb.New(ev.Time),
		CallId: ev.CallID, ToolId: ev.ToolID, Message: ev.Message}
	b, err := protojson.Marshal(pb)
	if err != nil {
		return fmt.Errorf("program: encode event: %w", err)
	}
	msg := nats.NewMsg(EventSubject(ev.ProgramID, ev.Kind))
	msg.Data = b
	msg.Header.Set("ce-id", ev.ID)
	msg.Header.Set("ce-type", "toolfleet.program."+ev.Kind)
	msg.Header.Set("ce-source", "toolfleet/orchestrator")
	msg.Header.Set("ce-time", ev.Time.UTC().Format(time.RFC3339Nano))
	msg.Header.Set("content-type", "application/json")
	if _, err := e.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.ID)); err != nil {
		return fmt.Errorf("program: publish %s event: %w", ev.Kind, err)
	}
	return nil
}
