package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// idempotency makes call_id an idempotency key across gateway replicas with a
// NATS KV bucket: an empty value is a lock held by the replica running the call
// (with a per-key TTL, so a crashed replica's lock expires), a non-empty value is
// the finished response (kept for the bucket's TTL).
type idempotency struct {
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	cfg    jetstream.KeyValueConfig
	kv     jetstream.KeyValue
	bucket string
	// lastRecreate rate-limits re-creating a bucket NATS lost (unix nanos).
	lastRecreate atomic.Int64
	// lastWarn rate-limits the warning while NATS is away (unix nanos).
	lastWarn atomic.Int64
}

const lockMargin = 10 * time.Second

func newIdempotency(ctx context.Context, log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, bucket string, ttl time.Duration, storage jetstream.StorageType) (*idempotency, error) {
	cfg := jetstream.KeyValueConfig{
		Bucket:         bucket,
		Description:    "toolfleet gateway: finished calls by call_id",
		TTL:            ttl,
		History:        1,
		Storage:        storage,
		LimitMarkerTTL: time.Minute,
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("gateway: idempotency bucket %s: %w", bucket, err)
	}
	return &idempotency{log: log, nc: nc, js: js, cfg: cfg, kv: kv, bucket: bucket}, nil
}

// claim is the outcome of acquire.
type claim struct {
	// stored is set when the call already finished: return it without running.
	stored *toolfleetv1.CallToolResponse
	owned  bool
	key    string
	// fresh: a generated id with no lock behind it (nothing to release).
	fresh bool
}

// keyOf maps any call id onto the KV key alphabet.
func keyOf(callID string) string {
	h := sha256.Sum256([]byte(callID))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// acquire takes the lock for callID or returns the stored response; a call in
// flight elsewhere is waited for. When NATS cannot answer the call runs without
// idempotency (logged): a call never fails because NATS is away.
func (i *idempotency) acquire(ctx context.Context, callID string, lockTTL time.Duration) (claim, *CallError) {
	if i == nil {
		return claim{}, nil
	}
	if !i.nc.IsConnected() {
		// Requests would wait for a reconnect; the call must not.
		return i.degrade(ctx, nats.ErrConnectionReconnecting)
	}
	key := keyOf(callID)
	for {
		err := i.createLock(ctx, key, lockTTL+lockMargin)
		if err == nil {
			return claim{owned: true, key: key}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			if i.recreate(ctx, err) {
				continue
			}
			return i.degrade(ctx, err)
		}
		entry, err := i.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
			continue // released in between: try again
		case err != nil:
			return i.degrade(ctx, err)
		case len(entry.Value()) > 0:
			return i.decode(entry.Value())
		}
		done, ce := i.wait(ctx, key, lockTTL+lockMargin)
		if ce != nil || done.stored != nil {
			return done, ce
		}
		// The holder released without a result (a retryable failure): run it here.
	}
}

// createLock takes the lock for key in one request/reply: the very message
// kv.Create sends first (an empty value expecting no earlier revision of the key,
// with a per-key TTL), minus kv.Create's per-call regexp key check, option
// closures, context wrapping and JSON decoding of the ack, which together cost
// about as much CPU as the rest of the request on the gateway's side. Any reply
// but a plain success ack (the key exists or was deleted, no stream answered, an
// API error) goes through kv.Create, which handles it exactly as before; request
// errors (a timeout, a cancelled call) are returned as kv.Create returns them.
func (i *idempotency) createLock(ctx context.Context, key string, ttl time.Duration) error {
	msg := &nats.Msg{Subject: "$KV." + i.bucket + "." + key, Header: nats.Header{
		jetstream.ExpectedLastSubjSeqHeader: expectNoRevision,
		jetstream.MsgTTLHeader:              []string{ttl.String()},
	}}
	if _, ok := ctx.Deadline(); !ok {
		// kv.Create bounds a request without a deadline the same way (5 s).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	reply, err := i.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case err == nil && isPlainPubAck(reply.Data):
		return nil
	case err != nil && !errors.Is(err, nats.ErrNoResponders):
		return err
	}
	_, err = i.kv.Create(ctx, key, nil, jetstream.KeyTTL(ttl))
	return err
}

// expectNoRevision is the Nats-Expected-Last-Subject-Sequence of a create (read-only).
var expectNoRevision = []string{"0"}

// isPlainPubAck reports a JetStream success ack ({"stream":"…",…,"seq":N}); error
// replies start with {"error".
func isPlainPubAck(b []byte) bool {
	return bytes.HasPrefix(b, []byte(`{"stream":"`)) && !bytes.Contains(b, []byte(`"error"`))
}

// fresh claims a call id the gateway generated itself, without taking a lock.
func (i *idempotency) fresh(callID string) claim {
	if i == nil {
		return claim{}
	}
	return claim{owned: true, key: keyOf(callID), fresh: true}
}

// wait watches key until the holder stores a result or lets go, or until the
// holder's lock must have expired (then the caller tries to take it).
func (i *idempotency) wait(ctx context.Context, key string, bound time.Duration) (claim, *CallError) {
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	w, err := i.kv.Watch(wctx, key)
	if err != nil {
		return i.degrade(ctx, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() == nil {
				return claim{}, nil // the holder's lock expired: try to take it
			}
			return claim{}, serverError(codes.DeadlineExceeded, ErrDeadline, ctx.Err().Error(),
				"the earlier call with this call_id was still running when the deadline passed")
		case e, ok := <-w.Updates():
			if !ok {
				return claim{}, nil
			}
			if e == nil {
				continue // end of the initial values
			}
			if e.Operation() != jetstream.KeyValuePut {
				return claim{}, nil
			}
			if len(e.Value()) > 0 {
				return i.decode(e.Value())
			}
		}
	}
}

func (i *idempotency) decode(b []byte) (claim, *CallError) {
	var r toolfleetv1.CallToolResponse
	if err := proto.Unmarshal(b, &r); err != nil {
		return claim{}, serverError(codes.Internal, err, err.Error(), "the stored result of this call_id is unreadable")
	}
	return claim{stored: &r}, nil
}

// recreate makes the bucket again when NATS lost it (a restart with memory storage
// or a new store), at most every few seconds; it reports whether to try again.
func (i *idempotency) recreate(ctx context.Context, err error) bool {
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return false
	}
	now := time.Now().UnixNano()
	last := i.lastRecreate.Load()
	if now-last < int64(5*time.Second) || !i.lastRecreate.CompareAndSwap(last, now) {
		return false
	}
	if _, cerr := i.js.CreateOrUpdateKeyValue(ctx, i.cfg); cerr != nil {
		i.log.Warn("idempotency bucket lost and not re-created", "bucket", i.bucket, "error", cerr)
		return false
	}
	i.log.Info("idempotency bucket re-created after NATS lost it", "bucket", i.bucket)
	return true
}

func (i *idempotency) degrade(ctx context.Context, err error) (claim, *CallError) {
	if ctx.Err() != nil {
		return claim{}, serverError(codes.DeadlineExceeded, ErrDeadline, ctx.Err().Error(), "the deadline passed before the call started")
	}
	if now := time.Now().UnixNano(); now-i.lastWarn.Load() > int64(10*time.Second) {
		i.lastWarn.Store(now)
		i.log.Warn("idempotency store unavailable; running calls without it", "error", err)
	}
	return claim{}, nil
}

// finish stores resp under the claim (published asynchronously: waiters see it
// as soon as it lands) or, when it must not be stored, lets the lock go.
func (i *idempotency) finish(c claim, resp *toolfleetv1.CallToolResponse, store bool) {
	if i == nil || !c.owned || !i.nc.IsConnected() {
		return // a lock left behind expires with its TTL
	}
	subject := "$KV." + i.bucket + "." + c.key
	if !store && c.fresh {
		return
	}
	if !store {
		// A delete marker lets waiters run the call themselves.
		msg := nats.NewMsg(subject)
		msg.Header.Set("KV-Operation", "DEL")
		if err := i.nc.PublishMsg(msg); err != nil {
			i.log.Warn("idempotency lock not released; it expires by itself", "error", err)
		}
		return
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		i.log.Error("encode result for the idempotency store", "error", err)
		return
	}
	// A plain publish: JetStream stores it without an ack round trip. If it is
	// lost, waiters see the lock expire and run the call themselves.
	if err := i.nc.Publish(subject, b); err != nil {
		i.log.Warn("result not stored for idempotency", "call_id", resp.GetCallId(), "error", err)
	}
}
