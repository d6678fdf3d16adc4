package tool

import (
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// AnnounceSubject is the core NATS subject of worker heartbeats.
const AnnounceSubject = "toolfleet.registry.announce"

// DiscoverSubject is where a registry (the gateway) asks every worker to announce
// itself now, when it starts or reconnects, instead of waiting up to one heartbeat
// interval to learn who is out there.
const DiscoverSubject = "toolfleet.registry.discover"

// Health values of a toolfleetv1.WorkerAnnouncement. SERVING takes calls.
// DRAINING says the worker is leaving: it takes no new calls (it refuses them
// with [DrainingTrailer]) but finishes those in flight, and its tools stay known
// to the gateway until its ttl runs out, so that callers get a retryable
// Unavailable rather than NotFound while no other replica serves. NOT_SERVING is
// the last announcement of a worker that stopped; the gateway treats it as
// DRAINING (nothing more will follow, so the ttl runs out).
const (
	HealthServing    = "SERVING"
	HealthDraining   = "DRAINING"
	HealthNotServing = "NOT_SERVING"
)

// DrainingTrailer is the trailer metadata key a draining worker sets (value "1")
// on the UNAVAILABLE status it answers new calls with: the call did not run, so
// the gateway moves it to another replica at once, whatever the tool.
const DrainingTrailer = "toolfleet-draining"

// announcer publishes heartbeats until stopped. NATS being away never stops the
// worker: the client reconnects forever and buffers, and a failed publish is logged.
type announcer struct {
	cfg      Config
	log      *slog.Logger
	addr     string
	toolkits []*toolfleetv1.AnnouncedToolkit

	nc   *nats.Conn
	quit chan struct{}
	done chan struct{}
	once sync.Once
	// draining is closed by drain: from then on every announcement says DRAINING.
	draining  chan struct{}
	drainOnce sync.Once
}

func newAnnouncer(cfg Config, log *slog.Logger, addr string, tks []contract.Toolkit) *announcer {
	a := &announcer{cfg: cfg, log: log.With("nats", cfg.NATSURL), addr: addr,
		quit: make(chan struct{}), done: make(chan struct{}), draining: make(chan struct{})}
	for _, t := range tks {
		a.toolkits = append(a.toolkits, &toolfleetv1.AnnouncedToolkit{Name: t.Name, Version: t.Version, Service: t.Service})
	}
	return a
}

// start connects (in the background when NATS is away) and starts the heartbeat.
func (a *announcer) start() {
	nc, err := a.cfg.NATS.Connect(a.cfg.NATSURL, "toolfleet-worker "+a.cfg.WorkerID,
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				return // our own Close at stop: not news
			}
			a.log.Warn("NATS disconnected; still serving, announcements paused", "error", err)
		}),
		nats.ReconnectHandler(func(*nats.Conn) { a.log.Info("NATS reconnected") }),
	)
	if err != nil { // a malformed URL or unreadable credentials: RetryOnFailedConnect covers the rest
		a.log.Error("NATS announcements disabled", "error", err)
		close(a.done)
		return
	}
	a.nc = nc
	go a.loop()
}

func (a *announcer) loop() {
	defer close(a.done)
	t := time.NewTicker(a.cfg.AnnounceInterval)
	defer t.Stop()
	// Probes arrive on a channel so that every announcement is sent from this loop
	// and none can follow the NOT_SERVING one that stop sends. One pending probe is
	// enough: a burst of them is answered by one announcement.
	probes := make(chan *nats.Msg, 1)
	sub, err := a.nc.ChanSubscribe(DiscoverSubject, probes)
	if err != nil {
		a.log.Warn("not answering discovery probes", "error", err)
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	health := HealthServing
	a.publish(health)
	draining := a.draining
	for {
		select {
		case <-a.quit:
			return
		case <-draining:
			health, draining = HealthDraining, nil
			a.publish(health)
		case <-t.C:
			a.publish(health)
		case <-probes:
			a.publish(health)
		}
	}
}

// drain announces DRAINING now and at every heartbeat until stop.
func (a *announcer) drain() {
	a.drainOnce.Do(func() { close(a.draining) })
}

// stop sends NOT_SERVING, flushes within a bound and closes the connection.
func (a *announcer) stop() {
	a.once.Do(func() {
		close(a.quit)
		<-a.done
		if a.nc == nil {
			return
		}
		a.publish(HealthNotServing)
		if err := a.nc.FlushTimeout(2 * time.Second); err != nil {
			a.log.Warn("NOT_SERVING announcement may be lost", "error", err)
		}
		a.nc.Close()
	})
}

func (a *announcer) publish(health string) {
	msg := &toolfleetv1.WorkerAnnouncement{
		WorkerId: a.cfg.WorkerID,
		Address:  a.addr,
		Toolkits: a.toolkits,
		Health:   health,
		Time:     timestamppb.Now(),
		Ttl:      durationpb.New(3 * a.cfg.AnnounceInterval),
		// Announcing needs the connection the call journal writes on.
		CallJournal: true,
	}
	b, err := protojson.Marshal(msg)
	if err != nil {
		a.log.Error("encode announcement", "error", err)
		return
	}
	if err := a.nc.Publish(AnnounceSubject, b); err != nil {
		a.log.Debug("announcement not sent", "error", err)
	}
}
