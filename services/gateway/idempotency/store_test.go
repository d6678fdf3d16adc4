package idempotency_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
)

// gone is the HolderGoneAfter of these tests: long enough for a write on a
// loaded machine, short enough for a quick test.
const gone = 600 * time.Millisecond

type env struct {
	s  *idempotency.Store
	nc *nats.Conn
	kv jetstream.KeyValue
}

func start(t *testing.T, cfg idempotency.Config) env {
	t.Helper()
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MemoryStorage = true
	if cfg.HolderGoneAfter == 0 {
		cfg.HolderGoneAfter = gone
	}
	s, err := idempotency.New(t.Context(), slog.New(slog.DiscardHandler), nc, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), s.Config().Bucket)
	if err != nil {
		t.Fatal(err)
	}
	return env{s: s, nc: nc, kv: kv}
}

var key = idempotency.Key{Principal: "ana", Tool: "KV.Increment", CallID: "c1"}

func digest(t *testing.T, s string) idempotency.Digest {
	t.Helper()
	var d idempotency.Digest
	copy(d[:], s)
	return d
}

// worker plays a worker that keeps the journal: it records the start of a
// claim, and answers.
type worker struct {
	t   *testing.T
	nc  *nats.Conn
	c   journal.Claim
	rev uint64
}

func (w *worker) start() error {
	rev, err := journal.Write(w.t.Context(), w.nc, w.c.Subject, journal.Encode(journal.KindStarted, w.c.Digest, []byte("w1")), w.c.Revision)
	w.rev = rev
	return err
}

func (w *worker) heartbeat() {
	w.t.Helper()
	rev, err := journal.Write(w.t.Context(), w.nc, w.c.Subject, journal.Encode(journal.KindStarted, w.c.Digest, []byte("w1")), w.rev)
	if err != nil {
		w.t.Errorf("heartbeat: %v", err)
	}
	w.rev = rev
}

func (w *worker) finish(out *toolfleetv1.WorkerCallOutcome) {
	w.t.Helper()
	b, _ := proto.Marshal(out)
	rev, err := journal.Write(w.t.Context(), w.nc, w.c.Subject, journal.Encode(journal.KindFinished, w.c.Digest, b), w.rev)
	if err != nil {
		w.t.Errorf("finish: %v", err)
	}
	w.rev = rev
}

// A gateway that went away after a worker recorded the start and the answer:
// the retry gets the worker's answer and runs nothing.
func TestRetryGetsTheWorkersAnswer(t *testing.T) {
	t.Parallel()
	e := start(t, idempotency.Config{})
	d := digest(t, "in")
	c, err := e.s.Acquire(t.Context(), key, d, idempotency.Options{})
	if err != nil || !c.Owned() {
		t.Fatalf("Acquire: %v %v", c, err)
	}
	w := &worker{t: t, nc: e.nc, c: c.Journal()}
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	w.finish(&toolfleetv1.WorkerCallOutcome{ToolkitVersion: "1.0.0", Output: []byte{8, 1}})
	// The first gateway is gone: it never stores the response.
	r, err := e.s.Acquire(t.Context(), key, d, idempotency.Options{})
	if err != nil || r.Finished.GetToolkitVersion() != "1.0.0" || !r.Owned() {
		t.Fatalf("retry: %+v %v, want the worker's answer", r, err)
	}
	r.Finish(&toolfleetv1.CallToolResponse{CallId: "c1", Success: true}, true, true)
	again, err := e.s.Acquire(t.Context(), key, d, idempotency.Options{})
	if err != nil || again.Stored.GetCallId() != "c1" {
		t.Fatalf("second retry: %+v %v, want the stored response", again, err)
	}
	if _, err := e.s.Acquire(t.Context(), key, digest(t, "other"), idempotency.Options{}); !errors.Is(err, idempotency.ErrConflict) {
		t.Fatalf("other input: %v, want ErrConflict", err)
	}
}

// A retry waits while the worker shows signs of life, and gets its answer.
func TestRetryWaitsForALiveWorker(t *testing.T) {
	t.Parallel()
	e := start(t, idempotency.Config{})
	d := digest(t, "in")
	c, _ := e.s.Acquire(t.Context(), key, d, idempotency.Options{})
	w := &worker{t: t, nc: e.nc, c: c.Journal()}
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Alive for 4 × gone, then finished.
		for range 16 {
			time.Sleep(gone / 4)
			w.heartbeat()
		}
		w.finish(&toolfleetv1.WorkerCallOutcome{ToolkitVersion: "1.0.0"})
	}()
	r, err := e.s.Acquire(t.Context(), key, d, idempotency.Options{})
	<-done
	if err != nil || r.Finished == nil {
		t.Fatalf("retry: %+v %v, want the answer of the worker that was alive", r, err)
	}
}

// A worker that recorded the start and went away: the call may have run. The
// retry is told so (and every later one), and runs nothing; a rerunnable call
// is taken over instead.
func TestStartedAndGone(t *testing.T) {
	t.Parallel()
	for _, rerunnable := range []bool{false, true} {
		t.Run("rerunnable="+strconv.FormatBool(rerunnable), func(t *testing.T) {
			t.Parallel()
			e := start(t, idempotency.Config{})
			d := digest(t, "in")
			opts := idempotency.Options{Rerunnable: rerunnable}
			c, _ := e.s.Acquire(t.Context(), key, d, opts)
			w := &worker{t: t, nc: e.nc, c: c.Journal()}
			if err := w.start(); err != nil {
				t.Fatal(err)
			}
			r, err := e.s.Acquire(t.Context(), key, d, opts)
			if rerunnable {
				if err != nil || !r.Owned() {
					t.Fatalf("rerunnable retry: %+v %v, want it taken over", r, err)
				}
				return
			}
			if !errors.Is(err, idempotency.ErrOutcomeUnknown) {
				t.Fatalf("retry: %+v %v, want ErrOutcomeUnknown", r, err)
			}
			entry, err := e.kv.Get(t.Context(), entryKey(t, e))
			if err != nil {
				t.Fatal(err)
			}
			rec, _ := journal.Decode(entry.Value())
			if rec.Kind != journal.KindUnknown || journal.Reason(rec.Payload[0]) != journal.ReasonStarted {
				t.Fatalf("record %c %q, want U(started)", rec.Kind, rec.Payload)
			}
			// The worker comes back (a long pause, not a death): its answer is refused.
			if _, err := journal.Write(t.Context(), e.nc, w.c.Subject, journal.Encode(journal.KindFinished, d, nil), w.rev); !errors.Is(err, journal.ErrMoved) {
				t.Fatalf("late finish: %v, want ErrMoved", err)
			}
		})
	}
}

// A gateway that went away before any worker started the call: a journaled
// lock is taken over (and the old attempt, arriving late, cannot start); an
// unjournaled one may hide a call that ran, so the retry is refused.
func TestLockLeftBehind(t *testing.T) {
	t.Parallel()
	for _, unjournaled := range []bool{false, true} {
		t.Run("unjournaled="+strconv.FormatBool(unjournaled), func(t *testing.T) {
			t.Parallel()
			e := start(t, idempotency.Config{})
			d := digest(t, "in")
			opts := idempotency.Options{Unjournaled: unjournaled}
			dead, _ := e.s.Acquire(t.Context(), key, d, opts)
			late := &worker{t: t, nc: e.nc, c: dead.Journal()}
			r, err := e.s.Acquire(t.Context(), key, d, opts)
			if unjournaled {
				if !errors.Is(err, idempotency.ErrOutcomeUnknown) {
					t.Fatalf("retry: %+v %v, want ErrOutcomeUnknown", r, err)
				}
				return
			}
			if err != nil || !r.Owned() {
				t.Fatalf("retry: %+v %v, want the call taken over", r, err)
			}
			if err := late.start(); !errors.Is(err, journal.ErrMoved) {
				t.Fatalf("the dead gateway's attempt, arriving late: %v, want ErrMoved (it must not start)", err)
			}
		})
	}
}

// A gateway that keeps its lock alive (a call on a worker without a journal)
// is waited for, not taken over.
func TestKeepAliveHoldsRetriesOff(t *testing.T) {
	t.Parallel()
	e := start(t, idempotency.Config{HolderGoneAfter: 5 * time.Second})
	d := digest(t, "in")
	c, _ := e.s.Acquire(t.Context(), key, d, idempotency.Options{Unjournaled: true})
	stop := c.KeepAlive()
	ctx, cancel := context.WithTimeout(t.Context(), 2*journal.HeartbeatInterval+time.Second)
	defer cancel()
	retry := make(chan error, 1)
	go func() {
		_, err := e.s.Acquire(ctx, key, d, idempotency.Options{Unjournaled: true})
		retry <- err
	}()
	before := revision(t, e)
	time.Sleep(journal.HeartbeatInterval + time.Second)
	if after := revision(t, e); after <= before {
		t.Fatalf("lock not renewed: revision %d then %d", before, after)
	}
	stop()
	c.Finish(&toolfleetv1.CallToolResponse{CallId: "c1", Success: true}, true, true)
	if err := <-retry; err != nil {
		t.Fatalf("retry: %v, want the response", err)
	}
}

// Fence: after a lost answer, a lock no worker started is withdrawn (the
// attempt can never start), and one a worker started says so.
func TestFence(t *testing.T) {
	t.Parallel()
	e := start(t, idempotency.Config{})
	d := digest(t, "in")
	c, _ := e.s.Acquire(t.Context(), key, d, idempotency.Options{})
	first := &worker{t: t, nc: e.nc, c: c.Journal()}
	if err := c.Fence(t.Context()); err != nil {
		t.Fatalf("Fence of an attempt that never started: %v", err)
	}
	if err := first.start(); !errors.Is(err, journal.ErrMoved) {
		t.Fatalf("the withdrawn attempt: %v, want ErrMoved", err)
	}
	second := &worker{t: t, nc: e.nc, c: c.Journal()}
	if err := second.start(); err != nil {
		t.Fatalf("the next attempt: %v", err)
	}
	if err := c.Fence(t.Context()); !errors.Is(err, idempotency.ErrStarted) {
		t.Fatalf("Fence after a start: %v, want ErrStarted", err)
	}
	second.finish(&toolfleetv1.WorkerCallOutcome{Code: 5, Message: "no such key"})
	out, _, err := c.Await(t.Context())
	if err != nil || out.GetMessage() != "no such key" {
		t.Fatalf("Await: %v %v, want the worker's answer", out, err)
	}
}

// A full store refuses new entries and forgets nobody's finished call
// (before the journal it dropped the oldest: another tenant could flush a
// stored call, whose retry then ran again).
func TestFullStoreForgetsNothing(t *testing.T) {
	t.Parallel()
	e := start(t, idempotency.Config{BucketConfig: jsassets.BucketConfig{MaxBytes: 64 << 10}, MaxValueSize: 16 << 10})
	d := digest(t, "in")
	c, _ := e.s.Acquire(t.Context(), key, d, idempotency.Options{})
	c.Finish(&toolfleetv1.CallToolResponse{CallId: "c1", Success: true}, true, true)
	big := &toolfleetv1.CallToolResponse{ToolId: strings.Repeat("x", 12<<10)}
	full := false
	for i := range 100 {
		other := idempotency.Key{Principal: "bo", Tool: "Big.Result", CallID: strconv.Itoa(i)}
		c, err := e.s.Acquire(t.Context(), other, d, idempotency.Options{})
		if errors.Is(err, idempotency.ErrFull) {
			full = true
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		c.Finish(big, true, true)
	}
	if !full {
		t.Fatal("100 results of 12 KiB fit in 64 KiB")
	}
	r, err := e.s.Acquire(t.Context(), key, d, idempotency.Options{})
	if err != nil || r.Stored.GetCallId() != "c1" {
		t.Fatalf("the first tenant's retry: %+v %v, want its stored response", r, err)
	}
}

func entryKey(t *testing.T, e env) string {
	t.Helper()
	keys, err := e.kv.Keys(t.Context())
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v %v", keys, err)
	}
	if !strings.HasPrefix(keys[0], "KV.") {
		t.Fatalf("key %q does not start with its toolkit", keys[0])
	}
	return keys[0]
}

func revision(t *testing.T, e env) uint64 {
	t.Helper()
	entry, err := e.kv.Get(t.Context(), entryKey(t, e))
	if err != nil {
		t.Fatal(err)
	}
	return entry.Revision()
}

// A retry of a call whose worker process is gone learns it from the
// worker's liveness probe at once, not after HolderGoneAfter; while the
// process answers, the retry waits for its answer.
func TestProbeTellsAGoneWorker(t *testing.T) {
	t.Parallel()
	e := start(t, idempotency.Config{HolderGoneAfter: time.Minute})
	d := digest(t, "in")
	c, _ := e.s.Acquire(t.Context(), key, d, idempotency.Options{})
	w := &worker{t: t, nc: e.nc, c: c.Journal()}
	// The worker process listens on its probe subject, and names it in S.
	sub, err := e.nc.Subscribe(journal.ProbeSubjectPrefix+"p1", func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		t.Fatal(err)
	}
	rev, err := journal.Write(t.Context(), e.nc, w.c.Subject, journal.Encode(journal.KindStarted, d, journal.StartedPayload("w1", "p1")), w.c.Revision)
	if err != nil {
		t.Fatal(err)
	}
	w.rev = rev
	alive, cancel := context.WithTimeout(t.Context(), 2*journal.HeartbeatInterval+time.Second)
	defer cancel()
	if _, err := e.s.Acquire(alive, key, d, idempotency.Options{}); !errors.Is(err, idempotency.ErrStillRunning) {
		t.Fatalf("retry while the worker process answers: %v, want it to wait (ErrStillRunning at its deadline)", err)
	}
	_ = sub.Unsubscribe() // the process dies
	ctx, cancel2 := context.WithTimeout(t.Context(), 2*journal.HeartbeatInterval+5*time.Second)
	defer cancel2()
	if _, err := e.s.Acquire(ctx, key, d, idempotency.Options{}); !errors.Is(err, idempotency.ErrOutcomeUnknown) {
		t.Fatalf("retry after the worker process died: %v, want ErrOutcomeUnknown well before HolderGoneAfter", err)
	}
}
