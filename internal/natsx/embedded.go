package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures an in-process NATS server.
type EmbeddedConfig struct {
	// Host to listen on. Default 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free port. `toolfleet dev` uses NATS's usual 4222.
	Port int
	// StoreDir is where JetStream keeps streams, KV buckets and object stores.
	// Empty keeps JetStream in a temporary folder that dies with the process.
	StoreDir string
	// ServerName names the server in JetStream metadata. Default "toolfleet".
	ServerName string
	// ReadyTimeout bounds the wait for the server to accept connections. Default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's notices and errors. Nil discards them.
	Logger *slog.Logger
	// Configure, when set, edits the server's options last, e.g. to require
	// users, tokens, NKeys or TLS (tests of sdk/natsconn do).
	Configure func(*server.Options)
}

// Embedded is a running in-process NATS server with JetStream.
type Embedded struct {
	srv *server.Server
	url string
}

// ErrNotReady is returned when the embedded server does not accept connections in time.
var ErrNotReady = errors.New("natsx: embedded NATS server not ready")

// StartEmbedded starts a NATS server with JetStream in this process and waits until it
// accepts connections. Stop it with Shutdown.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "toolfleet"
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       cfg.Host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		// The embedding process owns signals and shutdown.
		NoSigs: true,
		// Our callers publish protojson bodies and KV values up to a few MiB.
		MaxPayload: 8 << 20,
	}
	if cfg.Configure != nil {
		cfg.Configure(opts)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsx: configure embedded NATS: %w", err)
	}
	if cfg.Logger != nil {
		srv.SetLoggerV2(&slogAdapter{log: cfg.Logger}, false, false, false)
	}
	go srv.Start() // Start returns once the listeners run; ReadyForConnections waits for them.

	deadline := cfg.ReadyTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < deadline {
		deadline = time.Until(d)
	}
	if !srv.ReadyForConnections(deadline) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("%w within %s on %s", ErrNotReady, deadline, net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	}
	return &Embedded{srv: srv, url: srv.ClientURL()}, nil
}

// URL is the client URL, e.g. nats://127.0.0.1:4222.
func (e *Embedded) URL() string { return e.url }

// Addr is the host:port the server listens on.
func (e *Embedded) Addr() string { return e.srv.Addr().String() }

// Shutdown stops the server and waits until it has flushed JetStream to disk.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// slogAdapter forwards the NATS server's logger interface to slog.
type slogAdapter struct{ log *slog.Logger }

func (a *slogAdapter) Noticef(format string, v ...any) { a.log.Info(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.log.Warn(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Fatalf(format string, v ...any)  { a.log.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Errorf(format string, v ...any)  { a.log.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Debugf(format string, v ...any)  { a.log.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any)  { a.log.Debug(fmt.Sprintf(format, v...)) }
