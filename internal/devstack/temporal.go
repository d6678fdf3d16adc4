package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	tlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
)

// TemporalConfig configures an in-process Temporal server (frontend, history, matching
// and worker services) on SQLite, or on PostgreSQL when asked.
type TemporalConfig struct {
	// Host to bind every Temporal service to. Default 127.0.0.1.
	Host string
	// Port of the frontend gRPC API; 0 picks a free port. `toolfleet dev` uses 7233.
	Port int
	// HTTPPort of the frontend HTTP API; 0 picks a free port.
	HTTPPort int
	// DatabaseFile is the SQLite file. Empty keeps the database in memory (tests).
	DatabaseFile string
	// Postgres, when set, holds both stores instead of SQLite (DatabaseFile is
	// then unused): the visibility store production deployments run, for
	// measurements against it.
	Postgres *PostgresStore
	// Namespaces to create when missing. Default ["default"].
	Namespaces []string
	// DynamicConfig overrides the tuned defaults (see LatencyTunedDynamicConfig).
	DynamicConfig map[string]any
	// Stock disables the latency tuning, for before/after measurements.
	Stock bool
	// Logger receives the server's warnings and errors. Nil discards them.
	Logger *slog.Logger
	// LogLevel is the least level forwarded to Logger. Default Warn: the server is chatty.
	LogLevel slog.Level
}

// Temporal is a running in-process Temporal server.
type Temporal struct {
	srv       temporal.Server
	log       *slogLogger
	address   string
	namespace []string
}

// ClusterName is the name of the single-node cluster the dev stack runs.
const ClusterName = "active"

// clusterID is fixed so that a restart on the same database is the same cluster
// (Temporal wants a UUID and would otherwise generate one at every start).
const clusterID = "5f0c6a2e-7d2b-4c1e-9a0f-3b8e2d7c4a10"

// LatencyTunedDynamicConfig is the dynamic config the dev stack runs Temporal with.
//
// The stock settings are made for throughput on a shared cluster. With them every
// transfer task (the one that hands a new workflow or activity task to matching) waits
// for the queue reader, which is rate limited to 20 polls per second per shard; on a
// one-shard dev server that puts ~50-100 ms on every workflow step. Raising the poll
// rates lets the reader pick tasks up as soon as they are written. The history
// long-poll interval is cut so that a missed wake-up costs 200 ms, not 20 s. See
// docs/performance.md for the before/after numbers.
func LatencyTunedDynamicConfig() map[string]any {
	return map[string]any{
		dynamicconfig.TransferProcessorMaxPollRPS.Key().String():       10000,
		dynamicconfig.TransferProcessorMaxPollHostRPS.Key().String():   10000,
		dynamicconfig.TimerProcessorMaxPollRPS.Key().String():          10000,
		dynamicconfig.TimerProcessorMaxPollHostRPS.Key().String():      10000,
		dynamicconfig.VisibilityProcessorMaxPollRPS.Key().String():     10000,
		dynamicconfig.VisibilityProcessorMaxPollHostRPS.Key().String(): 10000,
		dynamicconfig.OutboundProcessorMaxPollRPS.Key().String():       10000,
		dynamicconfig.OutboundProcessorMaxPollHostRPS.Key().String():   10000,
		// A history long poll (client.WorkflowRun.Get) is woken through a capacity-1
		// channel with a non-blocking send; in a burst of updates the close notification
		// can be dropped (~1% of short workflows here), and the poll then sleeps for this
		// interval: 20 s by default. Re-polling every 200 ms bounds that miss; the cost
		// is a cheap cached mutable-state read per waiter per interval.
		// TestHistoryNotifierDropsBurst pins the cause down.
		dynamicconfig.HistoryLongPollExpirationInterval.Key().String(): 200 * time.Millisecond,
		// Listing and counting runs (the console's pages, agent list) are
		// visibility calls, limited to 10 a second per namespace by default: a
		// page over the limit waited 200-400 ms in the client's retries (the
		// console's p95 in docs/performance.md). 200 a second leaves room for a
		// few people paging at once.
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key().String(): 200,
	}
}

// dynamicConfig is the dynamic config a server of cfg runs with: the tuned
// one (unless cfg.Stock), then cfg's overrides.
func dynamicConfig(cfg TemporalConfig) dynamicconfig.StaticClient {
	dyn := dynamicconfig.StaticClient{}
	if !cfg.Stock {
		for k, v := range LatencyTunedDynamicConfig() {
			dyn[dynamicconfig.MakeKey(k)] = v
		}
	}
	for k, v := range cfg.DynamicConfig {
		dyn[dynamicconfig.MakeKey(k)] = v
	}
	return dyn
}

// StartTemporal starts a Temporal server in this process and returns once the frontend
// accepts connections. Stop it with Stop.
func StartTemporal(ctx context.Context, cfg TemporalConfig) (*Temporal, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if len(cfg.Namespaces) == 0 {
		cfg.Namespaces = []string{"default"}
	}
	// The free ports are found, released, then bound by the server: another
	// process may take one in between (parallel test binaries do). Such a
	// start is tried again on other ports, a bounded number of times.
	for attempt := 1; ; attempt++ {
		t, err := startTemporalOnce(ctx, cfg)
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			return t, err
		}
	}
}

// errPortTaken: a port found free was taken before the server bound it.
var errPortTaken = errors.New("devstack: a Temporal port was taken before the server bound it")

// portTaken marks err errPortTaken when a listen failed on a taken port: the
// frontend's HTTP API reports that as an error (its gRPC ports panic, see
// startTemporalOnce), through fx's wrapping, which keeps only the text.
func portTaken(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use") {
		return fmt.Errorf("%w: %w", errPortTaken, err)
	}
	return err
}

func startTemporalOnce(ctx context.Context, cfg TemporalConfig) (_ *Temporal, err error) {
	defer func() {
		// Temporal's RPC factory reports a failed listen with logger.Fatal,
		// which panics in slogLogger.
		if r := recover(); r != nil {
			if msg, ok := r.(string); ok && msg == listenFailed {
				err = errPortTaken
				return
			}
			panic(r)
		}
	}()
	ports, err := freePorts(cfg.Host, 5)
	if err != nil {
		return nil, err
	}
	if cfg.Port == 0 {
		cfg.Port = ports[0]
	}
	if cfg.HTTPPort == 0 {
		cfg.HTTPPort = ports[1]
	}
	hostPort := func(p int) string { return net.JoinHostPort(cfg.Host, strconv.Itoa(p)) }
	frontend := hostPort(cfg.Port)
	servicePorts := map[primitives.ServiceName]int{
		primitives.FrontendService: cfg.Port,
		primitives.HistoryService:  ports[2],
		primitives.MatchingService: ports[3],
		primitives.WorkerService:   ports[4],
	}

	logger := &slogLogger{log: cfg.Logger, min: cfg.LogLevel, silent: new(atomic.Bool)}
	if cfg.Logger == nil {
		logger.log = slog.New(slog.DiscardHandler)
	}
	if cfg.LogLevel == 0 {
		logger.min = slog.LevelWarn
	}

	conf := &config.Config{}
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = cfg.Host
	conf.Persistence.NumHistoryShards = 1
	if cfg.Postgres != nil {
		def, vis, err := cfg.Postgres.prepare(logger)
		if err != nil {
			return nil, err
		}
		if err := createNamespaces(def, cfg.Namespaces); err != nil {
			return nil, err
		}
		conf.Persistence.DefaultStore = "postgres"
		conf.Persistence.VisibilityStore = "postgres-visibility"
		conf.Persistence.DataStores = map[string]config.DataStore{"postgres": {SQL: def}, "postgres-visibility": {SQL: vis}}
	} else {
		sqlCfg, err := sqliteConfig(cfg)
		if err != nil {
			return nil, err
		}
		conf.Persistence.DefaultStore = "sqlite"
		conf.Persistence.VisibilityStore = "sqlite"
		conf.Persistence.DataStores = map[string]config.DataStore{"sqlite": {SQL: sqlCfg}}
	}
	conf.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        ClusterName,
		CurrentClusterName:       ClusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			ClusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             frontend,
				HTTPAddress:            hostPort(cfg.HTTPPort),
				ClusterID:              clusterID,
			},
		},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	conf.Services = map[string]config.Service{}
	hosts := map[primitives.ServiceName]static.Hosts{}
	for name, port := range servicePorts {
		svc := config.Service{}
		svc.RPC.GRPCPort = port
		svc.RPC.BindOnIP = cfg.Host
		if name == primitives.FrontendService {
			svc.RPC.HTTPPort = cfg.HTTPPort
		}
		conf.Services[string(name)] = svc
		hosts[name] = static.SingleLocalHost(hostPort(port))
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	conf.PublicClient.HostPort = frontend

	dyn := dynamicConfig(cfg)

	authorizer, err := authorization.GetAuthorizerFromConfig(&conf.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("devstack: temporal authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&conf.Global.Authorization, logger)
	if err != nil {
		return nil, fmt.Errorf("devstack: temporal claim mapper: %w", err)
	}
	srv, err := temporal.NewServer(
		temporal.WithConfig(conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(hosts),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithDynamicConfigClient(dyn),
	)
	if err != nil {
		return nil, portTaken(fmt.Errorf("devstack: configure temporal: %w", err))
	}
	if err := srv.Start(); err != nil {
		return nil, portTaken(fmt.Errorf("devstack: start temporal: %w", err))
	}
	t := &Temporal{srv: srv, log: logger, address: frontend, namespace: cfg.Namespaces}
	if err := waitListening(ctx, frontend, 30*time.Second); err != nil {
		t.Stop()
		return nil, err
	}
	return t, nil
}

// Address is the frontend's host:port, e.g. 127.0.0.1:7233.
func (t *Temporal) Address() string { return t.address }

// Namespaces lists the namespaces the server was started with.
func (t *Temporal) Namespaces() []string { return t.namespace }

// Stop stops every Temporal service. The SQLite file, if any, keeps the data.
func (t *Temporal) Stop() {
	// Services stopping one after another log each other's disappearance as errors;
	// none of that is news to whoever asked for the stop.
	t.log.silence()
	if err := t.srv.Stop(); err != nil {
		slog.Default().Debug("devstack: temporal stop", "error", err)
	}
}

func sqliteConfig(cfg TemporalConfig) (*config.SQL, error) {
	sqlCfg := &config.SQL{PluginName: sqliteplugin.PluginName}
	if cfg.DatabaseFile == "" {
		sqlCfg.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
		// A random name: two in-memory servers in one process must not share a database.
		sqlCfg.DatabaseName = "toolfleet-" + strconv.FormatUint(rand.Uint64(), 36)
	} else {
		sqlCfg.ConnectAttributes = map[string]string{"mode": "rwc", "journal_mode": "wal", "synchronous": "2"}
		sqlCfg.DatabaseName = cfg.DatabaseFile
		if _, err := os.Stat(cfg.DatabaseFile); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(filepath.Dir(cfg.DatabaseFile), 0o755); err != nil {
				return nil, fmt.Errorf("devstack: temporal data folder: %w", err)
			}
			if err := sqliteschema.SetupSchema(sqlCfg); err != nil {
				return nil, fmt.Errorf("devstack: temporal schema: %w", err)
			}
		}
	}
	if err := createNamespaces(sqlCfg, cfg.Namespaces); err != nil {
		return nil, err
	}
	return sqlCfg, nil
}

// createNamespaces creates the missing ones of names in the default store
// sqlCfg, so a restart on the same database keeps the data. The SQLite schema
// package does it through the plugin-neutral SQL persistence interface, so it
// serves PostgreSQL too.
func createNamespaces(sqlCfg *config.SQL, names []string) error {
	namespaces := make([]*sqliteschema.NamespaceConfig, 0, len(names))
	for _, ns := range names {
		nsCfg, err := sqliteschema.NewNamespaceConfig(ClusterName, ns, false, nil)
		if err != nil {
			return fmt.Errorf("devstack: namespace %q: %w", ns, err)
		}
		namespaces = append(namespaces, nsCfg)
	}
	if err := sqliteschema.CreateNamespaces(sqlCfg, namespaces...); err != nil {
		return fmt.Errorf("devstack: create namespaces: %w", err)
	}
	return nil
}

// listenFailed is the message of Temporal's logger.Fatal when a service cannot
// bind its port (go.temporal.io/server common/rpc).
const listenFailed = "Failed to start gRPC listener"

// freePorts reserves n distinct free TCP ports on host. They are released before
// return, so another process could take one in between; on loopback in tests that
// window is small enough.
func freePorts(host string, n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("devstack: find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func waitListening(ctx context.Context, addr string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devstack: %s not listening: %w", addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// slogLogger adapts slog to Temporal's logger interface.
type slogLogger struct {
	log    *slog.Logger
	min    slog.Level
	tags   []tag.Tag
	silent *atomic.Bool // shared by every logger derived with With
}

func (l *slogLogger) silence() { l.silent.Store(true) }

var _ tlog.Logger = (*slogLogger)(nil)

func (l *slogLogger) emit(level slog.Level, msg string, tags []tag.Tag) {
	if level < l.min || l.silent.Load() || !l.log.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]slog.Attr, 0, len(l.tags)+len(tags)+1)
	attrs = append(attrs, slog.String("server", "temporal"))
	for _, t := range append(l.tags, tags...) {
		attrs = append(attrs, slog.Any(t.Key(), t.Value()))
	}
	l.log.LogAttrs(context.Background(), level, msg, attrs...)
}

func (l *slogLogger) Debug(msg string, tags ...tag.Tag)  { l.emit(slog.LevelDebug, msg, tags) }
func (l *slogLogger) Info(msg string, tags ...tag.Tag)   { l.emit(slog.LevelInfo, msg, tags) }
func (l *slogLogger) Warn(msg string, tags ...tag.Tag)   { l.emit(slog.LevelWarn, msg, tags) }
func (l *slogLogger) Error(msg string, tags ...tag.Tag)  { l.emit(slog.LevelError, msg, tags) }
func (l *slogLogger) DPanic(msg string, tags ...tag.Tag) { l.emit(slog.LevelError, msg, tags) }
func (l *slogLogger) Panic(msg string, tags ...tag.Tag) {
	l.emit(slog.LevelError, msg, tags)
	panic(msg)
}
func (l *slogLogger) Fatal(msg string, tags ...tag.Tag) {
	l.emit(slog.LevelError, msg, tags)
	panic(msg)
}

// With returns a logger that adds tags to every record.
func (l *slogLogger) With(tags ...tag.Tag) tlog.Logger {
	return &slogLogger{log: l.log, min: l.min, silent: l.silent, tags: append(append([]tag.Tag(nil), l.tags...), tags...)}
}
