package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// Defaults of [Config].
const (
	DefaultBucket = "toolfleet_calls"
	DefaultTTL    = 24 * time.Hour
	// DefaultMaxBytes bounds the whole bucket.
	DefaultMaxBytes = 256 << 20
	// DefaultMaxValueSize bounds one stored response; it is NATS's default
	// max_payload, the largest message a default server accepts anyway.
	DefaultMaxValueSize = 1 << 20
)

// Errors of [Store.Acquire]; match them with errors.Is.
var (
	// ErrConflict: the key was used with another input.
	ErrConflict = errors.New("idempotency: call_id already used with another input")
	// ErrUnavailable: NATS could not answer; the call is not protected.
	ErrUnavailable = errors.New("idempotency: store unavailable")
	// ErrResultTooLarge: the call finished but its response was over the value
	// limit, so it was not kept; running it again would not be a repeat.
	ErrResultTooLarge = errors.New("idempotency: the finished call's response was too large to keep")
	// ErrOutcomeUnknown: an earlier call with this key may have run on a worker
	// that never answered (see [Store.FinishUnknown]); running it again could
	// repeat its side effect.
	ErrOutcomeUnknown = errors.New("idempotency: the earlier call's outcome is unknown")
	// ErrStillRunning: the caller's context ended while another replica was still
	// running the call.
	ErrStillRunning = errors.New("idempotency: the earlier call with this call_id is still running")
)

// Config configures a [Store].
type Config struct {
	// Bucket names the KV bucket. Default [DefaultBucket].
	Bucket string
	// TTL is how long finished responses are kept. Default [DefaultTTL].
	TTL time.Duration
	// MemoryStorage keeps the bucket in memory. Default on disk: a NATS restart
	// must not forget finished calls, or the retry of a non-idempotent call
	// would run it again.
	MemoryStorage bool
	// Replicas of the bucket. Default 1.
	Replicas int
	// MaxBytes bounds the bucket; when full the oldest entries are dropped.
	// Default [DefaultMaxBytes].
	MaxBytes int64
	// MaxValueSize bounds one stored response; a larger one is replaced by a
	// tombstone. Default [DefaultMaxValueSize].
	MaxValueSize int32
}

func (c *Config) defaults() {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxValueSize <= 0 {
		c.MaxValueSize = DefaultMaxValueSize
	}
}

// Store is the idempotency store of a gateway. A nil *Store is valid and answers
// every Acquire with ErrUnavailable.
type Store struct {
	log *slog.Logger
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config
	kv  jetstream.KeyValue
	kvc jetstream.KeyValueConfig
	// lastRecreate rate-limits re-creating a bucket NATS lost (unix nanos).
	lastRecreate atomic.Int64
}

// lockMargin keeps a lock a little longer than the call it guards may run.
const lockMargin = 10 * time.Second

// New creates (or updates) the bucket and returns the store.
func New(ctx context.Context, log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg.defaults()
	storage := jetstream.FileStorage
	if cfg.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	s := &Store{log: log, nc: nc, js: js, cfg: cfg, kvc: jetstream.KeyValueConfig{
		Bucket:         cfg.Bucket,
		Description:    "toolfleet gateway: finished calls by (principal, tool, call_id)",
		TTL:            cfg.TTL,
		History:        1,
		Storage:        storage,
		Replicas:       max(cfg.Replicas, 1),
		MaxBytes:       cfg.MaxBytes,
		MaxValueSize:   cfg.MaxValueSize,
		LimitMarkerTTL: time.Minute,
	}}
	kv, err := s.create(ctx)
	if err != nil {
		return nil, err
	}
	s.kv = kv
	return s, nil
}

// create makes the bucket, then lets it drop its oldest entries when full: a KV
// bucket refuses new writes when full, which would stop every protected call
// until entries expire. The handle it returns stays valid when the bucket is
// made again (recreate), so the store keeps its first one.
func (s *Store) create(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := jsassets.EnsureKeyValue(ctx, s.js, s.kvc)
	if err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	stream, err := s.js.Stream(ctx, "KV_"+s.cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("idempotency: bucket %s: %w", s.cfg.Bucket, err)
	}
	if sc := stream.CachedInfo().Config; sc.Discard != jetstream.DiscardOld {
		sc.Discard = jetstream.DiscardOld
		if _, err := s.js.UpdateStream(ctx, sc); err != nil {
			return nil, fmt.Errorf("idempotency: bucket %s: drop oldest when full: %w", s.cfg.Bucket, err)
		}
	}
	return kv, nil
}

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }

// Claim is the outcome of [Store.Acquire].
type Claim struct {
	// Stored is the finished call's response: return it without running the tool.
	Stored *toolfleetv1.CallToolResponse
	owned  bool
	key    string
	digest Digest
}

// Owned reports whether this claim holds the lock: the call runs under its
// key, and its outcome is recorded for repeats.
func (c Claim) Owned() bool { return c.owned }

// Acquire takes the lock for key, or returns the stored response of a finished
// call with the same input. A call in flight elsewhere is waited for (within
// lockTTL plus a margin and ctx). Errors: [ErrConflict], [ErrUnavailable],
// [ErrResultTooLarge], [ErrStillRunning], or ctx's error.
func (s *Store) Acquire(ctx context.Context, key Key, digest Digest, lockTTL time.Duration) (Claim, error) {
	if s == nil || !s.nc.IsConnected() {
		// Requests would wait for a reconnect; the call must not.
		return Claim{}, ErrUnavailable
	}
	k := key.subject()
	lock := encode(kindLock, digest, nil)
	for {
		err := s.createLock(ctx, k, lock, lockTTL+lockMargin)
		if err == nil {
			return Claim{owned: true, key: k, digest: digest}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			if s.recreate(ctx, err) {
				continue
			}
			return Claim{}, s.unavailable(ctx, err)
		}
		entry, err := s.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
			continue // released in between: try again
		case err != nil:
			return Claim{}, s.unavailable(ctx, err)
		}
		c, done, err := s.settle(entry.Value(), digest)
		if done || err != nil {
			return c, err
		}
		c, done, err = s.wait(ctx, k, digest, lockTTL+lockMargin)
		if done || err != nil {
			return c, err
		}
		// The holder let go without a result (a retryable failure): run it here.
	}
}

// settle decides on an entry found under the key: done with a stored response
// or an error (another input is a conflict), or not done (a lock: wait for it).
func (s *Store) settle(value []byte, digest Digest) (Claim, bool, error) {
	r, err := decode(value)
	if err != nil {
		return Claim{}, true, err
	}
	if r.kind == kindLock {
		// In flight, whatever its input: the holder may still let go without a
		// result (a validation error, a retryable failure), and then this call
		// runs; a result it stores for another input is a conflict then.
		return Claim{}, false, nil
	}
	if r.hasDigest && r.digest != digest {
		return Claim{}, true, ErrConflict
	}
	if r.kind == kindTooLarge {
		return Claim{}, true, ErrResultTooLarge
	}
	if r.kind == kindUnknown {
		return Claim{}, true, ErrOutcomeUnknown
	}
	return Claim{Stored: r.resp}, true, nil
}

// createLock takes the lock for key in one request/reply: the very message
// kv.Create sends first (the value expecting no earlier revision of the key, with
// a per-key TTL), minus kv.Create's per-call regexp key check, option closures,
// context wrapping and JSON decoding of the ack, which together cost about as
// much CPU as the rest of the request on the gateway's side. Any reply but a
// plain success ack (the key exists or was deleted, no stream answered, an API
// error) goes through kv.Create, which handles it exactly as before; request
// errors (a timeout, a cancelled call) are returned as kv.Create returns them.
func (s *Store) createLock(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	msg := &nats.Msg{Subject: "$KV." + s.cfg.Bucket + "." + key, Data: value, Header: nats.Header{
		jetstream.ExpectedLastSubjSeqHeader: expectNoRevision,
		jetstream.MsgTTLHeader:              []string{ttl.String()},
	}}
	if _, ok := ctx.Deadline(); !ok {
		// kv.Create bounds a request without a deadline the same way (5 s).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	reply, err := s.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case err == nil && isPlainPubAck(reply.Data):
		return nil
	case err != nil && !errors.Is(err, nats.ErrNoResponders):
		return err
	}
	_, err = s.kv.Create(ctx, key, value, jetstream.KeyTTL(ttl))
	return err
}

// expectNoRevision is the Nats-Expected-Last-Subject-Sequence of a create (read-only).
var expectNoRevision = []string{"0"}

// isPlainPubAck reports a JetStream success ack ({"stream":"…",…,"seq":N}); error
// replies start with {"error".
func isPlainPubAck(b []byte) bool {
	return bytes.HasPrefix(b, []byte(`{"stream":"`)) && !bytes.Contains(b, []byte(`"error"`))
}

// wait watches key until the holder stores a result or lets go, or until the
// holder's lock must have expired (then the caller tries to take it).
func (s *Store) wait(ctx context.Context, key string, digest Digest, bound time.Duration) (Claim, bool, error) {
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	w, err := s.kv.Watch(wctx, key)
	if err != nil {
		return Claim{}, true, s.unavailable(ctx, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() == nil {
				return Claim{}, false, nil // the holder's lock expired: try to take it
			}
			return Claim{}, true, fmt.Errorf("%w: %w", ErrStillRunning, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return Claim{}, false, nil
			}
			if e == nil {
				continue // end of the initial values
			}
			if e.Operation() != jetstream.KeyValuePut {
				return Claim{}, false, nil
			}
			if c, done, err := s.settle(e.Value(), digest); done || err != nil {
				return c, true, err
			}
		}
	}
}

// recreate makes the bucket again when NATS lost it (a restart with memory storage
// or a new store), at most every few seconds; it reports whether to try again.
func (s *Store) recreate(ctx context.Context, err error) bool {
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return false
	}
	now := time.Now().UnixNano()
	last := s.lastRecreate.Load()
	if now-last < int64(5*time.Second) || !s.lastRecreate.CompareAndSwap(last, now) {
		return false
	}
	if _, cerr := s.create(ctx); cerr != nil {
		s.log.Warn("idempotency bucket lost and not re-created", "bucket", s.cfg.Bucket, "error", cerr)
		return false
	}
	s.log.Info("idempotency bucket re-created after NATS lost it", "bucket", s.cfg.Bucket)
	return true
}

// unavailable wraps err as ErrUnavailable, or returns ctx's error when the
// caller's context ended (that is the caller's doing, not the store's).
func (s *Store) unavailable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// FinishUnknown records that the claimed call may have run without an answer
// (its worker went away mid-call): a repeat gets [ErrOutcomeUnknown] instead
// of a second run, until the entry expires with the bucket's TTL. The record
// is acknowledged by JetStream before FinishUnknown returns (within
// [durableWait]), so it survives a NATS restart that follows.
func (s *Store) FinishUnknown(c Claim) {
	if s == nil || !c.owned || !s.nc.IsConnected() {
		return // the lock left behind holds repeats off until it expires
	}
	if err := s.put(c.key, encode(kindUnknown, c.digest, nil), true); err != nil {
		s.log.Warn("unknown outcome not recorded; the lock holds repeats off until it expires", "error", err)
	}
}

// Finish stores resp under the claim or, when keep is false, lets the lock go
// so that a retry runs the call again. A claim that owns nothing is a no-op.
//
// With durable set, Finish returns once JetStream has acknowledged the stored
// response (within [durableWait]): the caller gets its answer only when a
// repeat of the call_id, even after a NATS restart, would be answered from
// the store. The gateway asks for it for calls with side effects; a read-only
// or idempotent call's response is published without waiting (a repeat that
// misses it runs the tool again, harmlessly), and waiters see it as soon as
// it lands either way.
func (s *Store) Finish(c Claim, resp *toolfleetv1.CallToolResponse, keep, durable bool) {
	if s == nil || !c.owned || !s.nc.IsConnected() {
		return // a lock left behind expires with its TTL
	}
	subject := "$KV." + s.cfg.Bucket + "." + c.key
	if !keep {
		// A delete marker lets waiters run the call themselves.
		msg := nats.NewMsg(subject)
		msg.Header.Set("KV-Operation", "DEL")
		if err := s.nc.PublishMsg(msg); err != nil {
			s.log.Warn("idempotency lock not released; it expires by itself", "error", err)
		}
		return
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		s.log.Error("encode result for the idempotency store", "error", err)
		return
	}
	value := encode(kindResult, c.digest, b)
	// Subject and headers take a few hundred bytes of the server's max_payload.
	if limit := min(int64(s.cfg.MaxValueSize), s.nc.MaxPayload()-1024); int64(len(value)) > limit {
		s.log.Warn("result over the idempotency store's value limit; a repeat of this call_id will be refused",
			"call_id", resp.GetCallId(), "bytes", len(value), "limit", limit)
		value = encode(kindTooLarge, c.digest, nil)
	}
	if err := s.put(c.key, value, durable); err != nil {
		// Lost: waiters see the lock expire and run the call themselves.
		s.log.Warn("result not stored for idempotency", "call_id", resp.GetCallId(), "error", err)
	}
}

// durableWait bounds how long a durable put waits for JetStream's ack.
const durableWait = 2 * time.Second

// put writes value under key: a plain publish (JetStream stores it without an
// ack round trip), or with acked set a request that returns once the stream
// has stored it.
func (s *Store) put(key string, value []byte, acked bool) error {
	subject := "$KV." + s.cfg.Bucket + "." + key
	if !acked {
		return s.nc.Publish(subject, value)
	}
	// Not the caller's context: a caller that went away still needs its
	// outcome kept for the retry it will make.
	ctx, cancel := context.WithTimeout(context.Background(), durableWait)
	defer cancel()
	reply, err := s.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: value})
	switch {
	case err != nil:
		return fmt.Errorf("idempotency: store %s: %w", key, err)
	case !isPlainPubAck(reply.Data):
		return fmt.Errorf("idempotency: store %s: JetStream refused it: %s", key, bytes.TrimSpace(reply.Data))
	}
	return nil
}
