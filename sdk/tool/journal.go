package tool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
)

// The call journal, worker side (package sdk/tool/journal has the protocol).
//
// A gateway that keeps the journal sends a call with a claim
// (journal.ClaimKey). The worker then records the start (S) at the claim's
// revision before the tool runs, refusing the call without running it when
// the entry moved (journal.ClaimLost: a retry took the call over) or when
// NATS does not answer (journal.JournalUnavailable); rewrites S every
// heartbeat while the tool runs; and records the answer (F, or T when it is
// too large to keep) when it returns, whatever it is. The tool runs to its
// end even when the caller goes away: a gateway killed mid-call must not cut
// a side effect in half, and the answer it could not deliver is recorded for
// the retry. A call without a claim costs one metadata lookup.

// journalWriteTimeout bounds one write to the journal: the start (the tool
// waits for it), a heartbeat, the finish (the answer waits for it).
const journalWriteTimeout = 2 * time.Second

// journalPayloadSlack is what a journal message's subject and headers may
// need of NATS's largest message: a finish record larger than the rest is
// written as too large (T).
const journalPayloadSlack = 1 << 10

// journaler keeps the journal of a worker's claimed calls.
type journaler struct {
	log      *slog.Logger
	workerID string
	// heartbeat is how often a running call's S is rewritten
	// (journal.HeartbeatInterval; shorter in tests).
	heartbeat time.Duration

	// nc is the worker's NATS connection (the announcer's), set when Run
	// starts; nil before, and for a worker without NATS, which keeps no
	// journal (and does not announce call_journal).
	nc atomic.Pointer[nats.Conn]
	// probe is the token of this process's liveness subject
	// (journal.ProbeSubjectPrefix), named in every S it writes; "" while it
	// could not subscribe.
	probe atomic.Pointer[string]
	// versions maps a service's full name to its toolkit's version; set with nc.
	versions atomic.Pointer[map[string]string]

	// cutCtx is cancelled when the worker cuts the calls still running at its
	// shutdown bound: a claimed call's tool, which its caller cannot cancel,
	// is cancelled then like any other.
	cutCtx context.Context
	cut    context.CancelFunc
}

func newJournaler(log *slog.Logger, workerID string) *journaler {
	j := &journaler{log: log, workerID: workerID, heartbeat: journal.HeartbeatInterval}
	j.cutCtx, j.cut = context.WithCancel(context.Background())
	return j
}

// start gives the journaler the worker's NATS connection (nil: none) and
// toolkits. Calls arrive only after it.
func (j *journaler) start(nc *nats.Conn, tks []contract.Toolkit) {
	versions := make(map[string]string, len(tks))
	for _, t := range tks {
		versions[t.Service] = t.Version
	}
	j.versions.Store(&versions)
	if nc != nil {
		j.nc.Store(nc)
		// A retry of a call this process started asks here whether the
		// process still runs; "no responders" tells it at once that it died.
		var b [12]byte
		_, _ = rand.Read(b[:])
		token := hex.EncodeToString(b[:])
		if _, err := nc.Subscribe(journal.ProbeSubjectPrefix+token, func(m *nats.Msg) { _ = m.Respond(nil) }); err != nil {
			j.log.Warn("liveness probe not answered; retries of this worker's calls wait for its heartbeat to stop", "error", err)
		} else {
			j.probe.Store(&token)
		}
	}
}

// toolkitVersion is the version of the toolkit serving a gRPC method
// ("/pkg.Service/Method").
func (j *journaler) toolkitVersion(fullMethod string) string {
	vs := j.versions.Load()
	if vs == nil {
		return ""
	}
	svc, _, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	return (*vs)[svc]
}

// interceptor journals the calls that come with a claim. It runs after
// input validation (an invalid call never touches the journal) and around
// the tool, recovering a panic into the outcome it records.
func (j *journaler) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		claims := metadata.ValueFromIncomingContext(ctx, journal.ClaimKey)
		if len(claims) == 0 {
			return handler(ctx, req)
		}
		return j.call(ctx, claims, req, info, handler)
	}
}

func (j *journaler) call(ctx context.Context, claims []string, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	log := j.log.With("method", info.FullMethod, "call_id", CallID(ctx))
	var c journal.Claim
	err := journal.ErrBadClaim // more than one claim
	if len(claims) == 1 {
		c, err = journal.ParseClaim(claims[0])
	}
	if err != nil {
		// The gateway's bug. The call did not run; Internal, not a retryable
		// code: every replica would refuse it the same way.
		log.ErrorContext(ctx, "refused a call with a malformed claim; the tool did not run", "claim", claims, "error", err)
		setNotStarted(ctx, journal.JournalUnavailable)
		return nil, status.Errorf(codes.Internal, "the gateway sent a malformed %s; the tool did not run", journal.ClaimKey)
	}
	nc := j.nc.Load()
	if nc == nil || !nc.IsConnected() {
		// A request now would wait for a reconnect, and a start buffered past
		// the refusal would be recorded for a call that did not run.
		log.WarnContext(ctx, "refused a claimed call: no NATS connection for the call journal; the tool did not run", "nats", nc != nil)
		setNotStarted(ctx, journal.JournalUnavailable)
		return nil, status.Error(codes.Unavailable, "the call journal is unavailable (no NATS connection); the tool did not run")
	}
	rec := &journalCall{j: j, nc: nc, log: log, claim: c, version: j.toolkitVersion(info.FullMethod)}
	// Not cancelled with the caller: once the start is recorded, the tool runs.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalWriteTimeout)
	rec.rev, err = journal.Write(wctx, nc, c.Subject, rec.started(), c.Revision)
	cancel()
	switch {
	case errors.Is(err, journal.ErrMoved):
		log.InfoContext(ctx, "refused a claimed call taken over by a retry or withdrawn by its gateway; the tool did not run",
			"subject", c.Subject, "revision", c.Revision)
		setNotStarted(ctx, journal.ClaimLost)
		return nil, status.Error(codes.Unavailable, "this call was taken over by a retry or withdrawn by its gateway; it did not run here")
	case err != nil:
		log.WarnContext(ctx, "refused a claimed call: its start could not be recorded; the tool did not run", "subject", c.Subject, "error", err)
		setNotStarted(ctx, journal.JournalUnavailable)
		return nil, status.Error(codes.Unavailable, "the call journal is unavailable (NATS did not answer); the tool did not run")
	}

	rec.startHeartbeat()
	runCtx, release := j.detach(ctx)
	resp, err := callRecovering(runCtx, j.log, req, info, handler)
	err = toStatusError(runCtx, err) // as the caller will get it
	release()
	if rev, ok := rec.finish(ctx, resp, err); ok {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(journal.FinishedTrailer, strconv.FormatUint(rev, 10)))
	}
	return resp, err
}

// detach returns the context a claimed call's tool runs in: ctx's values and
// deadline, not its cancellation (the caller going away), but cancelled when
// the worker cuts its calls at its shutdown bound.
func (j *journaler) detach(ctx context.Context) (context.Context, context.CancelFunc) {
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		var cancelRun context.CancelFunc
		run, cancelRun = context.WithDeadline(run, dl)
		inner := cancel
		cancel = func() { cancelRun(); inner() }
	}
	stop := context.AfterFunc(j.cutCtx, cancel)
	return run, func() { stop(); cancel() }
}

func setNotStarted(ctx context.Context, why string) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(journal.NotStartedTrailer, why)) // fails only when the stream is gone
}

// journalCall is the journal of one claimed call. Its heartbeats and its
// finish are serialized by mu, each expecting the revision the last left.
type journalCall struct {
	j       *journaler
	nc      *nats.Conn
	log     *slog.Logger
	claim   journal.Claim
	version string

	mu    sync.Mutex
	rev   uint64      // the entry's revision after our last write
	over  bool        // finished, or the entry moved under a heartbeat
	timer *time.Timer // the next heartbeat
}

func (c *journalCall) started() []byte {
	token := ""
	if p := c.j.probe.Load(); p != nil {
		token = *p
	}
	return journal.Encode(journal.KindStarted, c.claim.Digest, journal.StartedPayload(c.j.workerID, token))
}

// write stores value expecting the current revision; mu is held.
func (c *journalCall) write(value []byte) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), journalWriteTimeout)
	defer cancel()
	return journal.Write(ctx, c.nc, c.claim.Subject, value, c.rev)
}

// startHeartbeat rewrites S every heartbeat until finish; a call shorter than
// one heartbeat costs a timer.
func (c *journalCall) startHeartbeat() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer = time.AfterFunc(c.j.heartbeat, c.beat)
}

func (c *journalCall) beat() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return
	}
	rev, err := c.write(c.started())
	switch {
	case err == nil:
		c.rev = rev
	case errors.Is(err, journal.ErrMoved):
		// A retry saw no heartbeat for too long and declared the outcome
		// unknown: the finish would fail the same way.
		c.over = true
		c.log.Warn("the call's journal entry moved while the tool ran (its outcome was declared unknown); heartbeats stop, its answer will not be recorded",
			"subject", c.claim.Subject, "error", err)
		return
	default:
		c.log.Warn("call journal heartbeat not recorded", "subject", c.claim.Subject, "error", err)
	}
	c.timer.Reset(c.j.heartbeat)
}

// finish stops the heartbeats and records the call's answer: resp, or err as
// the status the caller gets. It returns the F (or T) record's revision, or
// false when nothing was recorded (logged: the caller still gets the answer,
// and its gateway records it itself).
func (c *journalCall) finish(ctx context.Context, resp any, err error) (uint64, bool) {
	out := &toolfleetv1.WorkerCallOutcome{ToolkitVersion: c.version, WorkerId: c.j.workerID}
	if cl, ok := ctx.Value(callerLogKey{}).(*callerLog); ok {
		out.Logs = cl.logs()
	}
	if err == nil {
		m, ok := resp.(proto.Message)
		b, merr := proto.Marshal(m)
		if !ok || merr != nil { // gRPC cannot send it either
			err = status.Errorf(codes.Internal, "the tool's response cannot be encoded: %v", merr)
		} else {
			out.Output = b
		}
	}
	if err != nil {
		st := status.Convert(err).Proto()
		out.Code, out.Message, out.Details = st.GetCode(), st.GetMessage(), st.GetDetails()
	}
	value := journal.Encode(journal.KindTooLarge, c.claim.Digest, nil)
	if b, merr := proto.Marshal(out); merr == nil {
		value = journal.Encode(journal.KindFinished, c.claim.Digest, b)
	} else {
		c.log.Warn("call outcome cannot be encoded; recorded as too large", "error", merr)
	}
	if limit := c.nc.MaxPayload() - journalPayloadSlack; limit > 0 && int64(len(value)) > limit {
		value = journal.Encode(journal.KindTooLarge, c.claim.Digest, nil)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.over {
		return 0, false // the entry moved under a heartbeat (logged then)
	}
	c.over = true
	rev, werr := c.write(value)
	if errors.Is(werr, journal.ErrTooLarge) && journal.Kind(value[0]) != journal.KindTooLarge {
		rev, werr = c.write(journal.Encode(journal.KindTooLarge, c.claim.Digest, nil))
	}
	if werr != nil {
		c.log.Warn("call outcome not recorded in the journal; the caller still gets it", "subject", c.claim.Subject, "error", werr)
		return 0, false
	}
	return rev, true
}
