package ratelimit

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Entries: one (limit, rule, principal) key as this replica tracks it, kept
// in a bounded cache, and the operations of each limit on it (rate tokens,
// byte quotas, running slots) against the state in force.

// entry is one (limit, rule, principal) key as this replica tracks it.
type entry struct {
	key  string
	rule *Rule
	kind string
	refs int // under Limiter.mu
	// sticky: the entry holds what must reach NATS (slots held, bytes
	// pending) and must not be evicted.
	sticky atomic.Bool
	elem   *list.Element

	mu sync.Mutex
	// The last value and revision seen in st (known false: read it first).
	st    store
	val   []byte
	rev   uint64
	known bool
	// rate: a lease of calls spent locally until leaseEnd.
	tokens   int
	leaseEnd time.Time
	// concurrent: calls running here; slots this replica holds in the
	// shared state; when they were last written.
	running, held int
	renewed       time.Time
	// bytes: the window (start, unix nanos), its total as last read, bytes
	// counted here and not yet written, when it was last read.
	win     int64
	used    int64
	pending int64
	synced  time.Time
}

// entry returns the tracked entry of (kind, r, the principal whose hash is
// who), referenced until the call's ticket lets it go.
func (l *Limiter) entry(kind string, r *Rule, who string) *entry {
	key := l.cfg.Scope + kind + "." + r.Name + "." + who
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.keys[key]; ok {
		l.lru.MoveToFront(el)
		e := el.Value.(*entry)
		e.refs++
		return e
	}
	for len(l.keys) >= l.cfg.MaxKeys && l.evictOne() {
	}
	if len(l.keys) >= l.cfg.MaxKeys {
		return nil // every tracked key is in use: refuse rather than grow
	}
	e := &entry{key: key, rule: r, kind: kind, refs: 1}
	e.elem = l.lru.PushFront(e)
	l.keys[key] = e.elem
	return e
}

// evictOne drops the least recently used entry nobody holds; false when
// there is none. Under l.mu.
func (l *Limiter) evictOne() bool {
	for el := l.lru.Back(); el != nil; el = el.Prev() {
		e := el.Value.(*entry)
		if e.refs > 0 || e.sticky.Load() {
			continue
		}
		l.lru.Remove(el)
		delete(l.keys, e.key)
		l.mem.forget(e.key)
		return true
	}
	return false
}

// update applies f to the key's value in st and writes the result with
// compare-and-set, retrying on a lost race. f returns the new value and
// whether to write it; f may run more than once. A decision not to write
// taken on a cached value is confirmed on a fresh read when confirm is set.
// Under e.mu.
func (l *Limiter) update(ctx context.Context, e *entry, st store, confirm bool, f func(cur []byte) ([]byte, bool)) error {
	if e.st != st {
		e.st, e.val, e.rev, e.known = st, nil, 0, false
	}
	for range 8 {
		fresh := false
		if !e.known {
			val, rev, err := st.get(ctx, e.key)
			if err != nil {
				return err
			}
			e.val, e.rev, e.known, fresh = val, rev, true, true
		}
		next, write := f(e.val)
		if !write {
			if confirm && !fresh {
				e.known = false
				continue
			}
			return nil
		}
		rev, err := st.cas(ctx, e.key, next, e.rev)
		if err == nil {
			e.val, e.rev = next, rev
			return nil
		}
		e.known = false
		if !errors.Is(err, errConflict) {
			return err
		}
	}
	return errContended
}

// takeRate takes one call of e's rate: from the local lease, else a new
// lease from the shared GCRA state (theoretical arrival time).
func (l *Limiter) takeRate(ctx context.Context, e *entry, st store, now time.Time) (bool, time.Duration, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tokens > 0 && now.Before(e.leaseEnd) && e.st == st {
		e.tokens--
		return true, 0, nil
	}
	r := e.rule
	t := int64(r.interval)
	span := t * int64(r.Burst)
	n := now.UnixNano()
	granted := 0
	var retry time.Duration
	err := l.update(ctx, e, st, false, func(cur []byte) ([]byte, bool) {
		granted, retry = 0, 0
		tat := max(decodeInt(cur), n)
		k := (n + span - tat) / t
		if k < 1 {
			retry = time.Duration(tat + t - (n + span))
			return nil, false
		}
		granted = int(min(k, int64(r.block)))
		return encodeInt(tat + int64(granted)*t), true
	})
	if err != nil || granted == 0 {
		return false, retry, err
	}
	e.tokens, e.leaseEnd = granted-1, now.Add(time.Second)
	return true, 0, nil
}

// giveBack returns a call taken from the lease (a later rule refused).
func giveBack(e *entry, now time.Time) {
	e.mu.Lock()
	if now.Before(e.leaseEnd) {
		e.tokens++
	}
	e.mu.Unlock()
}

// checkBytes admits a call while e's window is under the quota, counting
// its request bytes.
func (l *Limiter) checkBytes(ctx context.Context, e *entry, st store, now time.Time, req int64) (bool, time.Duration, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := time.Duration(e.rule.Window)
	win := now.Truncate(w).UnixNano()
	if e.win != win {
		e.win, e.used, e.pending, e.synced = win, 0, 0, time.Time{}
	}
	if now.Sub(e.synced) > l.cfg.SyncInterval || e.st != st {
		if err := l.flushBytes(ctx, e, st, now); err != nil {
			return false, 0, err
		}
	}
	if e.used+e.pending >= int64(e.rule.Bytes) {
		return false, time.Duration(win + int64(w) - now.UnixNano()), nil
	}
	e.pending += req
	e.sticky.Store(true)
	return true, 0, nil
}

// flushBytes adds the pending bytes to the window's shared counter and reads
// its total. Under e.mu.
func (l *Limiter) flushBytes(ctx context.Context, e *entry, st store, now time.Time) error {
	var total int64
	if e.pending == 0 {
		e.known = false // a read: the cached value may be old
	}
	err := l.update(ctx, e, st, false, func(cur []byte) ([]byte, bool) {
		win, used := decodePair(cur)
		if win != e.win {
			used = 0
		}
		total = used + e.pending
		if e.pending == 0 && win == e.win {
			return nil, false
		}
		return encodePair(e.win, total), true
	})
	if err != nil {
		return err
	}
	e.used, e.pending, e.synced = total, 0, now
	e.sticky.Store(false)
	return nil
}

// acquire takes a running slot of e's concurrency limit.
func (l *Limiter) acquire(ctx context.Context, e *entry, st store, now time.Time) (bool, time.Duration, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running++
	if e.running <= e.held && e.st == st {
		e.rule.running.Inc()
		return true, 0, nil // a slot held here and not in use
	}
	admitted, hold := false, 0
	err := l.update(ctx, e, st, true, func(cur []byte) ([]byte, bool) {
		m := decodeLeases(cur)
		others := 0
		for id, ls := range m {
			if ls.Exp < now.UnixMilli() {
				delete(m, id)
			} else if id != l.id {
				others += max(ls.N, 0)
			}
		}
		admitted = others+e.running <= e.rule.Concurrent
		if !admitted {
			return nil, false
		}
		// Hold a few spare slots, so the next calls need not ask NATS.
		hold = e.running + min(e.rule.spare, e.rule.Concurrent-others-e.running)
		m[l.id] = lease{N: hold, Exp: now.Add(l.cfg.LeaseTTL).UnixMilli()}
		return encodeLeases(m), true
	})
	if err != nil || !admitted {
		e.running--
		return false, 0, err
	}
	e.held, e.renewed = hold, now
	e.sticky.Store(true)
	e.rule.running.Inc()
	return true, 0, nil
}

// release ends a running call; the slot goes back to the shared state at the
// next sync.
func (l *Limiter) release(e *entry) {
	e.mu.Lock()
	e.running--
	e.mu.Unlock()
	e.rule.running.Dec()
}
