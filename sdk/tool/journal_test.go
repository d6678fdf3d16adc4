package tool_test

import (
	"context"
	"crypto/sha256"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

// journalWait bounds every wait of the journal tests.
const journalWait = 10 * time.Second

// journalService is the schematest toolkit counting the calls that reached
// it; Sleep runs until released (or its context ends).
type journalService struct {
	schematestv1.UnimplementedSchemaTestServiceServer
	calls   atomic.Int32
	started chan struct{} // a value per Sleep that began
	release chan struct{} // closed: every Sleep returns
}

func newJournalService() *journalService {
	return &journalService{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (s *journalService) Types(ctx context.Context, req *schematestv1.TypesRequest) (*schematestv1.TypesResponse, error) {
	s.calls.Add(1)
	tool.CallerLogger(ctx).Info("typed", "s", req.GetS())
	if req.GetS() == "fail" {
		return nil, tool.NewError("cannot do that", tool.WithDeveloperMessage("dev detail"))
	}
	return &schematestv1.TypesResponse{Echo: req}, nil
}

func (s *journalService) Panic(ctx context.Context, req *schematestv1.PanicRequest) (*schematestv1.PanicResponse, error) {
	s.calls.Add(1)
	if req.GetPanic() {
		panic("boom")
	}
	return &schematestv1.PanicResponse{CallId: tool.CallID(ctx)}, nil
}

func (s *journalService) Constraints(context.Context, *schematestv1.ConstraintsRequest) (*schematestv1.ConstraintsResponse, error) {
	s.calls.Add(1)
	return &schematestv1.ConstraintsResponse{Ok: true}, nil
}

func (s *journalService) Sleep(ctx context.Context, _ *schematestv1.SleepRequest) (*schematestv1.SleepResponse, error) {
	s.calls.Add(1)
	s.started <- struct{}{}
	select {
	case <-s.release:
		return &schematestv1.SleepResponse{Slept: ctx.Err() == nil}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// journalBucket is an idempotency bucket as the gateway makes it (per-message
// TTLs allowed), keeping some history so that tests can read every record.
type journalBucket struct {
	url    string
	nc     *nats.Conn
	kv     jetstream.KeyValue
	bucket string
}

func startJournalBucket(t *testing.T) *journalBucket {
	t.Helper()
	return startJournalBucketOf(t, jetstream.KeyValueConfig{})
}

// startJournalBucketOf makes the bucket with cfg's limits.
func startJournalBucketOf(t *testing.T, cfg jetstream.KeyValueConfig) *journalBucket {
	t.Helper()
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b := &journalBucket{url: srv.URL(), nc: nc, bucket: "toolfleet_idempotency"}
	cfg.Bucket, cfg.History, cfg.LimitMarkerTTL = b.bucket, 64, time.Minute
	b.kv, err = js.CreateKeyValue(t.Context(), cfg)
	if err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return b
}

// lock records a gateway's lock on key and returns the claim it would send.
func (b *journalBucket) lock(t *testing.T, key string) journal.Claim {
	t.Helper()
	c := journal.Claim{Subject: "$KV." + b.bucket + "." + key, Digest: journal.Digest(sha256.Sum256([]byte(key)))}
	rev, err := journal.Write(t.Context(), b.nc, c.Subject, journal.Encode(journal.KindLock, c.Digest, []byte{0}), 0)
	if err != nil {
		t.Fatalf("lock %s: %v", key, err)
	}
	c.Revision = rev
	return c
}

// history is key's records, oldest first.
func (b *journalBucket) history(t *testing.T, key string) []jetstream.KeyValueEntry {
	t.Helper()
	es, err := b.kv.History(t.Context(), key)
	if err != nil {
		t.Fatalf("history of %s: %v", key, err)
	}
	return es
}

// kinds is the record kinds of es.
func kinds(t *testing.T, es []jetstream.KeyValueEntry) string {
	t.Helper()
	var s []byte
	for _, e := range es {
		r, err := journal.Decode(e.Value())
		if err != nil {
			t.Fatalf("revision %d: %v", e.Revision(), err)
		}
		s = append(s, byte(r.Kind))
	}
	return string(s)
}

// outcomeOf decodes a finished record of claim's call.
func outcomeOf(t *testing.T, e jetstream.KeyValueEntry, c journal.Claim) *toolfleetv1.WorkerCallOutcome {
	t.Helper()
	r, err := journal.Decode(e.Value())
	if err != nil || r.Kind != journal.KindFinished || r.Digest != c.Digest {
		t.Fatalf("revision %d: kind %c, digest ok %v, err %v; want a finished record", e.Revision(), r.Kind, r.Digest == c.Digest, err)
	}
	var out toolfleetv1.WorkerCallOutcome
	if err := proto.Unmarshal(r.Payload, &out); err != nil {
		t.Fatalf("outcome: %v", err)
	}
	return &out
}

// journalWorker serves svc; cfg's Listen and Logger are filled in, and
// heartbeat > 0 overrides the journal's heartbeat interval.
func journalWorker(t *testing.T, cfg tool.Config, svc *journalService, heartbeat time.Duration) schematestv1.SchemaTestServiceClient {
	t.Helper()
	if cfg.WorkerID == "" {
		cfg.WorkerID = "w-journal"
	}
	w, _ := tooltest.Start(t, cfg, func(w *tool.Worker) {
		if heartbeat > 0 {
			tool.SetJournalHeartbeat(w, heartbeat)
		}
		schematestv1.RegisterSchemaTestServiceServer(w, svc)
	})
	return schematestv1.NewSchemaTestServiceClient(tooltest.Dial(t, w.Addr()))
}

// claimed is a call context carrying claim (and a call id).
func claimed(ctx context.Context, claim string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, journal.ClaimKey, claim, tool.CallIDKey, "call-1")
}

func TestJournalRecordsClaimedCall(t *testing.T) {
	t.Parallel()
	b := startJournalBucket(t)
	svc := newJournalService()
	c := journalWorker(t, tool.Config{NATSURL: b.url}, svc, 0)
	claim := b.lock(t, "SchemaTest.ok")

	var tr metadata.MD
	resp, err := c.Types(claimed(callCtx(t), claim.String()), &schematestv1.TypesRequest{S: "hello"}, grpc.Trailer(&tr))
	if err != nil {
		t.Fatalf("Types: %v", err)
	}
	if got := tr.Get(journal.NotStartedTrailer); len(got) != 0 {
		t.Fatalf("%s = %v on a call that ran", journal.NotStartedTrailer, got)
	}
	es := b.history(t, "SchemaTest.ok")
	if k := kinds(t, es); len(k) < 3 || k[0] != 'L' || k[len(k)-1] != 'F' || k[1] != 'S' {
		t.Fatalf("records %q, want L, S (then heartbeats), F", k)
	}
	if r, _ := journal.Decode(es[1].Value()); !strings.HasPrefix(string(r.Payload), "w-journal\x00") || journal.ProbeSubject(r.Payload) == "" ||
		r.Digest != claim.Digest || es[1].Revision() <= claim.Revision {
		t.Fatalf("start record %q at %d, want the worker id and its probe after the lock's revision %d", r.Payload, es[1].Revision(), claim.Revision)
	} else if _, err := b.nc.Request(journal.ProbeSubject(r.Payload), nil, 5*time.Second); err != nil {
		t.Fatalf("the worker's liveness probe %s: %v, want an answer", journal.ProbeSubject(r.Payload), err)
	}
	last := es[len(es)-1]
	if got := tr.Get(journal.FinishedTrailer); len(got) != 1 || got[0] != strconv.FormatUint(last.Revision(), 10) {
		t.Fatalf("%s = %v, want [%d]", journal.FinishedTrailer, got, last.Revision())
	}
	out := outcomeOf(t, last, claim)
	var recorded schematestv1.TypesResponse
	if err := proto.Unmarshal(out.GetOutput(), &recorded); err != nil || !proto.Equal(&recorded, resp) {
		t.Fatalf("recorded output %v (%v), want %v", &recorded, err, resp)
	}
	if out.GetCode() != 0 || out.GetToolkitVersion() != "0.3.1" || out.GetWorkerId() != "w-journal" {
		t.Fatalf("outcome = %v", out)
	}
	if ls := out.GetLogs().GetLines(); len(ls) != 1 || ls[0].GetMessage() != "typed s=hello" {
		t.Fatalf("recorded logs = %v", out.GetLogs())
	}
	if svc.calls.Load() != 1 {
		t.Fatalf("the tool ran %d times", svc.calls.Load())
	}
}

// An answer over the bucket's largest value is recorded as too large (T).
func TestJournalRecordsTooLarge(t *testing.T) {
	t.Parallel()
	b := startJournalBucketOf(t, jetstream.KeyValueConfig{MaxValueSize: 256})
	svc := newJournalService()
	c := journalWorker(t, tool.Config{NATSURL: b.url}, svc, 0)
	claim := b.lock(t, "SchemaTest.large")
	var tr metadata.MD
	if _, err := c.Types(claimed(callCtx(t), claim.String()), &schematestv1.TypesRequest{S: strings.Repeat("x", 1000)}, grpc.Trailer(&tr)); err != nil {
		t.Fatalf("Types: %v", err)
	}
	es := b.history(t, "SchemaTest.large")
	last := es[len(es)-1]
	if k := kinds(t, es); k[len(k)-1] != 'T' {
		t.Fatalf("records %q, want the last too large (T)", k)
	}
	if r, _ := journal.Decode(last.Value()); r.Digest != claim.Digest || len(r.Payload) != 0 {
		t.Fatalf("too-large record %q", last.Value())
	}
	if got := tr.Get(journal.FinishedTrailer); len(got) != 1 || got[0] != strconv.FormatUint(last.Revision(), 10) {
		t.Fatalf("%s = %v, want [%d]", journal.FinishedTrailer, got, last.Revision())
	}
}

func TestJournalStaleClaimDoesNotRun(t *testing.T) {
	t.Parallel()
	b := startJournalBucket(t)
	svc := newJournalService()
	c := journalWorker(t, tool.Config{NATSURL: b.url}, svc, 0)
	claim := b.lock(t, "SchemaTest.stale")
	// A retry took the call over: the entry moved past the claim.
	moved, err := journal.Write(t.Context(), b.nc, claim.Subject, journal.Encode(journal.KindLock, claim.Digest, []byte{0}), claim.Revision)
	if err != nil {
		t.Fatal(err)
	}

	var tr metadata.MD
	_, err = c.Types(claimed(callCtx(t), claim.String()), &schematestv1.TypesRequest{S: "hello"}, grpc.Trailer(&tr))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want Unavailable", err)
	}
	if got := tr.Get(journal.NotStartedTrailer); len(got) != 1 || got[0] != journal.ClaimLost {
		t.Fatalf("%s = %v, want %s", journal.NotStartedTrailer, got, journal.ClaimLost)
	}
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("the tool ran %d times", n)
	}
	if es := b.history(t, "SchemaTest.stale"); kinds(t, es) != "LL" || es[1].Revision() != moved {
		t.Fatalf("records %q, want the two locks only", kinds(t, es))
	}
}

func TestJournalUnavailableDoesNotRun(t *testing.T) {
	t.Parallel()
	b := startJournalBucket(t)
	claim := b.lock(t, "SchemaTest.x")
	// A port where nothing listens.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "nats://" + lis.Addr().String()
	_ = lis.Close()
	missing := claim
	missing.Subject = "$KV.no_such_bucket.SchemaTest.x"

	tests := []struct {
		name  string
		nats  string
		claim string
		code  codes.Code
	}{
		{"bucket missing", b.url, missing.String(), codes.Unavailable},
		{"NATS away", deadURL, claim.String(), codes.Unavailable},
		{"worker without NATS", "", claim.String(), codes.Unavailable},
		{"malformed claim", b.url, "$KV.x.y 0 zz", codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newJournalService()
			c := journalWorker(t, tool.Config{NATSURL: tt.nats, AnnounceInterval: time.Hour}, svc, 0)
			var tr metadata.MD
			_, err := c.Types(claimed(callCtx(t), tt.claim), &schematestv1.TypesRequest{S: "hello"}, grpc.Trailer(&tr))
			if status.Code(err) != tt.code {
				t.Fatalf("err = %v, want %v", err, tt.code)
			}
			if got := tr.Get(journal.NotStartedTrailer); len(got) != 1 || got[0] != journal.JournalUnavailable {
				t.Fatalf("%s = %v, want %s", journal.NotStartedTrailer, got, journal.JournalUnavailable)
			}
			if n := svc.calls.Load(); n != 0 {
				t.Fatalf("the tool ran %d times", n)
			}
		})
	}
	t.Cleanup(func() { // after the subtests; t.Context is over
		ctx, cancel := context.WithTimeout(context.Background(), journalWait)
		defer cancel()
		es, err := b.kv.History(ctx, "SchemaTest.x")
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		if k := kinds(t, es); k != "L" {
			t.Errorf("records %q, want the lock only", k)
		}
	})
}

// A call rejected as invalid never touches the journal.
func TestJournalInvalidInputNotRecorded(t *testing.T) {
	t.Parallel()
	b := startJournalBucket(t)
	svc := newJournalService()
	c := journalWorker(t, tool.Config{NATSURL: b.url}, svc, 0)
	claim := b.lock(t, "SchemaTest.invalid")
	var tr metadata.MD
	_, err := c.Constraints(claimed(callCtx(t), claim.String()), &schematestv1.ConstraintsRequest{}, grpc.Trailer(&tr))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err = %v, want InvalidArgument", err)
	}
	if k := kinds(t, b.history(t, "SchemaTest.invalid")); k != "L" || len(tr.Get(journal.FinishedTrailer)) != 0 || svc.calls.Load() != 0 {
		t.Fatalf("records %q, trailer %v, calls %d; want the lock only", k, tr, svc.calls.Load())
	}
}

func TestJournalHeartbeats(t *testing.T) {
	t.Parallel()
	b := startJournalBucket(t)
	svc := newJournalService()
	c := journalWorker(t, tool.Config{NATSURL: b.url}, svc, 5*time.Millisecond)
	claim := b.lock(t, "SchemaTest.long")
	watch, err := b.kv.Watch(t.Context(), "SchemaTest.long", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Stop() }()

	type result struct {
		tr  metadata.MD
		err error
	}
	done := make(chan result, 1)
	go func() {
		var tr metadata.MD
		_, err := c.Sleep(claimed(callCtx(t), claim.String()), &schematestv1.SleepRequest{Duration: durationpb.New(time.Hour)}, grpc.Trailer(&tr))
		done <- result{tr, err}
	}()
	// The start, then two heartbeats, each a new revision of S.
	timeout := time.After(journalWait)
	var revs []uint64
	for len(revs) < 3 {
		select {
		case e := <-watch.Updates():
			if e == nil {
				continue
			}
			if r, err := journal.Decode(e.Value()); err != nil || r.Kind != journal.KindStarted {
				t.Fatalf("record %q (%v) while the tool runs, want S", e.Value(), err)
			}
			revs = append(revs, e.Revision())
		case <-timeout:
			t.Fatalf("saw %d start records within %s, want a start and two heartbeats", len(revs), journalWait)
		}
	}
	close(svc.release)
	var res result
	select {
	case res = <-done:
	case <-time.After(journalWait):
		t.Fatal("the call did not return")
	}
	if res.err != nil {
		t.Fatalf("Sleep: %v", res.err)
	}
	es := b.history(t, "SchemaTest.long")
	last := es[len(es)-1]
	if got := res.tr.Get(journal.FinishedTrailer); len(got) != 1 || got[0] != strconv.FormatUint(last.Revision(), 10) {
		t.Fatalf("%s = %v, want [%d]", journal.FinishedTrailer, got, last.Revision())
	}
	if out := outcomeOf(t, last, claim); out.GetCode() != 0 || len(out.GetOutput()) == 0 {
		t.Fatalf("outcome = %v", out)
	}
}

// cancelSeen is a stats handler that closes seen when the server sees the
// caller cancel the (only) call.
type cancelSeen struct {
	seen chan struct{}
	once sync.Once
}

func (h *cancelSeen) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h *cancelSeen) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.Begin); ok {
		go func() {
			<-ctx.Done()
			h.once.Do(func() { close(h.seen) })
		}()
	}
}
func (h *cancelSeen) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (h *cancelSeen) HandleConn(context.Context, stats.ConnStats)                       {}

func TestJournalCallerCancelDoesNotCancelTool(t *testing.T) {
	t.Parallel()
	b := startJournalBucket(t)
	svc := newJournalService()
	seen := &cancelSeen{seen: make(chan struct{})}
	c := journalWorker(t, tool.Config{NATSURL: b.url, ServerOptions: []grpc.ServerOption{grpc.StatsHandler(seen)}}, svc, 0)
	claim := b.lock(t, "SchemaTest.cancel")

	ctx, cancel := context.WithCancel(claimed(callCtx(t), claim.String()))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Sleep(ctx, &schematestv1.SleepRequest{Duration: durationpb.New(time.Hour)})
		done <- err
	}()
	select {
	case <-svc.started:
	case <-time.After(journalWait):
		t.Fatal("the tool did not start")
	}
	cancel() // the gateway went away
	select {
	case err := <-done:
		if status.Code(err) != codes.Canceled {
			t.Fatalf("err = %v, want Canceled", err)
		}
	case <-time.After(journalWait):
		t.Fatal("the cancelled call did not return")
	}
	select {
	case <-seen.seen:
	case <-time.After(journalWait):
		t.Fatal("the server did not see the cancellation")
	}
	close(svc.release) // the tool finishes: its context was not cancelled

	deadline := time.After(journalWait)
	for {
		es := b.history(t, "SchemaTest.cancel")
		if last := es[len(es)-1]; last.Value()[0] == byte(journal.KindFinished) {
			out := outcomeOf(t, last, claim)
			var resp schematestv1.SleepResponse
			if err := proto.Unmarshal(out.GetOutput(), &resp); err != nil || out.GetCode() != 0 || !resp.GetSlept() {
				t.Fatalf("outcome %v (%v), want the tool's answer with its context alive", out, err)
			}
			return
		}
		select {
		case <-deadline:
			t.Fatalf("no finished record within %s: %q", journalWait, kinds(t, es))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestJournalRecordsErrors(t *testing.T) {
	t.Parallel()
	b := startJournalBucket(t)
	svc := newJournalService()
	c := journalWorker(t, tool.Config{NATSURL: b.url}, svc, 0)
	tests := []struct {
		name, key string
		call      func(ctx context.Context, opts ...grpc.CallOption) error
		message   string
		developer string
	}{
		{"tool error", "SchemaTest.fail", func(ctx context.Context, opts ...grpc.CallOption) error {
			_, err := c.Types(ctx, &schematestv1.TypesRequest{S: "fail"}, opts...)
			return err
		}, "cannot do that", "dev detail"},
		{"panic", "SchemaTest.panic", func(ctx context.Context, opts ...grpc.CallOption) error {
			_, err := c.Panic(ctx, &schematestv1.PanicRequest{Panic: true}, opts...)
			return err
		}, "the tool failed with an internal error", "panic: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			claim := b.lock(t, tt.key)
			var tr metadata.MD
			err := tt.call(claimed(callCtx(t), claim.String()), grpc.Trailer(&tr))
			te, ok := tool.AsToolError(err)
			if !ok || te.GetMessage() != tt.message || te.GetDeveloperMessage() != tt.developer {
				t.Fatalf("err = %v, want the execution error %q", err, tt.message)
			}
			es := b.history(t, tt.key)
			last := es[len(es)-1]
			if got := tr.Get(journal.FinishedTrailer); len(got) != 1 || got[0] != strconv.FormatUint(last.Revision(), 10) {
				t.Fatalf("%s = %v, want [%d]", journal.FinishedTrailer, got, last.Revision())
			}
			out := outcomeOf(t, last, claim)
			if codes.Code(out.GetCode()) != tool.ExecutionErrorCode || out.GetMessage() != tt.message || len(out.GetOutput()) != 0 || len(out.GetDetails()) != 1 {
				t.Fatalf("outcome = %v", out)
			}
			var recorded toolfleetv1.ToolError
			if err := out.GetDetails()[0].UnmarshalTo(&recorded); err != nil || !proto.Equal(&recorded, te) {
				t.Fatalf("recorded detail %v (%v), want %v", &recorded, err, te)
			}
		})
	}
}

func TestJournalUntouchedWithoutClaim(t *testing.T) {
	t.Parallel()
	b := startJournalBucket(t)
	svc := newJournalService()
	c := journalWorker(t, tool.Config{NATSURL: b.url}, svc, time.Millisecond)
	claim := b.lock(t, "SchemaTest.none")
	var tr metadata.MD
	if _, err := c.Types(metadata.AppendToOutgoingContext(callCtx(t), tool.CallIDKey, "call-1"), &schematestv1.TypesRequest{S: "hi"}, grpc.Trailer(&tr)); err != nil {
		t.Fatalf("Types: %v", err)
	}
	if _, err := c.Types(callCtx(t), &schematestv1.TypesRequest{S: "fail"}); err == nil {
		t.Fatal("no error")
	}
	if len(tr.Get(journal.FinishedTrailer)) != 0 || len(tr.Get(journal.NotStartedTrailer)) != 0 {
		t.Fatalf("journal trailers on a call without a claim: %v", tr)
	}
	es := b.history(t, "SchemaTest.none")
	if kinds(t, es) != "L" || es[0].Revision() != claim.Revision {
		t.Fatalf("records %q, want the lock only", kinds(t, es))
	}
	st, err := b.kv.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Values() != 1 {
		t.Fatalf("the bucket holds %d values, want the lock only", st.Values())
	}
}
