// Package jsassets is the one configuration of every JetStream asset of a
// toolfleet fleet: the streams, KV buckets and object stores that the gateway,
// the orchestrator and the bundled workers create. Each asset takes its
// replica count, storage type, byte bound and retention (max age, the TTL of a
// bucket) from a [Config]: fleet-wide defaults (--js-replicas, --js-storage),
// a profile of byte bounds and retentions (--js-profile prod or dev), and
// per-asset overrides by name (--js-overrides). The same flags and
// TOOLFLEET_JS_* environment variables work on every binary, so one ConfigMap
// configures the whole fleet.
//
// Components create their assets with [EnsureStream], [EnsureKeyValue] and
// [EnsureObjectStore], which apply the supported changes to an existing asset
// (replicas, byte bound, max age) and refuse the one JetStream cannot make in
// place (a storage type change) with a [*ChangeError] that names the asset,
// its current and wanted storage and the migration path in
// docs/operations.md. A server that cannot reserve an asset's byte bound is
// reported with the setting to change ([ErrInsufficientStorage]).
//
// It is public (not under internal/) because a worker's register function
// reads it from [tool.Worker] to size the assets it creates.
package jsassets

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Environment variables read by [Config.AddFlags] as the flags' defaults.
const (
	EnvReplicas  = "TOOLFLEET_JS_REPLICAS"
	EnvStorage   = "TOOLFLEET_JS_STORAGE"
	EnvProfile   = "TOOLFLEET_JS_PROFILE"
	EnvOverrides = "TOOLFLEET_JS_OVERRIDES"
)

// Profiles of byte bounds and retentions.
const (
	// ProfileProd sizes assets for a cluster (the default of every production binary).
	ProfileProd = "prod"
	// ProfileDev sizes assets for a laptop: a few hundred MiB in all (`toolfleet dev`).
	ProfileDev = "dev"
)

// Storage types, as flags and overrides spell them.
const (
	StorageFile   = "file"
	StorageMemory = "memory"
)

// MaxReplicas is the most replicas JetStream keeps of one asset.
const MaxReplicas = 5

// ErrInvalid is wrapped by every error of [Config.Validate].
var ErrInvalid = errors.New("jsassets: invalid JetStream asset configuration")

// Limits are an asset's byte bound and retention.
type Limits struct {
	// MaxBytes bounds the asset; always positive.
	MaxBytes int64
	// MaxAge drops a message (a KV revision, an object) this long after it was
	// written; 0 keeps it until the byte bound pushes it out or it is deleted.
	MaxAge time.Duration
}

// Asset is one JetStream asset of the fleet and its default limits.
type Asset struct {
	// Name is the stream name, or the bucket name of a KV bucket or object store.
	Name string
	// Kind is "stream", "kv" or "object store".
	Kind string
	// Owner is the component that creates it.
	Owner string
	// Prod and Dev are the limits of the two profiles.
	Prod, Dev Limits
}

// Named returns a copy of a with another name: a component whose asset name
// is configurable (a KV worker's bucket) keeps the defaults of its kind.
func (a Asset) Named(name string) Asset {
	if name != "" {
		a.Name = name
	}
	return a
}

// StreamName is the JetStream stream that holds the asset (KV_<bucket> for a
// KV bucket, OBJ_<bucket> for an object store).
func (a Asset) StreamName() string {
	switch a.Kind {
	case KindKV:
		return "KV_" + a.Name
	case KindObjectStore:
		return "OBJ_" + a.Name
	}
	return a.Name
}

// Kinds of [Asset].
const (
	KindStream      = "stream"
	KindKV          = "kv"
	KindObjectStore = "object store"
)

const (
	kib = int64(1) << 10
	mib = kib << 10
	gib = mib << 10
	day = 24 * time.Hour
)

// The fleet's assets with their default names. docs/operations.md ("JetStream
// assets") lists the same figures; keep them in step.
var (
	CallEvents = Asset{Name: "TOOLFLEET_CALL_EVENTS", Kind: KindStream, Owner: "gateway",
		Prod: Limits{MaxBytes: 1 * gib, MaxAge: 7 * day}, Dev: Limits{MaxBytes: 64 * mib, MaxAge: 1 * day}}
	Idempotency = Asset{Name: "toolfleet_calls", Kind: KindKV, Owner: "gateway",
		Prod: Limits{MaxBytes: 256 * mib, MaxAge: 1 * day}, Dev: Limits{MaxBytes: 32 * mib, MaxAge: 1 * day}}
	Results = Asset{Name: "toolfleet_results", Kind: KindObjectStore, Owner: "gateway",
		Prod: Limits{MaxBytes: 1 * gib, MaxAge: time.Hour}, Dev: Limits{MaxBytes: 64 * mib, MaxAge: time.Hour}}
	RunEvents = Asset{Name: "TOOLFLEET_RUN_EVENTS", Kind: KindStream, Owner: "orchestrator",
		Prod: Limits{MaxBytes: 1 * gib, MaxAge: 7 * day}, Dev: Limits{MaxBytes: 64 * mib, MaxAge: 7 * day}}
	Transcripts = Asset{Name: "toolfleet_transcripts", Kind: KindKV, Owner: "orchestrator",
		Prod: Limits{MaxBytes: 4 * gib, MaxAge: 30 * day}, Dev: Limits{MaxBytes: 64 * mib, MaxAge: 7 * day}}
	RunBlobs = Asset{Name: "toolfleet_run_blobs", Kind: KindObjectStore, Owner: "orchestrator",
		Prod: Limits{MaxBytes: 16 * gib, MaxAge: 30 * day}, Dev: Limits{MaxBytes: 128 * mib, MaxAge: 7 * day}}
	// RunRecords holds, per run, the timer that frees its data (transcript,
	// blobs, events) once the run has been closed this long, and per
	// principal what its runs hold (the quota): its max age is the run
	// retention after close.
	RunRecords = Asset{Name: "toolfleet_runs", Kind: KindKV, Owner: "orchestrator",
		Prod: Limits{MaxBytes: 256 * mib, MaxAge: 7 * day}, Dev: Limits{MaxBytes: 16 * mib, MaxAge: 1 * day}}
	Triggers = Asset{Name: "TOOLFLEET_TRIGGERS", Kind: KindStream, Owner: "orchestrator",
		Prod: Limits{MaxBytes: 1 * gib, MaxAge: 7 * day}, Dev: Limits{MaxBytes: 32 * mib, MaxAge: 7 * day}}
	TriggerDeadLetters = Asset{Name: "TOOLFLEET_TRIGGERS_DEAD", Kind: KindStream, Owner: "orchestrator",
		Prod: Limits{MaxBytes: 256 * mib, MaxAge: 30 * day}, Dev: Limits{MaxBytes: 16 * mib, MaxAge: 30 * day}}
	AgentMemory = Asset{Name: "agent_memory", Kind: KindKV, Owner: "kv worker",
		Prod: Limits{MaxBytes: 1 * gib}, Dev: Limits{MaxBytes: 32 * mib}}
)

// RateLimits holds the shared state of the gateway's rate limits and quotas
// (services/gateway/ratelimit) and of its store shares (per principal). Only
// a gateway with NATS and limits or store shares (on unless --store-share
// none) makes it, so it is listed by [Optional], not [All]; its max age
// outlives the longest byte window (24 h).
var RateLimits = Asset{Name: "toolfleet_limits", Kind: KindKV, Owner: "gateway (with store shares or --limits-file)",
	Prod: Limits{MaxBytes: 64 * mib, MaxAge: 25 * time.Hour}, Dev: Limits{MaxBytes: 8 * mib, MaxAge: 25 * time.Hour}}

// InputKey holds the key every gateway replica seals the request_state of
// tool calls asking for input with (services/gateway/clientinput). A gateway
// with NATS makes it unless it is given the key (--input-state-key-file), so
// it is listed by [Optional]; it has no max age: the key must outlive every
// replica.
var InputKey = Asset{Name: "toolfleet_input_key", Kind: KindKV, Owner: "gateway (without --input-state-key-file)",
	Prod: Limits{MaxBytes: 64 * kib}, Dev: Limits{MaxBytes: 64 * kib}}

// Connections holds the principals' delegated credentials (sealed OAuth
// tokens, services/gateway/connections) and their unfinished connects. Only
// a gateway with --connections-file makes it, so it is listed by
// [Optional]; it has no max age: a connection lasts until it is revoked.
var Connections = Asset{Name: "toolfleet_connections", Kind: KindKV, Owner: "gateway (with --connections-file)",
	Prod: Limits{MaxBytes: 256 * mib}, Dev: Limits{MaxBytes: 16 * mib}}

// ConsoleSessions holds the run console's signed-in sessions (sealed, with
// their tokens) so that every gateway replica serves every browser
// (services/console). Only a gateway serving the console makes it, so it is
// listed by [Optional]; its max age is the longest session (8 h) and a
// little more.
var ConsoleSessions = Asset{Name: "toolfleet_console_sessions", Kind: KindKV, Owner: "gateway (with the console)",
	Prod: Limits{MaxBytes: 64 * mib, MaxAge: 9 * time.Hour}, Dev: Limits{MaxBytes: 8 * mib, MaxAge: 9 * time.Hour}}

// Optional lists the assets made only in some configurations.
func Optional() []Asset { return []Asset{RateLimits, InputKey, Connections, ConsoleSessions} }

// All lists the fleet's assets under their default names.
func All() []Asset {
	return []Asset{CallEvents, Idempotency, Results, RunEvents, Transcripts, RunBlobs, RunRecords, Triggers, TriggerDeadLetters, AgentMemory}
}

// Config is the JetStream asset configuration of one process. The zero value
// is valid: one replica on file storage with the prod profile and no
// overrides. Call [Config.Validate] (binaries do at start) before
// [Config.Settings]; Settings of an unvalidated Config ignores malformed
// overrides.
type Config struct {
	// Replicas is the fleet-wide replica count, 1 to 5. "" means 1.
	Replicas string
	// Storage is the fleet-wide storage, "file" or "memory". "" means file.
	Storage string
	// Profile chooses the default byte bounds and retentions, "prod" or "dev".
	// "" means prod.
	Profile string
	// Overrides set one asset's values: comma-separated NAME.KEY=VALUE, with
	// KEY one of replicas, storage, max-bytes (a size: 512MiB, 4GiB, or
	// bytes) and max-age (a duration: 72h, 30d; 0 keeps messages until the
	// byte bound drops them). NAME is the asset's name (a stream, or a KV or
	// object store bucket), e.g. "toolfleet_run_blobs.max-bytes=64GiB,
	// toolfleet_calls.storage=memory".
	Overrides string
}

// Settings are what one asset is created with.
type Settings struct {
	Replicas int
	Storage  jetstream.StorageType
	Limits
}

// FlagSet is what [Config.AddFlags] needs: both the standard library's
// *flag.FlagSet and spf13/pflag's *pflag.FlagSet have it.
type FlagSet interface {
	StringVar(p *string, name, value, usage string)
}

// AddFlags registers --js-replicas, --js-storage, --js-profile and
// --js-overrides on fs, with defaults from TOOLFLEET_JS_REPLICAS,
// TOOLFLEET_JS_STORAGE, TOOLFLEET_JS_PROFILE and TOOLFLEET_JS_OVERRIDES, and
// with c's current values when the variables are unset (so a binary can
// choose another default profile).
func (c *Config) AddFlags(fs FlagSet) {
	fs.StringVar(&c.Replicas, "js-replicas", envOr(EnvReplicas, c.Replicas), "replicas of every JetStream stream, KV bucket and object store, 1-5 (default 1; 3 on a NATS cluster) (env "+EnvReplicas+")")
	fs.StringVar(&c.Storage, "js-storage", envOr(EnvStorage, c.Storage), "storage of every JetStream asset: file or memory (default file) (env "+EnvStorage+")")
	fs.StringVar(&c.Profile, "js-profile", envOr(EnvProfile, c.Profile), "byte bounds and retentions of JetStream assets: prod or dev (small, for a laptop) (default prod) (env "+EnvProfile+")")
	fs.StringVar(&c.Overrides, "js-overrides", envOr(EnvOverrides, c.Overrides), "per-asset settings, comma-separated NAME.KEY=VALUE with KEY replicas, storage, max-bytes or max-age, e.g. toolfleet_run_blobs.max-bytes=64GiB (env "+EnvOverrides+")")
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// override is one asset's parsed overrides; nil fields are not overridden.
type override struct {
	replicas *int
	storage  *jetstream.StorageType
	maxBytes *int64
	maxAge   *time.Duration
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Validate checks every field and every override, naming the flag at fault.
func (c Config) Validate() error {
	_, err := c.parse()
	return err
}

type parsed struct {
	replicas  int
	storage   jetstream.StorageType
	dev       bool
	overrides map[string]*override
}

func (c Config) parse() (parsed, error) {
	p := parsed{replicas: 1, storage: jetstream.FileStorage, overrides: map[string]*override{}}
	var errs []error
	if c.Replicas != "" {
		n, err := parseReplicas(c.Replicas)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: --js-replicas: %w", ErrInvalid, err))
		}
		p.replicas = n
	}
	if c.Storage != "" {
		st, err := parseStorage(c.Storage)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: --js-storage: %w", ErrInvalid, err))
		}
		p.storage = st
	}
	switch c.Profile {
	case "", ProfileProd:
	case ProfileDev:
		p.dev = true
	default:
		errs = append(errs, fmt.Errorf("%w: --js-profile %q: want prod or dev", ErrInvalid, c.Profile))
	}
	for item := range strings.SplitSeq(c.Overrides, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if err := p.addOverride(item); err != nil {
			errs = append(errs, fmt.Errorf("%w: --js-overrides %q: %w", ErrInvalid, item, err))
		}
	}
	return p, errors.Join(errs...)
}

func (p *parsed) addOverride(item string) error {
	lhs, value, ok := strings.Cut(item, "=")
	if !ok {
		return errors.New("want NAME.KEY=VALUE")
	}
	name, key, ok := strings.Cut(lhs, ".")
	if !ok || !nameRE.MatchString(name) {
		return errors.New("want NAME.KEY=VALUE, NAME of letters, digits, - and _")
	}
	o := p.overrides[name]
	if o == nil {
		o = &override{}
		p.overrides[name] = o
	}
	switch key {
	case "replicas":
		n, err := parseReplicas(value)
		if err != nil {
			return err
		}
		o.replicas = &n
	case "storage":
		st, err := parseStorage(value)
		if err != nil {
			return err
		}
		o.storage = &st
	case "max-bytes":
		n, err := ParseBytes(value)
		if err != nil {
			return err
		}
		o.maxBytes = &n
	case "max-age":
		d, err := ParseAge(value)
		if err != nil {
			return err
		}
		o.maxAge = &d
	default:
		return fmt.Errorf("unknown key %q: want replicas, storage, max-bytes or max-age", key)
	}
	return nil
}

func parseReplicas(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > MaxReplicas {
		return 1, fmt.Errorf("%q: want a replica count from 1 to %d", s, MaxReplicas)
	}
	return n, nil
}

func parseStorage(s string) (jetstream.StorageType, error) {
	switch strings.TrimSpace(s) {
	case StorageFile:
		return jetstream.FileStorage, nil
	case StorageMemory:
		return jetstream.MemoryStorage, nil
	}
	return jetstream.FileStorage, fmt.Errorf("%q: want file or memory", s)
}

// ParseBytes reads a positive size: a number of bytes, or a number with one of
// the suffixes KiB, MiB, GiB, TiB (also K, M, G, T, KB, MB, GB, TB as binary
// multiples).
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", gib}, {"MiB", mib}, {"KiB", kib}, {"TB", 1 << 40}, {"GB", gib}, {"MB", mib}, {"KB", kib},
		{"T", 1 << 40}, {"G", gib}, {"M", mib}, {"K", kib}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want a positive size such as 512MiB, 4GiB or a number of bytes", s)
	}
	return n * mult, nil
}

// ParseAge reads a retention: a Go duration (72h, 90m), a number of days (30d),
// or 0 for none.
func ParseAge(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "0" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(t, "d"); ok {
		n, err := strconv.Atoi(days)
		if err == nil && n > 0 && n <= 100*365 {
			return time.Duration(n) * day, nil
		}
	} else if d, err := time.ParseDuration(t); err == nil && d >= time.Second {
		return d, nil
	}
	return 0, fmt.Errorf("%q: want a duration of at least 1s (72h, 30d), or 0 for none", s)
}

// FormatBytes writes n as the largest exact binary unit (64MiB, 4GiB).
func FormatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", gib}, {"MiB", mib}, {"KiB", kib}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// StorageName is "file" or "memory".
func StorageName(st jetstream.StorageType) string {
	if st == jetstream.MemoryStorage {
		return StorageMemory
	}
	return StorageFile
}

// Settings returns what asset a is created with: the fleet-wide replicas and
// storage, the profile's limits, then a's overrides by name.
func (c Config) Settings(a Asset) Settings {
	p, _ := c.parse()
	s := Settings{Replicas: p.replicas, Storage: p.storage, Limits: a.Prod}
	if p.dev {
		s.Limits = a.Dev
	}
	if o := p.overrides[a.Name]; o != nil {
		if o.replicas != nil {
			s.Replicas = *o.replicas
		}
		if o.storage != nil {
			s.Storage = *o.storage
		}
		if o.maxBytes != nil {
			s.MaxBytes = *o.maxBytes
		}
		if o.maxAge != nil {
			s.MaxAge = *o.maxAge
		}
	}
	return s
}

// Overridden reports whether the overrides name asset name's key ("replicas",
// "storage", "max-bytes" or "max-age"): a component with its own flag for a
// value (the gateway's --idempotency-ttl) lets an override win.
func (c Config) Overridden(name, key string) bool {
	p, _ := c.parse()
	o := p.overrides[name]
	if o == nil {
		return false
	}
	switch key {
	case "replicas":
		return o.replicas != nil
	case "storage":
		return o.storage != nil
	case "max-bytes":
		return o.maxBytes != nil
	case "max-age":
		return o.maxAge != nil
	}
	return false
}

// WithStorage returns c with every asset on storage st unless an override
// names another: tests and in-memory fleets use it.
func (c Config) WithStorage(st string) Config {
	c.Storage = st
	return c
}

// Names lists the asset names the overrides mention, sorted.
func (c Config) Names() []string {
	p, _ := c.parse()
	var out []string
	for n := range p.overrides {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
