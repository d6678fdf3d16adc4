package runstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// ReaperConsumer is the durable JetStream consumer, shared by every
// orchestrator replica, that receives expired run timers.
const ReaperConsumer = "toolfleet_reaper"

// reapTimeout bounds the work on one expired timer.
const reapTimeout = 30 * time.Second

// Reaper frees the data of runs closed for longer than the retention: their
// transcript, blobs, description and events, and their entry in their
// principal's quota. Every run has a timer in the records bucket (set when it
// starts); when it expires, one replica's Reaper asks Temporal about the run:
// one still running, or closed for less than the retention, gets its timer
// set again; otherwise its data is freed. Replicas share the work through one
// durable consumer: no home-made scheduler, nothing lost while all are down
// for less than a day (the markers' lifetime).
type Reaper struct {
	Store    *Store
	Temporal client.Client
	// EventStream is the run event stream (default DefaultEventStream).
	EventStream string
	Log         *slog.Logger
}

// Start consumes expired timers until the returned stop is called. The
// store must have been opened with OpenStore (it owns the records bucket).
func (rp *Reaper) Start(ctx context.Context) (stop func(), err error) {
	recs := rp.Store.recs
	if recs == nil {
		return nil, errors.New("runstore: the reaper needs a store opened with OpenStore")
	}
	if rp.Store.retention <= 0 {
		return func() {}, nil // no retention: the buckets' max age frees data
	}
	cons, err := recs.js.CreateOrUpdateConsumer(ctx, "KV_"+recs.bucket, jetstream.ConsumerConfig{
		Durable:       ReaperConsumer,
		Description:   "toolfleet orchestrator: frees the data of runs closed for longer than the retention",
		FilterSubject: "$KV." + recs.bucket + "." + reapPrefix + ">",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       2 * reapTimeout,
		MaxDeliver:    20,
		MaxAckPending: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("runstore: reaper consumer: %w", err)
	}
	cc, err := cons.Consume(rp.handle)
	if err != nil {
		return nil, fmt.Errorf("runstore: reaper: %w", err)
	}
	return cc.Stop, nil
}

func (rp *Reaper) log() *slog.Logger {
	if rp.Log != nil {
		return rp.Log
	}
	return slog.Default()
}

// handle acts on the marker an expired timer leaves; every other message on
// the timers' subjects (setting or re-setting a timer) is acknowledged.
func (rp *Reaper) handle(m jetstream.Msg) {
	if m.Headers().Get(jetstream.MarkerReasonHeader) != "MaxAge" {
		_ = m.Ack()
		return
	}
	runID := m.Subject()[strings.LastIndex(m.Subject(), "."+reapPrefix)+len(reapPrefix)+1:]
	ctx, cancel := context.WithTimeout(context.Background(), reapTimeout)
	defer cancel()
	if err := rp.Reap(ctx, runID); err != nil {
		rp.log().Warn("freeing a run's data failed; it is tried again", "run_id", runID, "error", err)
		_ = m.NakWithDelay(10 * time.Second)
		return
	}
	_ = m.Ack()
}

// Reap frees runID's data if it has been closed for the retention, or sets
// its timer again.
func (rp *Reaper) Reap(ctx context.Context, runID string) error {
	if err := validID(runID); err != nil {
		return nil // not a timer of ours
	}
	recs, retention := rp.Store.recs, rp.Store.retention
	desc, err := rp.Temporal.DescribeWorkflowExecution(ctx, runID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		// Never started, or Temporal's own retention forgot it long ago.
	case err != nil:
		return fmt.Errorf("describe %s: %w", runID, err)
	default:
		info := desc.GetWorkflowExecutionInfo()
		if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return recs.rearm(ctx, runID, retention)
		}
		if left := time.Until(info.GetCloseTime().AsTime().Add(retention)); left > 0 {
			return recs.rearm(ctx, runID, left)
		}
	}
	// Its principal's quota first: the description names the principal.
	if sub := rp.Store.Owner(ctx, runID); sub != "" {
		if err := recs.release(ctx, sub, runID); err != nil {
			return err
		}
	}
	if err := rp.Store.Purge(ctx, runID); err != nil {
		return err
	}
	name := rp.EventStream
	if name == "" {
		name = toolcall.DefaultEventStream
	}
	st, err := recs.js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("runstore: event stream: %w", err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(toolcall.EventSubjectPrefix+runID+".>")); err != nil {
		return fmt.Errorf("runstore: purge events of %s: %w", runID, err)
	}
	rp.log().Info("freed the data of a closed run", "run_id", runID)
	return nil
}
