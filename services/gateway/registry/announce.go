package registry

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// defaultAnnounceTTL applies to announcements that carry no ttl.
const defaultAnnounceTTL = 15 * time.Second

// WatchAnnouncements subscribes to worker heartbeats (core NATS) and expires
// workers that stop announcing, until ctx is done. It probes for workers and
// warms up for warmUp ([DefaultWarmUp] when 0; see [Registry.Warm]), from now,
// or from the connection when nc is not connected yet; call
// [Registry.Rediscover] at every (re)connection of nc.
func (r *Registry) WatchAnnouncements(ctx context.Context, nc *nats.Conn, sweep, warmUp time.Duration) error {
	if warmUp <= 0 {
		warmUp = DefaultWarmUp
	}
	r.mu.Lock()
	r.natsUp = nc.IsConnected
	r.nc, r.warmUp = nc, warmUp
	r.mu.Unlock()
	r.warm.start(time.Now(), warmUp, nc.IsConnected())
	sub, err := nc.Subscribe(tool.AnnounceSubject, func(m *nats.Msg) {
		var a toolfleetv1.WorkerAnnouncement
		if err := protojson.Unmarshal(m.Data, &a); err != nil {
			r.log.Warn("malformed worker announcement", "error", err)
			return
		}
		r.announce(ctx, &a)
	})
	if err != nil {
		return err
	}
	// Ask every worker to announce now rather than at its next heartbeat, so that a
	// gateway that starts (or restarts) after its workers knows them at once.
	if err := nc.Publish(tool.DiscoverSubject, nil); err != nil {
		r.log.Debug("discovery probe not sent", "error", err)
	}
	r.wg.Go(func() { r.watchWarm(ctx) })
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() { _ = sub.Unsubscribe() }()
		t := time.NewTicker(sweep)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				r.expire(now)
			}
		}
	}()
	return nil
}

func (r *Registry) announce(ctx context.Context, a *toolfleetv1.WorkerAnnouncement) {
	if a.GetAddress() == "" {
		return
	}
	ttl := a.GetTtl().AsDuration()
	if ttl <= 0 {
		ttl = defaultAnnounceTTL
	}
	if a.GetHealth() != tool.HealthServing { // DRAINING, NOT_SERVING (or anything else)
		r.leave(a.GetAddress(), ttl, a.GetHealth())
		return
	}
	r.add(ctx, a.GetAddress(), a.GetWorkerId(), signature(a), toolkitNames(a), false, a.GetCallJournal(), ttl)
}

// toolkitNames are the lower-case toolkit names an announcement names; nil
// when it names none or one without a name (then the worker may serve anything).
func toolkitNames(a *toolfleetv1.WorkerAnnouncement) []string {
	var names []string
	for _, t := range a.GetToolkits() {
		if t.GetName() == "" {
			return nil
		}
		names = append(names, strings.ToLower(t.GetName()))
	}
	return names
}

// Rediscover asks every worker to announce now and warms up again (see
// [Registry.Warm]); the gateway calls it when its NATS connection comes up
// again, since workers may have come or gone meanwhile. The first warm-up
// (readiness) is not undone. It does nothing before WatchAnnouncements.
func (r *Registry) Rediscover() {
	r.mu.Lock()
	nc, warmUp := r.nc, r.warmUp
	r.mu.Unlock()
	if nc == nil {
		return
	}
	r.warm.start(time.Now(), warmUp, true)
	if err := nc.Publish(tool.DiscoverSubject, nil); err != nil {
		r.log.Debug("discovery probe not sent", "error", err)
	}
}

// Warm is closed once the registry's first warm-up has ended: the warm-up
// bound has passed since it started watching announcements on a connected
// NATS, and no announced worker's contracts are still loading. Until then, and
// again for the bound after every Rediscover, a tool id that does not resolve
// is Unavailable (retryable) rather than NotFound; so is, at any time, one of a
// toolkit that an announced worker names whose contracts are not loaded yet.
// Static workers play no part. Without WatchAnnouncements it is never closed.
func (r *Registry) Warm() <-chan struct{} { return r.warm.warm }

// watchWarm closes Warm at the end of the first warm-up, then returns.
func (r *Registry) watchWarm(ctx context.Context) {
	for {
		warm, again := r.warm.check(time.Now())
		if warm {
			r.mu.Lock()
			n := len(r.workers)
			r.mu.Unlock()
			r.log.Info("registry warm: the announced workers are loaded", "workers", n)
			return
		}
		if again <= 0 {
			again = 20 * time.Millisecond // a load is running, or NATS not up yet
		}
		t := time.NewTimer(again)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.quit:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// signature names an announcement's toolkits and versions in a stable order.
func signature(a *toolfleetv1.WorkerAnnouncement) string {
	var parts []string
	for _, t := range a.GetToolkits() {
		parts = append(parts, t.GetService()+"@"+t.GetVersion())
	}
	slices.Sort(parts)
	if a.GetCallJournal() {
		// A worker restarted with a journal at the same address is loaded again.
		parts = append(parts, "+journal")
	}
	return strings.Join(parts, ",")
}
