package connections

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// Open is how a binary starts the service from the operator's connections
// file (cfg from [LoadFile]): its own NATS connection (retrying in the
// background while NATS is away), the bucket sized by assets
// (jsassets.Connections). close ends the NATS connection.
func Open(ctx context.Context, cfg Config, natsURL string, natsOpts natsconn.Options, assets jsassets.Config, log *slog.Logger) (_ *Service, closeFn func(), _ error) {
	nc, err := natsOpts.Connect(natsURL, "toolfleet-gateway-connections", nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("connections: NATS %s: %w", natsURL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("connections: JetStream: %w", err)
	}
	cfg.Bucket = assets.Settings(jsassets.Connections).KeyValue(jetstream.KeyValueConfig{Bucket: jsassets.Connections.Name,
		Description: "toolfleet gateway: principals' delegated credentials (sealed) and unfinished connects"})
	cfg.Logger = log.With("component", "connections")
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	svc, err := New(sctx, js, cfg)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return svc, nc.Close, nil
}
