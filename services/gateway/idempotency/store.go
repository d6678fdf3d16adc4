package idempotency

import (
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
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
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
	// ErrFull: the bucket is full; it refuses new entries rather than forget
	// finished calls (which would let their retries run again).
	ErrFull = errors.New("idempotency: the store is full")
	// ErrOverShare: the caller's entries hold its share of the bucket
	// (Config.Share); it refuses the caller's new entries, not another's. The
	// error wraps the share's own error, which says when to try again.
	ErrOverShare = errors.New("idempotency: the caller's share of the store is used")
	// ErrResultTooLarge: the call finished but its response was over the value
	// limit, so it was not kept; running it again would not be a repeat.
	ErrResultTooLarge = errors.New("idempotency: the finished call's response was too large to keep")
	// ErrOutcomeUnknown: an earlier call with this key may have run: its worker
	// recorded the start and went away, or it went to a worker that keeps no
	// journal and its gateway or worker went away mid-call. Running it again
	// could repeat its side effect.
	ErrOutcomeUnknown = errors.New("idempotency: the earlier call's outcome is unknown")
	// ErrStillRunning: the caller's context ended while the call was still
	// running elsewhere.
	ErrStillRunning = errors.New("idempotency: the earlier call with this call_id is still running")
)

// Config configures a [Store].
type Config struct {
	// BucketConfig names and sizes the KV bucket: Bucket (default
	// [DefaultBucket]), TTL, how long finished responses are kept (default
	// [DefaultTTL]), MaxBytes, its bound, past which it refuses new entries
	// ([ErrFull]; default [DefaultMaxBytes]), MemoryStorage (default on disk:
	// a NATS restart must not forget finished calls, or the retry of a
	// non-idempotent call would run it again) and Replicas (default 1).
	jsassets.BucketConfig
	// MaxValueSize bounds one stored response; a larger one is replaced by a
	// tombstone. Default [DefaultMaxValueSize].
	MaxValueSize int32
	// HolderGoneAfter is how long an entry in flight may stay unchanged before
	// its holder is taken to be gone. Default journal.HolderGoneAfter; workers
	// rewrite a started entry every journal.HeartbeatInterval, and so does the
	// gateway its lock while the call is on a worker without a journal.
	HolderGoneAfter time.Duration
	// Share bounds what one principal's new entries may add to the bucket;
	// nil: no bound but the bucket's.
	Share Share
}

// Share bounds the bytes one principal's entries take in the bucket, so
// that one caller cannot fill it for every other: a principal over its share
// gets [ErrOverShare] for a new key, while its repeats of keys it holds are
// still answered.
type Share interface {
	// Admit returns nil when principal may add an entry, else why not (in
	// terms of principal's own figures).
	Admit(ctx context.Context, principal string) error
	// Charge counts n bytes written for principal's entries.
	Charge(principal string, n int64)
}

func (c *Config) defaults() {
	c.BucketConfig.Defaults(jsassets.BucketConfig{Bucket: DefaultBucket, TTL: DefaultTTL, MaxBytes: DefaultMaxBytes})
	if c.MaxValueSize <= 0 {
		c.MaxValueSize = DefaultMaxValueSize
	}
	if c.HolderGoneAfter <= 0 {
		c.HolderGoneAfter = journal.HolderGoneAfter
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

// New creates (or updates) the bucket and returns the store.
func New(ctx context.Context, log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg.defaults()
	s := &Store{log: log, nc: nc, js: js, cfg: cfg, kvc: jetstream.KeyValueConfig{
		Bucket:         cfg.Bucket,
		Description:    "toolfleet gateway: the call journal and finished calls by (principal, tool, call_id)",
		TTL:            cfg.TTL,
		History:        1,
		Storage:        cfg.Storage(),
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

// create makes the bucket and makes sure a full bucket refuses new entries:
// gateways before the call journal let it drop its oldest entries, so that one
// caller filling it made another's finished call forgotten, and its retry run
// again. The handle it returns stays valid when the bucket is made again
// (recreate), so the store keeps its first one.
func (s *Store) create(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := jsassets.EnsureKeyValue(ctx, s.js, s.kvc)
	if err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	stream, err := s.js.Stream(ctx, "KV_"+s.cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("idempotency: bucket %s: %w", s.cfg.Bucket, err)
	}
	if sc := stream.CachedInfo().Config; sc.Discard != jetstream.DiscardNew {
		sc.Discard = jetstream.DiscardNew
		if _, err := s.js.UpdateStream(ctx, sc); err != nil {
			return nil, fmt.Errorf("idempotency: bucket %s: refuse new entries when full: %w", s.cfg.Bucket, err)
		}
	}
	return kv, nil
}

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }

// Options describe the call being claimed.
type Options struct {
	// Rerunnable: running the call again is harmless (a read-only or
	// idempotent tool, or one that deduplicates by call id itself), so a call
	// whose holder went away, or whose outcome is unknown, is run again.
	Rerunnable bool
	// Unjournaled: the call may be sent to a replica that keeps no journal;
	// then a lock whose holder went away may hide a call that ran, and a
	// retry is told so instead of running it.
	Unjournaled bool
}

// Acquire takes the key for a call, or answers from the journal:
//
//   - nobody has it: the claim owns a lock (Claim.Owned);
//   - a finished call with the same input: Claim.Stored is the gateway's
//     response, or Claim.Finished the worker's answer (the claim then owns the
//     entry, to store the response mapped from it);
//   - a call in flight is waited for, as long as its holder shows signs of
//     life; a holder that went away leaves a lock (its call never reached a
//     worker: taken over and run) or a started record (it may have run:
//     [ErrOutcomeUnknown]).
//
// A principal over its share (Config.Share) gets [ErrOverShare] for a key
// that is not in the bucket; a key it holds is answered as above.
//
// Errors: [ErrConflict], [ErrUnavailable], [ErrFull], [ErrOverShare],
// [ErrResultTooLarge], [ErrOutcomeUnknown], [ErrStillRunning], or ctx's error.
func (s *Store) Acquire(ctx context.Context, key Key, digest Digest, opts Options) (*Claim, error) {
	if s == nil || !s.nc.IsConnected() {
		// Requests would wait for a reconnect; the call must not.
		return nil, ErrUnavailable
	}
	k := key.subject()
	var flags byte
	if opts.Unjournaled {
		flags |= journal.LockUnjournaled
	}
	lock := journal.Encode(journal.KindLock, digest, []byte{flags})
	c, err := s.acquire(ctx, key, k, digest, lock, opts)
	if c != nil {
		c.principal = key.Principal // charged for what it writes
	}
	return c, err
}

// acquire is Acquire's loop: a new lock, or the entry found under k.
func (s *Store) acquire(ctx context.Context, key Key, k string, digest Digest, lock []byte, opts Options) (*Claim, error) {
	for {
		if err := s.admit(ctx, key.Principal, k); err != nil {
			return nil, err
		}
		rev, err := s.createLock(ctx, k, lock)
		if err == nil {
			s.charge(key.Principal, k, lock)
			return s.owned(k, digest, lock, rev), nil
		}
		switch {
		case errors.Is(err, ErrFull):
			return nil, err
		case !errors.Is(err, jetstream.ErrKeyExists):
			if s.recreate(ctx, err) {
				continue
			}
			return nil, s.unavailable(ctx, err)
		}
		e, gone, err := s.follow(ctx, k)
		switch {
		case err != nil:
			return nil, err
		case e == nil:
			continue // let go in between: try again
		case gone:
			c, err := s.holderGone(ctx, k, e, digest, lock, opts)
			if c == nil && err == nil {
				continue // moved in between: read it again
			}
			return c, err
		}
		c, err := s.settled(ctx, k, e, digest, lock, opts)
		if c == nil && err == nil {
			continue
		}
		return c, err
	}
}

// admit asks the share whether principal may add the entry k; a principal
// over its share still reaches an entry it holds (a repeat is answered from
// it). A delete marker reads as no entry.
func (s *Store) admit(ctx context.Context, principal, k string) error {
	if s.cfg.Share == nil {
		return nil
	}
	over := s.cfg.Share.Admit(ctx, principal)
	if over == nil {
		return nil
	}
	_, err := s.kv.Get(ctx, k)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return fmt.Errorf("%w: %w", ErrOverShare, over)
	}
	return s.unavailable(ctx, err)
}

// charge counts what one write of value under k adds to the bucket (its
// subject and value; JetStream's per-message overhead is not counted).
func (s *Store) charge(principal, k string, value []byte) {
	if s.cfg.Share != nil && principal != "" {
		s.cfg.Share.Charge(principal, int64(len(s.subject(k))+len(value)))
	}
}

// settled decides on a finished entry (R, T, U, F): the stored response, the
// worker's answer, or an error. Another input is a conflict. A rerunnable
// call takes an unknown entry over; (nil, nil) asks to read it again.
func (s *Store) settled(ctx context.Context, k string, e jetstream.KeyValueEntry, digest Digest, lock []byte, opts Options) (*Claim, error) {
	r, err := journal.Decode(e.Value())
	if err != nil {
		return nil, err
	}
	if r.HasDigest && r.Digest != digest {
		return nil, ErrConflict
	}
	switch r.Kind {
	case journal.KindResult:
		resp := &toolfleetv1.CallToolResponse{}
		if err := proto.Unmarshal(r.Payload, resp); err != nil {
			return nil, fmt.Errorf("%w: %w", journal.ErrBadRecord, err)
		}
		return &Claim{Stored: resp}, nil
	case journal.KindTooLarge:
		return nil, ErrResultTooLarge
	case journal.KindFinished:
		out := &toolfleetv1.WorkerCallOutcome{}
		if err := proto.Unmarshal(r.Payload, out); err != nil {
			return nil, fmt.Errorf("%w: %w", journal.ErrBadRecord, err)
		}
		c := s.owned(k, digest, lock, e.Revision())
		c.Finished = out
		return c, nil
	case journal.KindUnknown:
		if opts.Rerunnable {
			return s.takeOver(ctx, k, e.Revision(), digest, lock)
		}
		return nil, ErrOutcomeUnknown
	}
	return nil, nil // a lock or a start: in flight again
}

// holderGone decides on an entry in flight whose holder stopped showing signs
// of life: a journaled lock never reached a worker (a worker's late start
// finds the entry moved and refuses), so the call is taken over; a start, or
// an unjournaled lock, may hide a call that ran, so the entry becomes unknown
// (unless running again is harmless).
func (s *Store) holderGone(ctx context.Context, k string, e jetstream.KeyValueEntry, digest Digest, lock []byte, opts Options) (*Claim, error) {
	r, err := journal.Decode(e.Value())
	if err != nil {
		return nil, err
	}
	journaledLock := r.Kind == journal.KindLock && r.HasDigest && len(r.Payload) > 0 && r.Payload[0]&journal.LockUnjournaled == 0
	if opts.Rerunnable || journaledLock {
		return s.takeOver(ctx, k, e.Revision(), digest, lock)
	}
	reason := journal.ReasonUnjournaled
	if r.Kind == journal.KindStarted {
		reason = journal.ReasonStarted
	}
	_, err = s.write(ctx, k, journal.Encode(journal.KindUnknown, r.Digest, []byte{byte(reason)}), e.Revision())
	switch {
	case errors.Is(err, journal.ErrMoved):
		return nil, nil
	case err != nil:
		return nil, s.unavailable(ctx, err)
	}
	s.log.Warn("a call's holder went away mid-call; its outcome is unknown", "key", k, "reason", string(rune(reason)))
	if r.HasDigest && r.Digest != digest {
		return nil, ErrConflict
	}
	return nil, ErrOutcomeUnknown
}

// takeOver replaces the entry at rev by this call's lock.
func (s *Store) takeOver(ctx context.Context, k string, rev uint64, digest Digest, lock []byte) (*Claim, error) {
	nrev, err := s.write(ctx, k, lock, rev)
	switch {
	case errors.Is(err, journal.ErrMoved):
		return nil, nil
	case errors.Is(err, ErrFull):
		return nil, err
	case err != nil:
		return nil, s.unavailable(ctx, err)
	}
	return s.owned(k, digest, lock, nrev), nil
}

// follow watches an entry in flight (a lock or a start) until it is finished
// (R, T, U, F: returned), let go (deleted: nil), or its holder is gone
// (returned with gone set): unchanged for HolderGoneAfter — any change, a
// worker's heartbeat, a gateway's lock renewal, restarts the wait — or, for
// a start, its worker process answering no liveness probe.
func (s *Store) follow(ctx context.Context, k string) (_ jetstream.KeyValueEntry, gone bool, _ error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.kv.Watch(wctx, k)
	if err != nil {
		return nil, false, s.unavailable(ctx, err)
	}
	defer func() { _ = w.Stop() }()
	idle := time.NewTimer(s.cfg.HolderGoneAfter)
	defer idle.Stop()
	probe := time.NewTicker(journal.HeartbeatInterval)
	defer probe.Stop()
	var last jetstream.KeyValueEntry
	var probeSubject string
	for {
		select {
		case <-ctx.Done():
			return nil, false, fmt.Errorf("%w: %w", ErrStillRunning, ctx.Err())
		case <-idle.C:
			return last, last != nil, nil
		case <-probe.C:
			if probeSubject != "" && !s.alive(ctx, probeSubject) {
				return last, true, nil
			}
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return nil, false, s.unavailable(ctx, errors.New("watch ended"))
			case e == nil:
				if last == nil {
					return nil, false, nil // nothing there any more
				}
				continue // end of the initial value
			case e.Operation() != jetstream.KeyValuePut:
				return nil, false, nil
			}
			r, err := journal.Decode(e.Value())
			if err != nil {
				return nil, false, err
			}
			if r.Kind != journal.KindLock && r.Kind != journal.KindStarted {
				return e, false, nil
			}
			first := last == nil
			last = e
			idle.Reset(s.cfg.HolderGoneAfter)
			probeSubject = ""
			if r.Kind == journal.KindStarted {
				probeSubject = journal.ProbeSubject(r.Payload)
				// A heartbeat is itself a sign of life; the record found first
				// may belong to a process long gone.
				if first && probeSubject != "" && !s.alive(ctx, probeSubject) {
					return last, true, nil
				}
			}
		}
	}
}

// alive asks the worker process that started a call whether it still runs;
// false only when NATS answers that nobody listens on its probe subject (the
// process, or its NATS connection, is gone). No answer in time is not proof:
// the heartbeat decides then.
func (s *Store) alive(ctx context.Context, subject string) bool {
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := s.nc.RequestWithContext(pctx, subject, nil)
	return !errors.Is(err, nats.ErrNoResponders)
}

// createLock writes a new entry; an existing one is [jetstream.ErrKeyExists].
// A key whose last operation was a delete is taken through kv.Create, which
// writes over the delete marker.
func (s *Store) createLock(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := s.write(ctx, key, value, 0)
	if !errors.Is(err, journal.ErrMoved) {
		return rev, err
	}
	rev, err = s.kv.Create(ctx, key, value)
	if err != nil && isFull(err) {
		return 0, fmt.Errorf("%w: %w", ErrFull, err)
	}
	return rev, err
}

// write stores value under key if the entry is at revision expect (0: new),
// waiting for JetStream's acknowledgement within durableWait (and ctx).
// Errors: journal.ErrMoved, [ErrFull], or another (NATS did not answer, the
// bucket is gone).
func (s *Store) write(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	wctx, cancel := context.WithTimeout(ctx, durableWait)
	defer cancel()
	rev, err := journal.Write(wctx, s.nc, s.subject(key), value, expect)
	if errors.Is(err, journal.ErrFull) {
		return 0, fmt.Errorf("%w: %w", ErrFull, err)
	}
	return rev, err
}

// isFull reports JetStream's refusal of a write to a full stream.
func isFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == 10047 || apiErr.ErrorCode == 10077)
}

func (s *Store) subject(key string) string { return "$KV." + s.cfg.Bucket + "." + key }

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

// durableWait bounds how long a write waits for JetStream's ack.
const durableWait = 2 * time.Second
