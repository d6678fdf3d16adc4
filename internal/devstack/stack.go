package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uiserveroptions "github.com/temporalio/ui-server/v2/server/server_options"

	"github.com/toolfleet/toolfleet/internal/natsx"
)

// Config configures a dev stack. The zero value is a temporary stack on free loopback
// ports without the UI, which is what tests want.
type Config struct {
	// Host every server binds to. Default 127.0.0.1.
	Host string
	// DataDir keeps NATS JetStream (DataDir/nats) and Temporal (DataDir/temporal.db).
	// Empty means temporary: JetStream in a temp folder, Temporal in memory.
	DataDir string
	// NATSPort for NATS clients; 0 = a free port. Dev default: 4222.
	NATSPort int
	// TemporalPort of the Temporal frontend gRPC API; 0 = a free port. Dev default: 7233.
	TemporalPort int
	// TemporalHTTPPort of the Temporal frontend HTTP API; 0 = a free port.
	TemporalHTTPPort int
	// UIPort serves the Temporal Web UI; 0 = no UI. Dev default: 8233.
	UIPort int
	// Namespace is the Temporal namespace created at start. Default "default".
	Namespace string
	// NoTemporal starts NATS only (for tests that need no workflows).
	NoTemporal bool
	// TemporalPostgres, when set, runs Temporal on this PostgreSQL server
	// instead of SQLite (see TemporalConfig.Postgres).
	TemporalPostgres *PostgresStore
	// TemporalDynamicConfig overrides Temporal's dynamic config on top of the
	// tuned defaults (see TemporalConfig.DynamicConfig).
	TemporalDynamicConfig map[string]any
	// StockTemporal runs Temporal with its stock dynamic config (for measurements).
	StockTemporal bool
	// Logger for the stack's own messages and the servers' warnings. Nil discards.
	Logger *slog.Logger
	// NATSConfigure, when set, edits the NATS server's options, e.g. to require
	// credentials (natsx.RequireAuth).
	NATSConfigure func(*server.Options)
}

// Stack is a running dev stack.
type Stack struct {
	NATS     *natsx.Embedded
	Temporal *Temporal // nil with Config.NoTemporal
	cfg      Config
	ui       *uiserver.Server
	tmpDir   string
}

// Start brings up NATS and Temporal (and the UI when asked) and returns when they
// accept connections. On error, whatever was started is stopped again.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Stack{cfg: cfg}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()

	natsStore := ""
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("devstack: data folder: %w", err)
		}
		natsStore = filepath.Join(cfg.DataDir, "nats")
	} else {
		if s.tmpDir, err = os.MkdirTemp("", "toolfleet-devstack-*"); err != nil {
			return nil, fmt.Errorf("devstack: temp folder: %w", err)
		}
		natsStore = s.tmpDir
	}
	s.NATS, err = natsx.StartEmbedded(ctx, natsx.EmbeddedConfig{
		Host:      cfg.Host,
		Port:      cfg.NATSPort,
		StoreDir:  natsStore,
		Logger:    cfg.Logger.With("server", "nats"),
		Configure: cfg.NATSConfigure,
	})
	if err != nil {
		return nil, err
	}
	if cfg.NoTemporal {
		return s, nil
	}

	tcfg := TemporalConfig{
		Host:       cfg.Host,
		Port:       cfg.TemporalPort,
		HTTPPort:   cfg.TemporalHTTPPort,
		Namespaces: []string{cfg.Namespace},
		Stock:      cfg.StockTemporal,
		Logger:     cfg.Logger,
		Postgres:   cfg.TemporalPostgres,
	}
	tcfg.DynamicConfig = cfg.TemporalDynamicConfig
	if cfg.DataDir != "" {
		tcfg.DatabaseFile = filepath.Join(cfg.DataDir, "temporal.db")
	}
	if s.Temporal, err = StartTemporal(ctx, tcfg); err != nil {
		return nil, err
	}
	if cfg.UIPort != 0 {
		if err := s.startUI(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// UIAddress is the Temporal Web UI's URL, or "" when the UI is off.
func (s *Stack) UIAddress() string {
	if s.ui == nil {
		return ""
	}
	return "http://" + net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.UIPort))
}

// Namespace is the Temporal namespace the stack created.
func (s *Stack) Namespace() string { return s.cfg.Namespace }

// Stop stops everything that was started, in reverse order. It is safe to call on a
// partly started stack.
func (s *Stack) Stop() {
	if s.ui != nil {
		s.ui.Stop()
	}
	if s.Temporal != nil {
		s.Temporal.Stop()
	}
	if s.NATS != nil {
		s.NATS.Shutdown()
	}
	if s.tmpDir != "" {
		_ = os.RemoveAll(s.tmpDir)
	}
}

func (s *Stack) startUI(ctx context.Context) error {
	addr := net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.UIPort))
	// The UI server exits the whole process when it cannot listen, so make sure the
	// port is free first and turn that case into an error.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("devstack: temporal UI port: %w", err)
	}
	_ = l.Close()
	s.ui = uiserver.NewServer(uiserveroptions.WithConfigProvider(&uiconfig.Config{
		Host:                s.cfg.Host,
		Port:                s.cfg.UIPort,
		TemporalGRPCAddress: s.Temporal.Address(),
		EnableUI:            true,
		CORS:                uiconfig.CORS{CookieInsecure: true},
		HideLogs:            true,
		DisableNewsFetch:    true,
	}))
	ui := s.ui
	go func() {
		// Start blocks until Stop; its only error is a bad config, logged here.
		if err := ui.Start(); err != nil {
			s.cfg.Logger.Error("temporal UI stopped", "error", err)
		}
	}()
	if err := waitListening(ctx, addr, 10*time.Second); err != nil {
		return errors.Join(errors.New("devstack: temporal UI did not start"), err)
	}
	return nil
}
