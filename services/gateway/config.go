package gateway

import (
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
	"github.com/toolfleet/toolfleet/services/gateway/results"
)

// Defaults of [Config].
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultTimeout           = 30 * time.Second
	DefaultMaxResultBytes    = 4 << 20
	DefaultIdempotencyTTL    = idempotency.DefaultTTL
	DefaultIdempotencyBucket = idempotency.DefaultBucket
	// DefaultIdempotencyMaxBytes bounds the idempotency bucket (256 MiB).
	DefaultIdempotencyMaxBytes = idempotency.DefaultMaxBytes
	// DefaultIdempotencyMaxValueSize bounds one stored response (1 MiB).
	DefaultIdempotencyMaxValueSize = idempotency.DefaultMaxValueSize
	// DefaultResultBucket names the object store of result handles.
	DefaultResultBucket = results.DefaultBucket
	// DefaultResultTTL is how long a result behind a handle is kept (1 h).
	DefaultResultTTL = results.DefaultTTL
	// DefaultResultMaxBytes is the ceiling on one result behind a handle (64 MiB).
	DefaultResultMaxBytes = results.DefaultMaxResultBytes
	// DefaultResultHandleCalls bounds the calls at once that may receive a
	// result as large as ResultMaxBytes.
	DefaultResultHandleCalls = 8
	// DefaultResultStoreMaxBytes bounds the result handles' bucket (1 GiB).
	DefaultResultStoreMaxBytes = results.DefaultMaxBytes
	DefaultEventStream         = "TOOLFLEET_CALL_EVENTS"
	// DefaultWarmUp: see Config.WarmUp.
	DefaultWarmUp = registry.DefaultWarmUp
	// DefaultStartedEventAfter: a call still running after this publishes a
	// started event; a faster one publishes only its terminal event.
	DefaultStartedEventAfter = 100 * time.Millisecond
	DefaultEventQueue        = 10000
	// DefaultClientInputTTL: a caller answers a tool's questions within this.
	DefaultClientInputTTL = 15 * time.Minute
	// DefaultDelegatedClientInputTTL: an agent run or a program (a call on
	// behalf of a person) waits for that person's answer up to its approval
	// timeout (24 h by default), so its sealed state must outlive it.
	DefaultDelegatedClientInputTTL = 7 * 24 * time.Hour
	DefaultShutdownTimeout         = 10 * time.Second
	// DefaultMaxRequestBytes bounds one request on every surface (limits.go).
	DefaultMaxRequestBytes = 4 << 20
	// DefaultMaxInputValues bounds the JSON values of one JSON request.
	DefaultMaxInputValues = 100_000
	// DefaultMaxBatchCalls bounds the calls of one CallTools request.
	DefaultMaxBatchCalls = 100
	// DefaultBatchParallelism bounds the calls of one CallTools request running at once.
	DefaultBatchParallelism = 8
	// DefaultMaxConcurrentStreams bounds the RPCs in flight on one gRPC connection.
	DefaultMaxConcurrentStreams = 256
)

// ErrAuthOffNotLoopback is returned by [New] when auth is disabled on a listener
// that is not a loopback address.
var ErrAuthOffNotLoopback = errors.New("gateway: auth may only be disabled when listening on loopback")

// Config configures a [Gateway]. The zero value plus Auth.Disabled serves on
// 127.0.0.1:8080 with static workers only.
type Config struct {
	// Listen is the host:port of the single h2c port. Default [DefaultListen].
	Listen string
	// Workers are static worker addresses (host:port), e.g. k8s Service DNS names.
	Workers []string
	// NATSURL enables announcements, idempotency and events. Empty = none of them
	// (a call_id is then only passed to the worker).
	NATSURL string
	// NATS holds the credentials and TLS settings for NATSURL (none by default).
	NATS natsconn.Options
	// WorkerTLS says how to dial workers: plain text by default, TLS or mTLS.
	WorkerTLS WorkerTLSConfig
	// Auth configures bearer tokens.
	Auth AuthConfig
	// DefaultTimeout applies to tools whose contract sets none. Default [DefaultTimeout].
	DefaultTimeout time.Duration
	// MaxResultBytes applies to tools whose contract sets none. Default [DefaultMaxResultBytes].
	MaxResultBytes int64
	// Assets sets the replicas, storage, byte bounds and retention of the
	// gateway's JetStream assets (the call-event stream, the idempotency
	// bucket, the result handles' object store); see package sdk/jsassets.
	// Zero: one replica on file storage with the prod profile. The fields
	// below that set one of these values win over the profile and lose to
	// an override that names the asset.
	Assets jsassets.Config
	// Idempotency configures the record of calls by call_id (package
	// idempotency). Its zero bucket fields (Bucket, TTL, MaxBytes, Replicas)
	// take the settings of the toolfleet_calls asset under Assets; a field it
	// sets wins over the profile and loses to an override that names the
	// asset (MemoryStorage as "toolfleet_calls.storage=memory" does). Default
	// on disk: a NATS restart must not forget finished calls, or the retry of
	// a non-idempotent call would run it again. Share is set by the gateway
	// (Shares).
	Idempotency idempotency.Config
	// Results configures the store of results behind handles (results over a
	// tool's MaxResultBytes, kept for callers that allow a handle; package
	// results), its bucket fields as Idempotency's with the
	// toolfleet_results asset. Results.MaxResultBytes is the ceiling on one
	// result behind a handle; a larger result fails the call as without a
	// handle. Default [DefaultResultMaxBytes].
	Results results.Config
	// ResultHandles bounds the calls that allow a handle at once.
	ResultHandles ResultHandlesConfig
	// Events configures the call-event stream.
	Events EventsConfig
	// AnnounceSweep is how often expired workers are dropped. Default 1s.
	AnnounceSweep time.Duration
	// WarmUp is how long, after the gateway subscribes to announcements and
	// probes for workers (and after each NATS reconnect), a tool id that does
	// not resolve is UNAVAILABLE (retryable: "the gateway is starting") rather
	// than NOT_FOUND; readiness waits for the first warm-up and for the
	// announced workers' contracts to load. Only with NATSURL. Default
	// [DefaultWarmUp] (workers answer the probe at once; see registry.DefaultWarmUp).
	WarmUp time.Duration
	// AcceptAdditiveContracts lets a replica whose contract of a
	// Toolkit@version only adds tools to the registered one join beside it
	// (registry.Registry.AcceptAdditive): what `toolfleet dev --worker` needs
	// to swap in a rebuild after `toolfleet add tool` with no gap. Off by
	// default: in a shared fleet, anyone allowed to announce could otherwise
	// add tools under a served toolkit's name (and into runs that allow
	// "Toolkit.*"); there, a new tool comes with a new version.
	AcceptAdditiveContracts bool
	// ShutdownTimeout bounds the graceful stop. Default [DefaultShutdownTimeout].
	ShutdownTimeout time.Duration
	// Logger receives the gateway's logs. Default slog.Default().
	Logger *slog.Logger

	// MaxRequestBytes bounds one request body or message on every surface (gRPC,
	// Connect, gRPC-Web, OXP HTTP, MCP), checked before it is decoded.
	// Default [DefaultMaxRequestBytes].
	MaxRequestBytes int64
	// MaxInputValues bounds the JSON values (array elements, object members)
	// of one JSON request (Connect JSON, OXP HTTP, MCP), counted before it is
	// decoded. Default [DefaultMaxInputValues].
	MaxInputValues int
	// MaxBatchCalls bounds the calls of one CallTools request; a larger batch is
	// refused whole. Default [DefaultMaxBatchCalls].
	MaxBatchCalls int
	// BatchParallelism bounds how many calls of one CallTools request run at
	// once. Default [DefaultBatchParallelism].
	BatchParallelism int
	// MaxConcurrentStreams bounds the RPCs in flight on one gRPC (HTTP/2)
	// connection. Default [DefaultMaxConcurrentStreams].
	MaxConcurrentStreams uint32
	// AllowedOrigins are browser origins ("https://console.example.com") trusted
	// to make state-changing requests and to use /mcp. Default none: every
	// cross-origin browser request that changes state is refused.
	AllowedOrigins []string
	// Mounts are services served at the gateway's address (see [Mount]).
	Mounts []Mount
	// MCPTasks runs the MCP tasks of /mcp (mcp.Options.Tasks; the
	// orchestrator's, through package mcp/orchestration). Nil: /mcp serves
	// no tasks.
	MCPTasks mcp.Tasks
	// PublicURL is the gateway's origin as clients reach it
	// ("https://tools.example.com"), named in the RFC 9728 metadata and in
	// WWW-Authenticate. Default: the scheme and Host of each request.
	PublicURL string
	// Limits are the operator's rate limits and quotas per principal and per
	// tool (package ratelimit; docs/operations.md "Rate limits and quotas").
	// No rules: none. Shared across replicas through NATS when NATSURL is
	// set, else each gateway enforces them alone. Limits.Assets and
	// Limits.Standalone are set from the fields above.
	Limits ratelimit.Config
	// Shares bound what one principal may hold of the stores callers write.
	Shares SharesConfig
	// ClientInput configures the calls whose tool asks its caller for input
	// (package clientinput).
	ClientInput ClientInputConfig
	// Connections gives the tools that act with their caller's account
	// (ToolOptions.credential) the caller's tokens; package connections
	// implements it, wired in cmd/. Nil: such tools are refused with
	// Unimplemented.
	Connections TokenSource
	// Exchange gives the tools of first-party APIs (a credential whose
	// provider is one of its own) a token exchanged for their caller at the
	// operator's authorization server; package exchange implements it.
	// Nil: those providers are looked up in Connections.
	Exchange Exchanger
	// Tracing records the gateway's spans (server, and client towards workers)
	// with the global OpenTelemetry TracerProvider (internal/telemetry). A
	// caller's traceparent is honoured either way.
	Tracing bool
}

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.Events.StartedAfter == 0 {
		c.Events.StartedAfter = DefaultStartedEventAfter
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.Idempotency.Bucket == "" {
		c.Idempotency.Bucket = DefaultIdempotencyBucket
	}
	if c.Results.Bucket == "" {
		c.Results.Bucket = DefaultResultBucket
	}
	if c.Results.MaxResultBytes <= 0 {
		c.Results.MaxResultBytes = DefaultResultMaxBytes
	}
	if c.ResultHandles.Calls <= 0 {
		c.ResultHandles.Calls = DefaultResultHandleCalls
	}
	if c.ResultHandles.Wait <= 0 {
		c.ResultHandles.Wait = 5 * time.Second
	}
	if c.Events.Stream == "" {
		c.Events.Stream = DefaultEventStream
	}
	if c.ClientInput.TTL <= 0 {
		c.ClientInput.TTL = DefaultClientInputTTL
	}
	if c.ClientInput.DelegatedTTL <= 0 {
		c.ClientInput.DelegatedTTL = DefaultDelegatedClientInputTTL
	}
	if c.Events.Queue <= 0 {
		c.Events.Queue = DefaultEventQueue
	}
	if c.AnnounceSweep <= 0 {
		c.AnnounceSweep = time.Second
	}
	if c.WarmUp <= 0 {
		c.WarmUp = DefaultWarmUp
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxInputValues <= 0 {
		c.MaxInputValues = DefaultMaxInputValues
	}
	if c.MaxBatchCalls <= 0 {
		c.MaxBatchCalls = DefaultMaxBatchCalls
	}
	if c.BatchParallelism <= 0 {
		c.BatchParallelism = DefaultBatchParallelism
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
}

// ClientInputConfig configures the request_state of calls whose tool asks
// its caller for input (MCP's multi-round-trip requests).
type ClientInputConfig struct {
	// Key seals the request_state (clientinput.KeySize bytes, the same on
	// every replica). Empty: with NATSURL the key shared in the KV bucket
	// jsassets.InputKey (the first replica creates it), else a random key per
	// process (one gateway only).
	Key []byte
	// TTL is how long a caller has to answer a tool's questions. Default
	// [DefaultClientInputTTL].
	TTL time.Duration
	// DelegatedTTL is TTL for calls made on behalf of a person (agent runs,
	// programs and MCP tasks, through the orchestrator's tools:delegate):
	// their questions wait in the inbox, durably, for as long as the run
	// waits. Default [DefaultDelegatedClientInputTTL].
	DelegatedTTL time.Duration
}

// ResultHandlesConfig bounds the calls at once that allow a handle and so
// may receive a result up to Results.MaxResultBytes, which the gateway holds
// in memory (protobuf and JSON) while it keeps it: that memory stays below
// about 3 × Calls × Results.MaxResultBytes.
type ResultHandlesConfig struct {
	// Calls bounds the calls at once; a call past the bound waits up to Wait
	// for a slot, then is refused before it runs (ResourceExhausted,
	// retryable). Default [DefaultResultHandleCalls].
	Calls int
	// Wait is how long a call waits for a slot. Default 5 s.
	Wait time.Duration
}

// SharesConfig bounds what one principal may hold of each store a caller
// writes through the gateway: the idempotency bucket, the result handles'
// object store, the call event stream (shares.go, docs/operations.md "Store
// shares"). A principal over its share is refused new entries, never another
// principal. Only with NATSURL.
type SharesConfig struct {
	// Fraction is the part of each store's byte bound one principal may hold.
	// 0: [DefaultStoreShare]; [NoStoreShare]: no share.
	Fraction float64
}

// EventsConfig configures the call events the gateway publishes.
type EventsConfig struct {
	// Stream names the JetStream stream of call events. Default
	// [DefaultEventStream]; its bounds are those of the TOOLFLEET_CALL_EVENTS
	// asset under Config.Assets.
	Stream string
	// Queue bounds the events held while NATS is away. Default [DefaultEventQueue].
	Queue int
	// StartedAfter is how long a call runs before its started event is
	// published; a call that ends sooner publishes only its terminal event
	// (with started_at and duration). Negative: every call publishes started
	// as it begins. Default [DefaultStartedEventAfter].
	StartedAfter time.Duration
}

// EventStreamConfig is the call-event stream the gateway creates or updates:
// the TOOLFLEET_CALL_EVENTS asset (named Events.Stream) under Assets.
func (c Config) EventStreamConfig() jetstream.StreamConfig {
	c.defaults()
	return c.Assets.Settings(jsassets.CallEvents.Named(c.Events.Stream)).Stream(jetstream.StreamConfig{
		Name:        c.Events.Stream,
		Description: "toolfleet gateway call events",
		Subjects:    []string{EventSubjectPrefix + ">"},
		Discard:     jetstream.DiscardOld,
		Duplicates:  2 * time.Minute,
	})
}

// InputKeyConfig is the KV bucket sharing the request_state key (jsassets.InputKey).
func (c Config) InputKeyConfig() jetstream.KeyValueConfig {
	s := c.Assets.Settings(jsassets.InputKey)
	return s.KeyValue(jetstream.KeyValueConfig{Bucket: jsassets.InputKey.Name, Description: "the key sealing request_state of tool calls asking for input", History: 1})
}

// IdempotencyConfig is the idempotency store's configuration: Idempotency
// with the toolfleet_calls asset's settings under Assets
// ([jsassets.Config.Bucket]).
func (c Config) IdempotencyConfig() idempotency.Config {
	c.defaults()
	ic := c.Idempotency
	ic.BucketConfig = c.Assets.Bucket(jsassets.Idempotency, ic.BucketConfig)
	return ic
}

// ResultsConfig is the result store's configuration: Results with the
// toolfleet_results asset's settings under Assets (its own defaults applied
// by results.New).
func (c Config) ResultsConfig() results.Config {
	c.defaults()
	rc := c.Results
	rc.BucketConfig = c.Assets.Bucket(jsassets.Results, rc.BucketConfig)
	return rc
}
