package pythonworker_test

import (
	"context"
	"crypto/sha256"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
)

// journalBucket is the gateway's idempotency bucket, made as
// services/gateway/idempotency creates it: one value per key, per-message TTLs.
const journalBucket = "toolfleet_calls"

// journalWorld is embedded NATS with the journal's bucket, a connection that
// records every record kind published on the bucket's subjects (in order),
// and a Python worker that announced callJournal.
type journalWorld struct {
	nc     *nats.Conn
	kv     jetstream.KeyValue
	w      *pyWorker
	client calculatorv1.CalculatorServiceClient

	mu    sync.Mutex
	kinds map[string][]string // subject -> kinds of the values published on it
}

// startJournalWorld starts it all; args start the worker (nil: calculator.py).
func startJournalWorld(t *testing.T, args ...string) *journalWorld {
	t.Helper()
	py := python(t)
	url := natstest.Start(t).URL()
	return startJournalWorldOn(t, py, url, url, args...)
}

// startJournalWorldOn is startJournalWorld on a running server: the test
// connects to url, the worker to workerURL.
func startJournalWorldOn(t *testing.T, py, url, workerURL string, args ...string) *journalWorld {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{
		Bucket: journalBucket, History: 1, TTL: time.Hour, MaxValueSize: 1 << 20, LimitMarkerTTL: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	jw := &journalWorld{nc: nc, kv: kv, kinds: map[string][]string{}}
	// Only the bucket's subjects: a subscriber on another would answer for a bucket that is missing.
	if _, err := nc.Subscribe("$KV."+journalBucket+".>", func(m *nats.Msg) {
		if len(m.Data) > 0 {
			jw.mu.Lock()
			jw.kinds[m.Subject] = append(jw.kinds[m.Subject], string(m.Data[:1]))
			jw.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	announced := make(chan *nats.Msg, 64)
	if _, err := nc.ChanSubscribe(tool.AnnounceSubject, announced); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(args) == 0 {
		jw.w = startPython(t, py, workerURL, "--announce-interval", "60", "--worker-id", "python-j")
	} else {
		jw.w = startPythonArgs(t, py, append(args, "--listen", "127.0.0.1:0", "--nats", workerURL, "--announce-interval", "60", "--worker-id", "python-j")...)
	}
	// The announcement says the worker keeps the journal (and that it is on NATS).
	select {
	case m := <-announced:
		var ann toolfleetv1.WorkerAnnouncement
		if err := protojson.Unmarshal(m.Data, &ann); err != nil {
			t.Fatalf("announcement %s: %v", m.Data, err)
		}
		if !ann.GetCallJournal() {
			t.Fatalf("the worker's announcement %s does not say callJournal: true", m.Data)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not announce itself")
	}
	cc, err := grpc.NewClient(jw.w.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	jw.client = calculatorv1.NewCalculatorServiceClient(cc)
	return jw
}

// lock writes a gateway's L record on a new key and returns the claim a
// gateway would send with the call.
func (jw *journalWorld) lock(t *testing.T, key string) journal.Claim {
	t.Helper()
	d := journal.Digest(sha256.Sum256([]byte(key)))
	subject := "$KV." + journalBucket + "." + key
	rev, err := journal.Write(t.Context(), jw.nc, subject, journal.Encode(journal.KindLock, d, []byte{0}), 0)
	if err != nil {
		t.Fatal(err)
	}
	return journal.Claim{Subject: subject, Revision: rev, Digest: d}
}

func (jw *journalWorld) published(subject string) string {
	_ = jw.nc.Flush()
	jw.mu.Lock()
	defer jw.mu.Unlock()
	return strings.Join(jw.kinds[subject], "")
}

// publishedBy returns the records published on subject once done says they
// are all there: the worker writes on its own connection, so a record it had
// acknowledged may reach this one a moment later.
func (jw *journalWorld) publishedBy(t *testing.T, subject string, done func(string) bool) string {
	t.Helper()
	waitFor(t, "the worker's records on "+subject, 5*time.Second, func() bool { return done(jw.published(subject)) })
	return jw.published(subject)
}

func atLeast(n int) func(string) bool { return func(s string) bool { return len(s) >= n } }

func claimed(ctx context.Context, c journal.Claim) context.Context {
	return metadata.AppendToOutgoingContext(ctx, journal.ClaimKey, c.String())
}

// finished reads the entry of c: it must be an F record of c's digest at
// revision rev, and returns its outcome.
func (jw *journalWorld) finished(t *testing.T, c journal.Claim, rev uint64) *toolfleetv1.WorkerCallOutcome {
	t.Helper()
	e, err := jw.kv.Get(t.Context(), strings.TrimPrefix(c.Subject, "$KV."+journalBucket+"."))
	if err != nil {
		t.Fatal(err)
	}
	r, err := journal.Decode(e.Value())
	if err != nil || r.Kind != journal.KindFinished || r.Digest != c.Digest || e.Revision() != rev {
		t.Fatalf("entry at revision %d: %q (%v); want an F record of the claim's digest at revision %d", e.Revision(), e.Value(), err, rev)
	}
	var o toolfleetv1.WorkerCallOutcome
	if err := proto.Unmarshal(r.Payload, &o); err != nil {
		t.Fatal(err)
	}
	return &o
}

func trailerRev(t *testing.T, tr metadata.MD) uint64 {
	t.Helper()
	v := tr.Get(journal.FinishedTrailer)
	if len(v) != 1 {
		t.Fatalf("trailer %v: want one %s", tr, journal.FinishedTrailer)
	}
	n, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPythonWorkerCallJournal: the Python worker keeps the call journal as
// sdk/tool/journal describes it. A claimed call is recorded as started (S)
// before the tool runs and as finished (F, with its answer) after, and the F
// record's revision comes back in a trailer; a claim whose entry moved on is
// refused without running (claim-lost), and so is one whose journal cannot be
// written (journal-unavailable).
func TestPythonWorkerCallJournal(t *testing.T) {
	jw := startJournalWorld(t)

	t.Run("S then F", func(t *testing.T) {
		c := jw.lock(t, "Calculator.add-1")
		var tr metadata.MD
		resp, err := jw.client.Add(claimed(t.Context(), c), &calculatorv1.AddRequest{A: 2, B: 3.5}, grpc.Trailer(&tr))
		if err != nil || resp.GetResult() != 5.5 {
			t.Fatalf("Add(2, 3.5) = %v, %v; want 5.5", resp, err)
		}
		rev := trailerRev(t, tr)
		if rev != c.Revision+2 {
			t.Errorf("F at revision %d; want %d (the lock's + S + F)", rev, c.Revision+2)
		}
		if got := jw.publishedBy(t, c.Subject, atLeast(3)); got != "LSF" {
			t.Errorf("records published on the entry: %q; want LSF", got)
		}
		o := jw.finished(t, c, rev)
		var out calculatorv1.AddResponse
		if err := proto.Unmarshal(o.GetOutput(), &out); err != nil || out.GetResult() != 5.5 {
			t.Errorf("outcome's output: %v, %v; want result 5.5", &out, err)
		}
		if o.GetCode() != 0 || o.GetToolkitVersion() != "1.0.0" || o.GetWorkerId() != "python-j" {
			t.Errorf("outcome %v; want code 0, toolkit_version 1.0.0, worker_id python-j", o)
		}
	})

	t.Run("a tool error and its logs are recorded", func(t *testing.T) {
		c := jw.lock(t, "Calculator.div-1")
		var tr metadata.MD
		_, err := jw.client.Divide(claimed(t.Context(), c), &calculatorv1.DivideRequest{A: 1, B: 0}, grpc.Trailer(&tr))
		if status.Code(err) != codes.Unknown {
			t.Fatalf("Divide(1, 0): %v; want the tool error (Unknown)", err)
		}
		o := jw.finished(t, c, trailerRev(t, tr))
		if o.GetCode() != int32(codes.Unknown) || o.GetMessage() != "cannot divide by zero" || len(o.GetOutput()) != 0 {
			t.Fatalf("outcome %v; want code Unknown, the message, no output", o)
		}
		var te toolfleetv1.ToolError
		if len(o.GetDetails()) != 1 || o.GetDetails()[0].UnmarshalTo(&te) != nil || te.GetMessage() != "cannot divide by zero" ||
			!strings.Contains(te.GetAdditionalPromptContent(), "non-zero divisor") {
			t.Errorf("outcome's details %v; want the ToolError", o.GetDetails())
		}

		c = jw.lock(t, "Calculator.eval-1")
		tr = nil
		if _, err := jw.client.Evaluate(claimed(t.Context(), c), &calculatorv1.EvaluateRequest{Expression: "1 + 1"}, grpc.Trailer(&tr)); err != nil {
			t.Fatal(err)
		}
		o = jw.finished(t, c, trailerRev(t, tr))
		if l := o.GetLogs().GetLines(); len(l) != 1 || l[0].GetMessage() != "evaluated 5 characters" {
			t.Errorf("outcome's logs %v; want the line Evaluate logged", o.GetLogs())
		}
	})

	t.Run("stale revision: claim lost, not run", func(t *testing.T) {
		c := jw.lock(t, "Calculator.add-2")
		// A retry took the call over: the entry moved past the claim's revision.
		moved, err := journal.Write(t.Context(), jw.nc, c.Subject, journal.Encode(journal.KindLock, c.Digest, []byte{0}), c.Revision)
		if err != nil {
			t.Fatal(err)
		}
		var tr metadata.MD
		_, err = jw.client.Add(claimed(t.Context(), c), &calculatorv1.AddRequest{A: 1, B: 2}, grpc.Trailer(&tr))
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "did not run here") {
			t.Errorf("Add with a stale claim: %v; want Unavailable, did not run here", err)
		}
		if got := tr.Get(journal.NotStartedTrailer); len(got) != 1 || got[0] != journal.ClaimLost {
			t.Errorf("trailer %v; want %s: %s", tr, journal.NotStartedTrailer, journal.ClaimLost)
		}
		if len(tr.Get(journal.FinishedTrailer)) != 0 {
			t.Errorf("trailer %v has %s: the call was recorded as finished", tr, journal.FinishedTrailer)
		}
		// The worker tried S once, was refused, and wrote nothing else: no F.
		// Its S comes on its own connection: give the delivery a moment.
		if got := jw.publishedBy(t, c.Subject, atLeast(3)); got != "LLS" {
			t.Errorf("records published on the entry: %q; want LLS (the refused S last)", got)
		}
		e, err := jw.kv.Get(t.Context(), strings.TrimPrefix(c.Subject, "$KV."+journalBucket+"."))
		if err != nil || e.Revision() != moved || e.Value()[0] != byte(journal.KindLock) {
			t.Errorf("entry %v, %v; want the retry's lock at revision %d", e, err, moved)
		}
	})

	t.Run("no bucket: journal unavailable, not run", func(t *testing.T) {
		c := jw.lock(t, "Calculator.add-3")
		c.Subject = "$KV.no_such_bucket.Calculator.add-3"
		var tr metadata.MD
		began := time.Now()
		_, err := jw.client.Add(claimed(t.Context(), c), &calculatorv1.AddRequest{A: 1, B: 2}, grpc.Trailer(&tr))
		if status.Code(err) != codes.Unavailable {
			t.Errorf("Add with a claim on a missing bucket: %v; want Unavailable", err)
		}
		if got := tr.Get(journal.NotStartedTrailer); len(got) != 1 || got[0] != journal.JournalUnavailable {
			t.Errorf("trailer %v; want %s: %s", tr, journal.NotStartedTrailer, journal.JournalUnavailable)
		}
		// NATS says at once that nobody listens (no responders): no wait for a timeout.
		if d := time.Since(began); d > time.Second {
			t.Errorf("the refusal took %v; want no timeout's wait", d)
		}
	})

	t.Run("no claim: no journal", func(t *testing.T) {
		var tr metadata.MD
		resp, err := jw.client.Add(t.Context(), &calculatorv1.AddRequest{A: 1, B: 2}, grpc.Trailer(&tr))
		if err != nil || resp.GetResult() != 3 || len(tr.Get(journal.FinishedTrailer)) != 0 {
			t.Errorf("Add without a claim: %v, %v, trailer %v; want 3 and no journal trailer", resp, err, tr)
		}
	})
}

// slowAdd is a worker whose Calculator.Add takes 4.5 s, long enough for two
// heartbeats of its started record, and that keeps finished records of at most
// 200 bytes: Add's fits, Divide's tool error (its prompt hint) does not.
const slowAdd = `
import sys, time
sys.argv[0] = "calculator.py"
import calculator, toolfleet_worker
toolfleet_worker.JOURNAL_MAX_VALUE = 200
add = calculator.Calculator.Add
def slow(self, req, call):
    time.sleep(4.5)
    return add(self, req, call)
calculator.Calculator.Add = slow
calculator.main()
`

// TestPythonWorkerCallJournalHeartbeat: while a claimed tool runs, the worker
// rewrites its S record every journal.HeartbeatInterval, each expecting the
// revision of the one before, then writes F after the last. An outcome too
// large to keep is recorded as T.
func TestPythonWorkerCallJournalHeartbeat(t *testing.T) {
	jw := startJournalWorld(t, "-c", slowAdd)
	c := jw.lock(t, "Calculator.slow-1")
	var tr metadata.MD
	resp, err := jw.client.Add(claimed(t.Context(), c), &calculatorv1.AddRequest{A: 1, B: 2}, grpc.Trailer(&tr))
	if err != nil || resp.GetResult() != 3 {
		t.Fatalf("Add = %v, %v; want 3", resp, err)
	}
	got := jw.publishedBy(t, c.Subject, func(s string) bool { return strings.HasSuffix(s, "F") })
	rev := trailerRev(t, tr)
	// 4.5 s: a start and two heartbeats (a third only on a machine slower than 0.5 s a write).
	if !regexp.MustCompile(`^LSSSS?F$`).MatchString(got) || rev != c.Revision+uint64(len(got)-1) {
		t.Errorf("records published %q, F at revision %d; want LSSSF (a start, two heartbeats, the finish) at %d",
			got, rev, c.Revision+uint64(len(got)-1))
	}
	jw.finished(t, c, rev)

	t.Run("too large", func(t *testing.T) {
		c := jw.lock(t, "Calculator.div-large")
		var tr metadata.MD
		if _, err := jw.client.Divide(claimed(t.Context(), c), &calculatorv1.DivideRequest{A: 1, B: 0}, grpc.Trailer(&tr)); status.Code(err) != codes.Unknown {
			t.Fatalf("Divide(1, 0): %v; want the tool error", err)
		}
		rev := trailerRev(t, tr)
		e, err := jw.kv.Get(t.Context(), "Calculator.div-large")
		if err != nil {
			t.Fatal(err)
		}
		r, err := journal.Decode(e.Value())
		if err != nil || r.Kind != journal.KindTooLarge || r.Digest != c.Digest || len(r.Payload) != 0 || e.Revision() != rev {
			t.Errorf("entry at revision %d: %q (%v); want a T record of the claim's digest at revision %d", e.Revision(), e.Value(), err, rev)
		}
		if got := jw.publishedBy(t, c.Subject, atLeast(3)); got != "LST" {
			t.Errorf("records published on the entry: %q; want LST", got)
		}
	})
}

// TestPythonWorkerCallJournalWithoutPermission: a worker whose NATS user may
// announce but not write the journal refuses a claimed call as
// journal-unavailable, at once (NATS's permissions violation), not after the
// acknowledgement's timeout.
func TestPythonWorkerCallJournalWithoutPermission(t *testing.T) {
	py := python(t)
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir(), Configure: func(o *server.Options) {
		natstest.RoomyStore(o)
		o.Users = []*server.User{
			{Username: "gateway", Password: "g"},
			{Username: "worker", Password: "w", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{tool.AnnounceSubject}},
				Subscribe: &server.SubjectPermission{Allow: []string{"toolfleet.registry.discover", "_INBOX.>"}},
			}},
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	hostPort := strings.TrimPrefix(srv.URL(), "nats://")
	jw := startJournalWorldOn(t, py, "nats://gateway:g@"+hostPort, "nats://worker:w@"+hostPort)
	c := jw.lock(t, "Calculator.add-denied")
	var tr metadata.MD
	began := time.Now()
	_, err = jw.client.Add(claimed(t.Context(), c), &calculatorv1.AddRequest{A: 1, B: 2}, grpc.Trailer(&tr))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Add with a claim the worker may not write: %v; want Unavailable", err)
	}
	if got := tr.Get(journal.NotStartedTrailer); len(got) != 1 || got[0] != journal.JournalUnavailable {
		t.Errorf("trailer %v; want %s: %s", tr, journal.NotStartedTrailer, journal.JournalUnavailable)
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("the refusal took %v; want no timeout's wait", d)
	}
	// The worker's output reaches the test through a pipe: wait for the line.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(jw.w.out.String(), "Permissions Violation for Publish"); {
		if time.Now().After(deadline) {
			t.Errorf("the worker did not log the violation:\n%s", jw.w.out.String())
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}
