// Package delegation wires delegated credentials (package connections) into a
// gateway the way the binaries run it (docs/credentials.md): the service the
// call pipeline takes tokens from, the ConnectionService and the browser flow
// mounted at the gateway's address, authenticated like the gateway's own
// services.
package delegation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
	"github.com/toolfleet/toolfleet/services/gateway/exchange"
)

// Wiring is the delegated credentials of one gateway. The zero value (no
// connections file) adds nothing.
type Wiring struct {
	svc      *connections.Service
	exchange *exchange.Set
	api      *connections.API
	closeFn  func()
	gw       atomic.Pointer[gateway.Gateway]
}

// Open starts the connections of the operator's file (connections.Open) and
// its exchange providers (package exchange); an empty file is no delegation.
func Open(ctx context.Context, file, natsURL string, natsOpts natsconn.Options, assets jsassets.Config, log *slog.Logger) (*Wiring, error) {
	w := &Wiring{}
	if file == "" {
		return w, nil
	}
	cfg, err := connections.LoadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--connections-file: %w", err)
	}
	if len(cfg.Exchanges) > 0 {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if w.exchange, err = exchange.New(sctx, cfg.Exchanges, exchange.Options{Logger: log.With("component", "exchange")}); err != nil {
			return nil, fmt.Errorf("--connections-file: %w", err)
		}
	}
	if len(cfg.Providers) == 0 {
		return w, nil // exchange providers only: nothing to connect to, nothing stored
	}
	if natsURL == "" {
		return nil, fmt.Errorf("--connections-file: its providers need --nats-url: principals' connections are kept in a NATS KV bucket (exchange providers alone need none)")
	}
	svc, closeFn, err := connections.Open(ctx, cfg, natsURL, natsOpts, assets, log)
	if err != nil {
		return nil, fmt.Errorf("--connections-file: %w", err)
	}
	w.svc, w.closeFn = svc, closeFn
	w.api = connections.NewAPI(svc, func(ctx context.Context, h http.Header) (string, error) {
		g := w.gw.Load()
		if g == nil {
			return "", errors.New("the gateway is starting")
		}
		p, err := g.Authenticate(ctx, h.Get("Authorization"))
		if err != nil {
			return "", err
		}
		return p.ID(), nil
	})
	return w, nil
}

// Mounts are the ConnectionService and the browser flow (gateway.Config.Mounts).
func (w *Wiring) Mounts() []gateway.Mount {
	if w.svc == nil {
		return nil
	}
	return []gateway.Mount{
		{Pattern: w.api.Pattern(), Handler: w.api.Handler()},
		{Pattern: "/connections/", Handler: w.svc.Handler()},
	}
}

// API is the ConnectionService in process (MCP tasks make connect links
// with it), nil without connections.
func (w *Wiring) API() *connections.API { return w.api }

// Tokens is gateway.Config.Connections: nil without a connections file.
func (w *Wiring) Tokens() gateway.TokenSource {
	if w.svc == nil {
		return nil
	}
	return w.svc
}

// Exchange is gateway.Config.Exchange: nil without exchange providers.
func (w *Wiring) Exchange() gateway.Exchanger {
	if w.exchange == nil {
		return nil
	}
	return w.exchange
}

// ResumeWith sets what a connection made through the browser flow resumes
// (connections.Resumer: the runs' and programs' services); call it before
// the gateway serves.
func (w *Wiring) ResumeWith(rs ...connections.Resumer) {
	if w.svc != nil {
		w.svc.ResumeWith(rs...)
	}
}

// Serving lets the ConnectionService authenticate callers with g, once g exists.
func (w *Wiring) Serving(g *gateway.Gateway) { w.gw.Store(g) }

// Close ends the connections' NATS connection.
func (w *Wiring) Close() {
	if w != nil && w.closeFn != nil {
		w.closeFn()
	}
}
