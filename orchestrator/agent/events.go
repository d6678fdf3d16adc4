package agent

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/telemetry"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// Headers of run events (the subjects and the stream are package toolcall's).
const (
	// Headers of a token delta: the model turn, the activity attempt that
	// streamed it (a watcher drops what a failed attempt had streamed) and
	// the delta's sequence within that attempt.
	HeaderTurn    = "Toolfleet-Turn"
	HeaderAttempt = "Toolfleet-Attempt"
	HeaderSeq     = "Toolfleet-Seq"
)

// EventStreamConfig is the stream the orchestrator creates for run events
// (1 GiB on disk, or 64 MiB in memory for tests); [EventStreamFor] gives it
// the configured replicas, storage and limits.
func EventStreamConfig(name string, memory bool) jetstream.StreamConfig {
	if name == "" {
		name = toolcall.DefaultEventStream
	}
	st, size := jetstream.FileStorage, int64(1<<30)
	if memory {
		st, size = jetstream.MemoryStorage, 64<<20
	}
	return jetstream.StreamConfig{
		Name:        name,
		Description: "toolfleet agent run events",
		Subjects:    []string{toolcall.EventSubjectPrefix + ">"},
		Storage:     st,
		MaxAge:      7 * 24 * time.Hour,
		MaxBytes:    size,
		Discard:     jetstream.DiscardOld,
		Duplicates:  10 * time.Minute,
	}
}

// EventStreamFor is [EventStreamConfig] with the replicas, storage, byte
// bound and max age that assets set for the stream (sdk/jsassets).
func EventStreamFor(name string, assets jsassets.Config) jetstream.StreamConfig {
	sc := EventStreamConfig(name, false)
	return assets.Settings(jsassets.RunEvents.Named(sc.Name)).Stream(sc)
}

// Events publishes run events to JetStream (deduplicated by event id) and
// token deltas to core NATS.
type Events struct {
	nc *nats.Conn
	js jetstream.JetStream
	// counter, when set, counts each stored event against its run's or
	// program's principal (CountAgainst).
	counter *runstore.Store
}

// CountAgainst counts every event stored from now on against the event
// bound (Quota.MaxEventBytes) of its run's or program's principal in s's
// records. The stream drops its oldest events when full; the bound keeps
// one principal's events from evicting another's, and they are freed with
// the run (the reaper purges its subjects and its quota entry).
func (e *Events) CountAgainst(s *runstore.Store) { e.counter = s }

// OpenEvents ensures the event stream exists.
func OpenEvents(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream jetstream.StreamConfig) (*Events, error) {
	if _, err := jsassets.EnsureStream(ctx, js, stream); err != nil {
		return nil, fmt.Errorf("agent: event stream: %w", err)
	}
	return &Events{nc: nc, js: js}, nil
}

// Publish stores ev and waits for JetStream's ack. A repeat of the same id
// within the stream's duplicate window is dropped by the server.
func (e *Events) Publish(ctx context.Context, ev toolcall.Event) error {
	_, err := e.PublishNew(ctx, ev)
	return err
}

// PublishNew is Publish that also reports whether the stream stored ev: false
// when it was a repeat of an id within the duplicate window (a retried
// activity), which lets metrics count each event once.
func (e *Events) PublishNew(ctx context.Context, ev toolcall.Event) (stored bool, _ error) {
	pb := &toolfleetv1.RunEvent{Id: ev.ID, RunId: ev.RunID, Kind: ev.Kind, Time: timestamppb.New(ev.Time),
		Turn: int32(ev.Turn), CallId: ev.CallID, ToolId: ev.ToolID, Message: ev.Message}
	if u := ev.Usage; u != nil {
		pb.Usage = &toolfleetv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	}
	b, err := protojson.Marshal(pb)
	if err != nil {
		return false, fmt.Errorf("agent: encode event: %w", err)
	}
	msg := nats.NewMsg(toolcall.EventSubject(ev.RunID, ev.Kind))
	msg.Data = b
	msg.Header.Set("ce-id", ev.ID)
	msg.Header.Set("ce-type", "toolfleet.run."+ev.Kind)
	msg.Header.Set("ce-source", "toolfleet/orchestrator")
	msg.Header.Set("ce-time", ev.Time.UTC().Format(time.RFC3339Nano))
	msg.Header.Set("content-type", "application/json")
	// The activity's span (when tracing) becomes the event's traceparent.
	telemetry.Propagator.Inject(ctx, telemetry.NATSCarrier(msg.Header))
	ack, err := e.js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.ID))
	if err != nil {
		return false, fmt.Errorf("agent: publish %s event: %w", ev.Kind, err)
	}
	if !ack.Duplicate && e.counter != nil {
		e.counter.ChargeEvent(ctx, ev.RunID, eventBytes(msg))
	}
	return !ack.Duplicate, nil
}

// eventBytes is about what msg holds in the stream: its subject, headers
// and body.
func eventBytes(msg *nats.Msg) int64 {
	n := len(msg.Subject) + len(msg.Data) + len(jetstream.MsgIDHeader) + len(msg.Header.Get("ce-id"))
	for k, vs := range msg.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// Delta publishes one token delta; it never waits for the network.
func (e *Events) Delta(runID string, turn, attempt, seq int, text string) error {
	msg := nats.NewMsg(toolcall.DeltaSubject(runID))
	msg.Data = []byte(text)
	msg.Header.Set(HeaderTurn, strconv.Itoa(turn))
	msg.Header.Set(HeaderAttempt, strconv.Itoa(attempt))
	msg.Header.Set(HeaderSeq, strconv.Itoa(seq))
	return e.nc.PublishMsg(msg)
}
