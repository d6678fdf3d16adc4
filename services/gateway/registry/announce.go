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
// workers that stop announcing, until ctx is done.
func (r *Registry) WatchAnnouncements(ctx context.Context, nc *nats.Conn, sweep time.Duration) error {
	r.mu.Lock()
	r.natsUp = nc.IsConnected
	r.mu.Unlock()
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
	r.add(ctx, a.GetAddress(), a.GetWorkerId(), signature(a), false, a.GetCallJournal(), ttl)
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
