package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
)

// Claim is the outcome of [Store.Acquire]. A nil *Claim owns nothing, and all
// its methods are no-ops.
type Claim struct {
	// Stored is the finished call's response: return it without running the tool.
	Stored *toolfleetv1.CallToolResponse
	// Finished is a worker's answer to the call, recorded in the journal after
	// the gateway that sent it went away: map it to a response (and store
	// that with Finish) without running the tool.
	Finished *toolfleetv1.WorkerCallOutcome

	s   *Store
	key string
	// principal is charged for what the claim writes last (Store.charge).
	principal string
	digest    Digest
	lock      []byte // this claim's lock record

	mu    sync.Mutex
	rev   uint64 // the entry's revision as this claim last wrote or saw it
	owned bool
	// anyRev: the last write need not find the entry at rev (WorkerAnswered).
	anyRev bool
	// renew re-writes the lock while a call is on a replica without a journal.
	renew *time.Timer
}

func (s *Store) owned(k string, digest Digest, lock []byte, rev uint64) *Claim {
	return &Claim{s: s, key: k, digest: digest, lock: lock, rev: rev, owned: true}
}

// Owned reports whether this claim holds the entry: the call runs (or its
// recorded answer is mapped) under its key, and its outcome is recorded for
// repeats.
func (c *Claim) Owned() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owned
}

// Journal is what a worker needs to record the call (journal.ClaimKey).
func (c *Claim) Journal() journal.Claim {
	c.mu.Lock()
	defer c.mu.Unlock()
	return journal.Claim{Subject: c.s.subject(c.key), Revision: c.rev, Digest: c.digest}
}

// MarkUnjournaled rewrites the lock to say the call may go to a replica
// without a journal (before sending it to one the claim did not expect).
func (c *Claim) MarkUnjournaled(ctx context.Context) error {
	if !c.Owned() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lock[journal.HeaderLen]&journal.LockUnjournaled != 0 {
		return nil
	}
	lock := journal.Encode(journal.KindLock, c.digest, []byte{journal.LockUnjournaled})
	rev, err := c.s.write(ctx, c.key, lock, c.rev)
	if err != nil {
		return fmt.Errorf("idempotency: mark the call unjournaled: %w", err)
	}
	c.lock, c.rev = lock, rev
	return nil
}

// ErrStarted: [Claim.Fence] found that a worker recorded the call's start.
var ErrStarted = errors.New("idempotency: a worker started the call")

// Fence withdraws the claim's current revision after an attempt whose answer
// was lost (a worker that went away, a connection cut): if the entry is
// still this claim's lock, it is rewritten, so the attempt can never start
// (its worker's start expects the old revision) and the call may be sent
// again. It returns [ErrStarted] when a worker recorded the start (the call
// may have run: see [Claim.Await]), or another error when the store did not
// answer (then nothing is known).
func (c *Claim) Fence(ctx context.Context) error {
	if !c.Owned() {
		return ErrUnavailable
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rev, err := c.s.write(ctx, c.key, c.lock, c.rev)
	switch {
	case errors.Is(err, journal.ErrMoved):
		return ErrStarted
	case err != nil:
		return c.s.unavailable(ctx, err)
	}
	c.rev = rev
	return nil
}

// Advance records that the worker wrote the entry at rev (its finished
// record: journal.FinishedTrailer), so that Finish writes over it.
func (c *Claim) Advance(rev uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev > c.rev {
		c.rev = rev
	}
}

// WorkerAnswered records that the worker the claim was handed to answered
// without saying where its record of the answer is (its write was lost): the
// entry moved past the claim by the worker's own start, so the response is
// stored over whatever revision it is at.
func (c *Claim) WorkerAnswered() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.anyRev = true
}

// Await follows a call a worker started (after [ErrStarted]) until the worker
// records its answer (returned, the claim then owns the finished entry), or
// stops showing signs of life ([ErrOutcomeUnknown], recorded). Errors: also
// [ErrStillRunning] when ctx ends first, [ErrUnavailable].
func (c *Claim) Await(ctx context.Context) (*toolfleetv1.WorkerCallOutcome, *toolfleetv1.CallToolResponse, error) {
	if !c.Owned() {
		return nil, nil, ErrOutcomeUnknown
	}
	s := c.s
	for {
		e, gone, err := s.follow(ctx, c.key)
		switch {
		case err != nil:
			return nil, nil, err
		case e == nil:
			// Deleted: nobody deletes a started entry but its own gateway.
			c.disown()
			return nil, nil, ErrOutcomeUnknown
		case gone:
			got, err := s.holderGone(ctx, c.key, e, c.digest, c.lock, Options{})
			if got == nil && err == nil {
				continue
			}
			c.disown()
			if got != nil { // a lock nobody renewed: cannot follow a start
				got.Release()
				return nil, nil, ErrOutcomeUnknown
			}
			return nil, nil, err
		}
		got, err := s.settled(ctx, c.key, e, c.digest, c.lock, Options{})
		switch {
		case err != nil:
			c.disown()
			return nil, nil, err
		case got == nil:
			continue
		case got.Stored != nil:
			c.disown()
			return nil, got.Stored, nil
		}
		c.mu.Lock()
		c.rev = got.rev
		c.mu.Unlock()
		return got.Finished, nil, nil
	}
}

// Abandon gives the claim up and writes nothing: the entry is another's now
// (a retry took the call over), or must stay as it is (a worker's answer this
// gateway cannot read).
func (c *Claim) Abandon() {
	if c != nil {
		c.disown()
	}
}

func (c *Claim) disown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.owned = false
	c.stopRenewLocked()
}

// KeepAlive re-writes the lock every journal.HeartbeatInterval until the
// returned stop is called, so that a retry waits while the call is on a
// replica that keeps no journal (there, only the gateway can show that the
// call is alive). Renewal stops by itself if the entry moves.
func (c *Claim) KeepAlive() (stop func()) {
	if !c.Owned() {
		return func() {}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var renew func()
	renew = func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.renew == nil || !c.owned {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), durableWait)
		defer cancel()
		rev, err := c.s.write(ctx, c.key, c.lock, c.rev)
		if err != nil {
			c.s.log.Warn("lock of a call in flight not renewed", "key", c.key, "error", err)
			if errors.Is(err, journal.ErrMoved) {
				c.renew = nil
				return
			}
		} else {
			c.rev = rev
		}
		c.renew = time.AfterFunc(journal.HeartbeatInterval, renew)
	}
	c.renew = time.AfterFunc(journal.HeartbeatInterval, renew)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stopRenewLocked()
	}
}

func (c *Claim) stopRenewLocked() {
	if c.renew != nil {
		c.renew.Stop()
		c.renew = nil
	}
}

// Unknown records that the claimed call may have run without an answer: a
// repeat gets [ErrOutcomeUnknown] instead of a second run, until the entry
// expires with the bucket's TTL. The record is acknowledged by JetStream
// before Unknown returns (within durableWait).
func (c *Claim) Unknown(reason journal.Reason) {
	if !c.Owned() {
		return
	}
	c.end(journal.Encode(journal.KindUnknown, c.digest, []byte{byte(reason)}), true, "unknown outcome not recorded; a retry will find the entry as it was")
}

// Release lets the key go (the call did not run, or its outcome is not worth
// keeping), so that a retry runs the call again.
func (c *Claim) Release() {
	c.end(nil, false, "idempotency lock not released; a retry takes it over once its holder shows no sign of life")
}

// Finish stores resp under the claim or, when keep is false, lets the key go
// (Release). With durable set, Finish returns once JetStream has
// acknowledged the stored response (within durableWait): the caller gets its
// answer only when a repeat, even after a NATS restart, would be answered
// from the store. A read-only or idempotent call's response, or one whose
// worker already recorded its answer, is published without waiting.
func (c *Claim) Finish(resp *toolfleetv1.CallToolResponse, keep, durable bool) {
	if !c.Owned() {
		return
	}
	if !keep {
		c.Release()
		return
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		c.s.log.Error("encode result for the idempotency store", "error", err)
		c.Release()
		return
	}
	value := journal.Encode(journal.KindResult, c.digest, b)
	// Subject and headers take a few hundred bytes of the server's max_payload.
	if limit := min(int64(c.s.cfg.MaxValueSize), c.s.nc.MaxPayload()-1024); int64(len(value)) > limit {
		c.s.log.Warn("result over the idempotency store's value limit; a repeat of this call_id will be refused",
			"call_id", resp.GetCallId(), "bytes", len(value), "limit", limit)
		value = journal.Encode(journal.KindTooLarge, c.digest, nil)
	}
	c.end(value, durable, "result not stored for idempotency")
}

// end writes the claim's last value (nil: a delete) over its revision, and
// gives the claim up. A claim whose entry moved (a retry declared its holder
// gone) writes nothing.
func (c *Claim) end(value []byte, acked bool, failure string) {
	if !c.Owned() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.owned = false
	c.stopRenewLocked()
	s := c.s
	if !s.nc.IsConnected() {
		s.log.Warn(failure, "key", c.key, "error", "NATS is not connected")
		return
	}
	s.charge(c.principal, c.key, value)
	msg := &nats.Msg{Subject: s.subject(c.key), Data: value, Header: nats.Header{}}
	if !c.anyRev {
		msg.Header.Set("Nats-Expected-Last-Subject-Sequence", fmt.Sprint(c.rev))
	}
	if value == nil {
		msg.Header.Set("KV-Operation", "DEL")
	}
	if !acked {
		if err := s.nc.PublishMsg(msg); err != nil {
			s.log.Warn(failure, "key", c.key, "error", err)
		}
		return
	}
	// Not the caller's context: a caller that went away still needs its
	// outcome kept for the retry it will make.
	ctx, cancel := context.WithTimeout(context.Background(), durableWait)
	defer cancel()
	if _, err := journal.Send(ctx, s.nc, msg); err != nil {
		s.log.Warn(failure, "key", c.key, "error", err)
	}
}
