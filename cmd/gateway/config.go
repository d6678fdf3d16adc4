package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/toolfleet/toolfleet/internal/config"
	"github.com/toolfleet/toolfleet/internal/loopback"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/clientinput"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
	"github.com/toolfleet/toolfleet/services/gateway/results"
)

// envPrefix is the prefix of every environment variable of this binary, shared with
// the workers so that one ConfigMap can hold TOOLFLEET_NATS_URL for all of them.
const envPrefix = "TOOLFLEET"

// maxSecretFileBytes bounds a secret or key file read at start: a JWT secret or a
// JWKS is a few KiB, and a mistaken path must not be read into memory whole.
const maxSecretFileBytes = 1 << 20

// Config is the whole configuration of the gateway binary, from flags and env.
type Config struct {
	// Tracing is set by run from internal/telemetry (the OTEL_* environment), not a flag.
	Tracing bool
	Listen  string
	NATSURL string
	// NATS holds NATS credentials and TLS (--nats-creds, --nats-ca, ...).
	NATS natsconn.Options
	// WorkerTLS dials workers with TLS or mTLS (--worker-tls, --worker-ca, ...).
	WorkerTLS gateway.WorkerTLSConfig
	// Workers are static worker addresses (host:port); any gRPC service with
	// server reflection, e.g. a Kubernetes Service name.
	Workers []string

	// AuthDisabled turns bearer tokens off; only allowed on a loopback Listen.
	AuthDisabled bool
	// HS256SecretFile holds the shared secret of HS256 tokens (a mounted Secret).
	HS256SecretFile string
	// JWKSFile and JWKSURL hold RS256/ES256 public keys.
	JWKSFile string
	JWKSURL  string
	Audience string
	Issuer   string

	DefaultTimeout    time.Duration
	StartedEventAfter time.Duration
	WarmUp            time.Duration
	MaxResultBytes    int64
	IdempotencyTTL    time.Duration
	// IdempotencyFileStorage is the deprecated --idempotency-file-storage:
	// file storage is the default now; accepted and ignored.
	IdempotencyFileStorage bool
	// Assets are the JetStream asset settings (--js-replicas, --js-storage,
	// --js-profile, --js-overrides; package sdk/jsassets).
	Assets jsassets.Config
	// Result handles (docs/gateway.md "Large results: handles").
	ResultTTL           time.Duration
	ResultMaxBytes      int64
	ResultStoreMaxBytes int64
	ResultHandleCalls   int
	// StoreShare is --store-share (gateway.ParseStoreShare).
	StoreShare string

	// Request limits and browser safety (docs/gateway.md "Limits", "Browser safety").
	MaxRequestBytes      int64
	MaxInputValues       int
	MaxBatchCalls        int
	BatchParallelism     int
	MaxConcurrentStreams uint32
	AllowedOrigins       []string
	PublicURL            string

	// Rate limits and quotas (docs/operations.md "Rate limits and quotas").
	LimitsFile         string
	LimitsWhenNATSDown string
	LimitsLeaseTTL     time.Duration
	LimitsMaxKeys      int
	// limitRules are the rules read from LimitsFile by validate.
	limitRules []ratelimit.Rule

	// InputStateKeyFile holds the 32-byte key sealing the request_state of
	// calls that ask their caller for input (docs/gateway.md).
	InputStateKeyFile string
	inputStateKey     []byte

	// ConnectionsFile configures delegated credentials (docs/credentials.md).
	ConnectionsFile string

	// Orchestration serves AgentService and ProgramService (--temporal-address, ...).
	Orchestration OrchestrationConfig

	// ShutdownTimeout bounds the graceful stop; keep it below the pod's
	// terminationGracePeriodSeconds so in-flight calls finish before SIGKILL.
	ShutdownTimeout time.Duration
	LogLevel        string
	LogFormat       string
	// Console is the run console (--console, --console-oidc-*; console.go).
	Console consoleConfig
}

// flags binds cfg to a new flag set, with the defaults of a gateway that is safe to
// start by hand (loopback only).
func flags(cfg *Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("gateway", pflag.ContinueOnError)
	fs.StringVar(&cfg.Listen, "listen", gateway.DefaultListen, "host:port of the one plaintext h2c port: gRPC, Connect, gRPC-Web, OXP HTTP, /metrics, grpc.health.v1")
	fs.StringVar(&cfg.NATSURL, "nats-url", "", "NATS URL for worker announcements, idempotency and call events; empty = static workers only")
	fs.StringSliceVar(&cfg.Workers, "workers", nil, "static worker addresses host:port, comma-separated (any gRPC service with server reflection)")
	fs.BoolVar(&cfg.AuthDisabled, "auth-disabled", false, "serve without bearer tokens (refused unless --listen is loopback)")
	fs.StringVar(&cfg.HS256SecretFile, "jwt-hs256-secret-file", "", "file holding the HS256 shared secret of bearer tokens")
	fs.StringVar(&cfg.JWKSFile, "jwt-jwks-file", "", "file holding a JSON Web Key Set (RS256/ES256 public keys)")
	fs.StringVar(&cfg.JWKSURL, "jwt-jwks-url", "", "https URL of a JSON Web Key Set (RS256/ES256 public keys)")
	fs.StringVar(&cfg.Audience, "jwt-audience", "", "audience every token must carry; empty = not checked")
	fs.StringVar(&cfg.Issuer, "jwt-issuer", "", "issuer every token must carry; empty = not checked")
	fs.DurationVar(&cfg.DefaultTimeout, "default-timeout", gateway.DefaultTimeout, "call timeout of tools whose contract sets none")
	fs.DurationVar(&cfg.StartedEventAfter, "started-event-after", gateway.DefaultStartedEventAfter, "a call still running after this publishes a started event (faster calls publish only their terminal event); 0: every call publishes started")
	fs.DurationVar(&cfg.WarmUp, "warm-up", gateway.DefaultWarmUp, "with --nats-url: how long after start (and after a NATS reconnect) a tool that does not resolve is UNAVAILABLE (retryable) instead of NOT_FOUND while workers answer the discovery probe; readiness waits for it")
	fs.Int64Var(&cfg.MaxResultBytes, "max-result-bytes", gateway.DefaultMaxResultBytes, "result size limit of tools whose contract sets none")
	fs.DurationVar(&cfg.IdempotencyTTL, "idempotency-ttl", 0, "how long finished call results are kept for retries; 0: the max age of the toolfleet_calls asset (24h)")
	fs.BoolVar(&cfg.IdempotencyFileStorage, "idempotency-file-storage", true, "deprecated: finished call results are on disk by default; memory only with --js-overrides toolfleet_calls.storage=memory")
	_ = fs.MarkDeprecated("idempotency-file-storage", "file storage is the default; use --js-overrides toolfleet_calls.storage=memory to ask for memory")
	fs.DurationVar(&cfg.ResultTTL, "result-ttl", 0, "how long a result kept behind a result handle can be fetched; 0: the max age of the toolfleet_results asset (1h)")
	fs.Int64Var(&cfg.ResultMaxBytes, "result-max-bytes", gateway.DefaultResultMaxBytes, "ceiling on one result kept behind a handle; a larger result fails the call")
	fs.IntVar(&cfg.ResultHandleCalls, "result-handle-calls", gateway.DefaultResultHandleCalls, "calls allowing a result handle that run at once (each may hold up to --result-max-bytes in memory); more wait up to 5s, then are refused")
	fs.StringVar(&cfg.StoreShare, "store-share", "", "the part of each store a caller writes (toolfleet_calls, toolfleet_results, TOOLFLEET_CALL_EVENTS) one principal may hold, e.g. 1/8, 0.125 or 12.5%; over it, its new entries are refused (docs/operations.md \"Store shares\"); empty: 1/8; none: no share")
	fs.Int64Var(&cfg.ResultStoreMaxBytes, "result-store-max-bytes", 0, "bound of the result handles' JetStream object store; when full, new handles are refused until results expire; 0: the byte bound of the toolfleet_results asset (1GiB; 64MiB with --js-profile dev)")
	fs.Int64Var(&cfg.MaxRequestBytes, "max-request-bytes", gateway.DefaultMaxRequestBytes, "size limit of one request body or message on every surface, checked before decoding")
	fs.IntVar(&cfg.MaxInputValues, "max-input-values", gateway.DefaultMaxInputValues, "JSON values (elements, members) one JSON request may hold, counted before decoding")
	fs.IntVar(&cfg.MaxBatchCalls, "max-batch-calls", gateway.DefaultMaxBatchCalls, "calls one CallTools request may hold; larger batches are refused whole")
	fs.IntVar(&cfg.BatchParallelism, "batch-parallelism", gateway.DefaultBatchParallelism, "calls of one CallTools request running at once")
	fs.Uint32Var(&cfg.MaxConcurrentStreams, "max-concurrent-streams", gateway.DefaultMaxConcurrentStreams, "RPCs in flight on one HTTP/2 connection")
	fs.StringVar(&cfg.PublicURL, "public-url", "", "the gateway's origin as clients reach it (https://tools.example.com), named in the OAuth protected-resource metadata (RFC 9728); default: each request's scheme and Host")
	fs.StringSliceVar(&cfg.AllowedOrigins, "allowed-origins", nil, "browser origins (https://console.example.com) allowed to make state-changing requests and to use /mcp; default none")
	fs.StringVar(&cfg.LimitsFile, "limits-file", "", "YAML or JSON file of rate limits and quotas per principal and per tool (docs/operations.md); empty: no limits")
	fs.StringVar(&cfg.InputStateKeyFile, "input-state-key-file", "", "file of the 32-byte key (raw, base64 or hex) sealing the request_state of tools asking their caller for input; the same on every replica; empty: shared through NATS KV (toolfleet_input_key), or per process without NATS")
	fs.StringVar(&cfg.LimitsWhenNATSDown, "limits-when-nats-down", ratelimit.Local, "what the limits do while NATS is away: local (each replica enforces them alone), open (admit every call) or closed (refuse calls a rule applies to)")
	fs.DurationVar(&cfg.LimitsLeaseTTL, "limits-lease-ttl", ratelimit.DefaultLeaseTTL, "how long a replica's running calls count toward a concurrency limit after its last renewal (a dead replica's lapse after it)")
	fs.IntVar(&cfg.LimitsMaxKeys, "limits-max-keys", ratelimit.DefaultMaxKeys, "(limit, rule, principal) keys one replica tracks; past it idle ones are evicted, and new principals refused while all are in use")
	fs.StringVar(&cfg.ConnectionsFile, "connections-file", "", "JSON file of the OAuth providers principals connect their accounts at, for tools that act with them (docs/credentials.md); its providers need --nats-url (exchange providers alone do not); empty: such tools are refused")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "bound of the graceful stop on SIGTERM; keep it below the pod's termination grace period")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "least level logged: debug, info, warn, error")
	fs.StringVar(&cfg.LogFormat, "log-format", "json", "log format on stderr: json or text")
	cfg.Orchestration.addFlags(fs)
	cfg.NATS.AddFlags(fs)
	cfg.Assets.AddFlags(fs)
	cfg.WorkerTLS.AddFlags(fs)
	cfg.Console.addFlags(fs)
	config.BindEnv(fs, envPrefix)
	return fs
}

// parse reads args, then the environment for flags not given, and validates.
func parse(args []string) (Config, error) {
	var cfg Config
	fs := flags(&cfg)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args())
	}
	if err := config.ApplyEnv(fs, envPrefix); err != nil {
		return cfg, err
	}
	return cfg, cfg.validate()
}

// validate checks everything that can be checked before starting, so that a bad
// ConfigMap fails the pod at once with a message naming the setting.
func (c *Config) validate() error {
	var errs []error
	if _, port, err := net.SplitHostPort(c.Listen); err != nil || port == "" {
		errs = append(errs, fmt.Errorf("--listen %q: want host:port", c.Listen))
	}
	if c.NATSURL != "" && !hasScheme(c.NATSURL, "nats", "tls", "ws", "wss") {
		errs = append(errs, fmt.Errorf("--nats-url %q: want nats://HOST:PORT (or tls://, ws://, wss://)", c.NATSURL))
	}
	for _, w := range c.Workers {
		if host, port, err := net.SplitHostPort(w); err != nil || host == "" || port == "" {
			errs = append(errs, fmt.Errorf("--workers: %q is not host:port", w))
		}
	}
	if c.NATSURL == "" && len(c.Workers) == 0 {
		errs = append(errs, errors.New("no workers: set --nats-url (announced workers) and/or --workers (static ones)"))
	}
	keys := 0
	for _, s := range []string{c.HS256SecretFile, c.JWKSFile, c.JWKSURL} {
		if s != "" {
			keys++
		}
	}
	switch {
	case c.AuthDisabled && keys > 0:
		errs = append(errs, errors.New("--auth-disabled and a JWT key source are both set: pick one"))
	case c.AuthDisabled && !loopback.Listen(c.Listen):
		errs = append(errs, fmt.Errorf("--auth-disabled is refused on --listen %s: without tokens the gateway may only listen on loopback", c.Listen))
	case !c.AuthDisabled && keys != 1:
		errs = append(errs, errors.New("auth needs exactly one of --jwt-hs256-secret-file, --jwt-jwks-file, --jwt-jwks-url (or --auth-disabled on a loopback --listen)"))
	}
	if c.JWKSURL != "" && !hasScheme(c.JWKSURL, "https") {
		errs = append(errs, fmt.Errorf("--jwt-jwks-url %q: keys are fetched over https only", c.JWKSURL))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{{"default-timeout", c.DefaultTimeout}, {"shutdown-timeout", c.ShutdownTimeout}} {
		if d.value <= 0 {
			errs = append(errs, fmt.Errorf("--%s %s: must be positive", d.flag, d.value))
		}
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{{"idempotency-ttl", c.IdempotencyTTL}, {"result-ttl", c.ResultTTL}} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("--%s %s: must be positive, or 0 for the JetStream asset's max age", d.flag, d.value))
		}
	}
	if err := c.Assets.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Orchestration.validate(c.NATSURL); err != nil {
		errs = append(errs, err)
	}
	if err := c.NATS.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxResultBytes <= 0 {
		errs = append(errs, fmt.Errorf("--max-result-bytes %d: must be positive", c.MaxResultBytes))
	}
	switch {
	case c.ResultMaxBytes <= 0 || c.ResultStoreMaxBytes < 0:
		errs = append(errs, fmt.Errorf("--result-max-bytes %d, --result-store-max-bytes %d: must be positive (the store's may be 0: the asset's byte bound)", c.ResultMaxBytes, c.ResultStoreMaxBytes))
	case c.ResultStoreMaxBytes > 0 && c.ResultMaxBytes > c.ResultStoreMaxBytes:
		errs = append(errs, fmt.Errorf("--result-max-bytes %d is over --result-store-max-bytes %d: one result must fit the store", c.ResultMaxBytes, c.ResultStoreMaxBytes))
	}
	if _, err := gateway.ParseStoreShare(c.StoreShare); err != nil {
		errs = append(errs, fmt.Errorf("--store-share: %w", err))
	}
	if c.LimitsFile != "" {
		rules, err := ratelimit.LoadFile(c.LimitsFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--limits-file: %w", err))
		}
		c.limitRules = rules
	}
	if c.InputStateKeyFile != "" {
		key, err := clientinput.ReadKeyFile(c.InputStateKeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--input-state-key-file: %w", err))
		}
		c.inputStateKey = key
	}
	switch c.LimitsWhenNATSDown {
	case ratelimit.Local, ratelimit.Open, ratelimit.Closed:
	default:
		errs = append(errs, fmt.Errorf("--limits-when-nats-down %q: want local, open or closed", c.LimitsWhenNATSDown))
	}
	if c.LimitsLeaseTTL < time.Second || c.LimitsMaxKeys <= 0 {
		errs = append(errs, fmt.Errorf("--limits-lease-ttl %s, --limits-max-keys %d: want at least 1s and a positive bound", c.LimitsLeaseTTL, c.LimitsMaxKeys))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel))
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Errorf("--log-format %q: want json or text", c.LogFormat))
	}
	if err := c.Console.validate(c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func hasScheme(url string, schemes ...string) bool {
	for _, s := range schemes {
		if rest, ok := strings.CutPrefix(url, s+"://"); ok && rest != "" {
			return true
		}
	}
	return false
}

// gatewayConfig turns the validated flags into the gateway's Config, reading the
// HS256 secret file.
func (c Config) gatewayConfig(log *slog.Logger, mounts []gateway.Mount) (gateway.Config, error) {
	auth := gateway.AuthConfig{
		Disabled: c.AuthDisabled,
		JWKSFile: c.JWKSFile,
		JWKSURL:  c.JWKSURL,
		Audience: c.Audience,
		Issuer:   c.Issuer,
	}
	if c.HS256SecretFile != "" {
		secret, err := readSecret(c.HS256SecretFile)
		if err != nil {
			return gateway.Config{}, fmt.Errorf("--jwt-hs256-secret-file: %w", err)
		}
		auth.HS256Secret = secret
	}
	share, err := gateway.ParseStoreShare(c.StoreShare)
	if err != nil {
		return gateway.Config{}, fmt.Errorf("--store-share: %w", err)
	}
	return gateway.Config{
		Mounts:         mounts,
		Listen:         c.Listen,
		Workers:        c.Workers,
		NATSURL:        c.NATSURL,
		NATS:           c.NATS,
		WorkerTLS:      c.WorkerTLS,
		Auth:           auth,
		DefaultTimeout: c.DefaultTimeout,
		Events:         gateway.EventsConfig{StartedAfter: startedEventAfter(c.StartedEventAfter)},
		WarmUp:         c.WarmUp,
		MaxResultBytes: c.MaxResultBytes,
		Idempotency:    idempotency.Config{BucketConfig: jsassets.BucketConfig{TTL: c.IdempotencyTTL}},
		Assets:         c.Assets,
		Results: results.Config{BucketConfig: jsassets.BucketConfig{TTL: c.ResultTTL, MaxBytes: c.ResultStoreMaxBytes},
			MaxResultBytes: c.ResultMaxBytes},
		ResultHandles:        gateway.ResultHandlesConfig{Calls: c.ResultHandleCalls},
		Shares:               gateway.SharesConfig{Fraction: share},
		ShutdownTimeout:      c.ShutdownTimeout,
		Logger:               log,
		MaxRequestBytes:      c.MaxRequestBytes,
		MaxInputValues:       c.MaxInputValues,
		MaxBatchCalls:        c.MaxBatchCalls,
		BatchParallelism:     c.BatchParallelism,
		MaxConcurrentStreams: c.MaxConcurrentStreams,
		AllowedOrigins:       c.AllowedOrigins,
		PublicURL:            c.PublicURL,
		Tracing:              c.Tracing,
		ClientInput:          gateway.ClientInputConfig{Key: c.inputStateKey},
		Limits: ratelimit.Config{Rules: c.limitRules, WhenNATSDown: c.LimitsWhenNATSDown,
			LeaseTTL: c.LimitsLeaseTTL, MaxKeys: c.LimitsMaxKeys},
	}, nil
}

// startedEventAfter maps the flag to gateway.Config, where 0 means the default:
// on the command line 0 (or less) means "every call publishes started".
func startedEventAfter(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// readSecret reads a secret file (bounded), without the trailing newline that
// `kubectl create secret --from-file` and editors leave.
func readSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxSecretFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a secret", path, maxSecretFileBytes)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if len(s) < 32 {
		return nil, fmt.Errorf("%s holds %d bytes: an HS256 secret needs at least 32", path, len(s))
	}
	return []byte(s), nil
}
