package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/services/gateway/clientinput"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
	"github.com/toolfleet/toolfleet/services/gateway/results"
)

// NATS: the connection, and the JetStream assets and shared state the
// gateway sets up on it (idempotency, events, result handles, the client
// input key, rate limits, store shares), each retried in the background
// until it is ready.

// connectNATS connects (retrying in the background when NATS is away) and starts
// announcements, idempotency and events.
func (g *Gateway) connectNATS(ctx context.Context, bg *sync.WaitGroup) (*nats.Conn, error) {
	nc, err := g.cfg.NATS.Connect(g.cfg.NATSURL, "toolfleet-gateway",
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			g.reg.MarkNATSDown()
			if err == nil {
				return // our own Close at stop
			}
			g.log.Warn("NATS disconnected; keeping the last known registry, queueing events", "error", err)
		}),
		// Workers may have come or gone meanwhile: probe, and warm up again.
		nats.ConnectHandler(func(*nats.Conn) { g.reg.Rediscover() }), // after a failed first connect
		nats.ReconnectHandler(func(*nats.Conn) {
			g.log.Info("NATS reconnected")
			g.reg.Rediscover()
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("gateway: NATS %s: %w", g.cfg.NATSURL, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("gateway: JetStream: %w", err)
	}
	if err := g.reg.WatchAnnouncements(ctx, nc, g.cfg.AnnounceSweep, g.cfg.WarmUp); err != nil {
		nc.Close()
		return nil, fmt.Errorf("gateway: subscribe to announcements: %w", err)
	}
	bg.Go(func() {
		select {
		case <-g.reg.Warm():
			g.registryWarm.Store(true)
			g.markReady()
		case <-ctx.Done():
		}
	})
	g.events = newEvents(g.log, nc, js, g.cfg.EventStreamConfig(), g.cfg.Events.Queue, g.metrics, g.shares)
	g.events.run(ctx)
	idemCfg := g.cfg.IdempotencyConfig()
	if g.shares != nil {
		idemCfg.Share = storeShare{s: g.shares, store: shareCalls}
	}
	setup := func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if g.idemPtr.Load() == nil {
			idem, err := idempotency.New(cctx, g.log, nc, js, idemCfg)
			if err != nil {
				g.setupErr.Store(&err)
				if g.fatal(err) {
					return true
				}
				g.log.Warn("idempotency store not ready; only read-only and idempotent tools run with a call_id until it is", "error", err)
				return false
			}
			g.idemPtr.Store(idem)
		}
		// Ready (for Kubernetes) once the event stream exists too; a later NATS
		// outage does not flip it back (the gateway keeps serving without NATS).
		if err := g.events.ensureStream(cctx); err != nil {
			g.setupErr.Store(&err)
			return g.fatal(err)
		}
		g.setupErr.Store(nil)
		g.assetsReady.Store(true)
		g.markReady()
		return true
	}
	if !nc.IsConnected() || !setup() {
		// The bucket needs NATS up: retry in the background until it is.
		bg.Go(func() { g.retrySetup(ctx, setup) })
	}
	// The result store is optional (only callers allowing a handle need it):
	// readiness does not wait for it.
	attempts := 0
	setupResults := func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		rs, err := results.New(cctx, js, g.cfg.ResultsConfig())
		if err != nil {
			if g.fatal(err) {
				return true
			}
			// Missing NATS permissions would repeat this every second: say it once a minute.
			if attempts++; attempts%60 == 1 {
				g.log.Warn("result store not ready; calls allowing a result handle fail over the inline limit until it is", "error", err)
			}
			return false
		}
		g.resultsPtr.Store(rs)
		return true
	}
	if !nc.IsConnected() || !setupResults() {
		bg.Go(func() { g.retrySetup(ctx, setupResults) })
	}
	if g.sealer.Load() == nil {
		keyAttempts := 0
		setupKey := func() bool {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			key, err := clientinput.SharedKey(cctx, js, g.cfg.InputKeyConfig())
			if err == nil {
				var sl *clientinput.Sealer
				if sl, err = clientinput.New(key); err == nil {
					g.sealer.Store(sl)
					return true
				}
			}
			if g.fatal(err) {
				return true
			}
			if keyAttempts++; keyAttempts%60 == 1 {
				g.log.Warn("input state key not ready; tools asking their caller for input fail until it is", "error", err)
			}
			return false
		}
		if !nc.IsConnected() || !setupKey() {
			bg.Go(func() { g.retrySetup(ctx, setupKey) })
		}
	}
	if g.limits != nil {
		// Until the bucket exists the limits follow Limits.WhenNATSDown.
		limitAttempts := 0
		setupLimits := func() bool {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := g.limits.Attach(cctx, nc, js); err != nil {
				if g.fatal(err) {
					return true
				}
				if limitAttempts++; limitAttempts%60 == 1 {
					g.log.Warn("rate limit bucket not ready; limits follow --limits-when-nats-down until it is", "error", err)
				}
				return false
			}
			return true
		}
		if !nc.IsConnected() || !setupLimits() {
			bg.Go(func() { g.retrySetup(ctx, setupLimits) })
		}
	}
	if g.shares != nil {
		shareAttempts := 0
		setupShares := func() bool {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := g.shares.attach(cctx, nc, js); err != nil {
				if g.fatal(err) {
					return true
				}
				if shareAttempts++; shareAttempts%60 == 1 {
					g.log.Warn("store shares' bucket not ready; each replica counts the shares alone until it is", "error", err)
				}
				return false
			}
			return true
		}
		if !nc.IsConnected() || !setupShares() {
			bg.Go(func() { g.retrySetup(ctx, setupShares) })
		}
	}
	return nc, nil
}

// markReady turns readiness (grpc.health.v1 "", GET /health) SERVING once
// the JetStream assets exist and the registry's first warm-up has ended, so
// that no traffic is routed to a gateway that would answer UNAVAILABLE for
// tools its workers serve. Nothing flips it back but shutdown.
func (g *Gateway) markReady() {
	if g.assetsReady.Load() && g.registryWarm.Load() {
		g.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	}
}

// retrySetup runs setup every second until it succeeds or ctx ends.
func (g *Gateway) retrySetup(ctx context.Context, setup func() bool) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if setup() {
			return
		}
	}
}

// fatal reports whether err is a configuration error that retrying cannot
// mend (a JetStream asset whose storage type the configuration changes), and
// then stops the gateway with it: Run returns err.
func (g *Gateway) fatal(err error) bool {
	if !errors.Is(err, jsassets.ErrUnsupportedChange) {
		return false
	}
	g.log.Error("a JetStream asset cannot be brought to the configuration; stopping", "error", err)
	select {
	case g.fatalErr <- fmt.Errorf("gateway: %w", err):
	default: // one is enough
	}
	return true
}
