package ratelimit

import (
	"context"
	"time"
)

// The background sync: what this replica owes the shared state (released
// slots, counted bytes, leases of running calls) written every SyncInterval.

// Run writes released slots and counted bytes every SyncInterval, and renews
// the leases of running calls, until ctx ends; then it gives back every slot
// it holds (bounded by a second).
func (l *Limiter) Run(ctx context.Context) {
	t := time.NewTicker(l.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			l.Sync(stop)
			cancel()
			return
		case <-t.C:
			l.Sync(ctx)
		}
	}
}

// Sync writes what this replica owes the shared state now.
func (l *Limiter) Sync(ctx context.Context) {
	st, policy := l.storeFor(false)
	if st == nil && policy != "" {
		return
	}
	l.mu.Lock()
	var todo []*entry
	for _, el := range l.keys {
		if e := el.Value.(*entry); e.sticky.Load() {
			e.refs++
			todo = append(todo, e)
		}
	}
	l.mu.Unlock()
	now := l.now()
	for _, e := range todo {
		if ctx.Err() != nil {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		if err := l.syncEntry(cctx, e, st, now); err != nil {
			l.warnDown(err)
		}
		cancel()
	}
	l.mu.Lock()
	for _, e := range todo {
		e.refs--
	}
	l.mu.Unlock()
}

func (l *Limiter) syncEntry(ctx context.Context, e *entry, st store, now time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.kind {
	case LimitBytes:
		if e.pending > 0 {
			return l.flushBytes(ctx, e, st, now)
		}
		e.sticky.Store(false)
	case LimitConcurrent:
		if e.st != st && e.st != nil {
			// The state moved (NATS came back or went away): what was held
			// in the other store is forgotten there; hold the running calls
			// here.
			e.held = 0
		}
		renew := e.held > 0 && now.Sub(e.renewed) > l.cfg.LeaseTTL/3
		// Idle slots go back, but for the spare ones while calls run.
		keep := e.running
		if e.running > 0 {
			keep = max(e.running, min(e.held, e.running+e.rule.spare))
		}
		if e.held == keep && !renew {
			e.sticky.Store(e.held > 0)
			return nil
		}
		err := l.update(ctx, e, st, false, func(cur []byte) ([]byte, bool) {
			m := decodeLeases(cur)
			for id, ls := range m {
				if ls.Exp < now.UnixMilli() {
					delete(m, id)
				}
			}
			if keep > 0 {
				m[l.id] = lease{N: keep, Exp: now.Add(l.cfg.LeaseTTL).UnixMilli()}
			} else {
				delete(m, l.id)
			}
			return encodeLeases(m), true
		})
		if err != nil {
			return err
		}
		e.held, e.renewed = keep, now
		e.sticky.Store(e.held > 0)
	}
	return nil
}
