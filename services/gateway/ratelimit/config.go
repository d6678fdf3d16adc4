package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// What the limiter does while NATS is away (Config.WhenNATSDown).
const (
	// Local enforces every rule on each replica alone (the default).
	Local = "local"
	// Open admits every call.
	Open = "open"
	// Closed refuses every call a rule applies to (UNAVAILABLE).
	Closed = "closed"
)

// Defaults and bounds of [Config].
const (
	DefaultBucket       = "toolfleet_limits"
	DefaultLeaseTTL     = 15 * time.Second
	DefaultSyncInterval = 100 * time.Millisecond
	DefaultMaxKeys      = 100_000
	// DefaultConcurrentRetry is the retry-after of a call refused for the
	// concurrency limit: when a slot frees is not known.
	DefaultConcurrentRetry = time.Second
	// MaxRules bounds the rules of one configuration (and so the rule label
	// of the metrics).
	MaxRules = 100
	// MaxWindow is the longest byte window; the bucket keeps a key at least
	// this long (its max age is one day).
	MaxWindow = 24 * time.Hour
	// maxFileBytes bounds a limits file.
	maxFileBytes = 1 << 20
)

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("ratelimit: invalid limits")

// Rule is one limit an operator sets. At least one of Rate, Concurrent and
// Bytes is set.
type Rule struct {
	// Name labels the rule in metrics and in refusals; letters, digits, - and
	// _, unique. Default "rule<N>" (N its position, from 1).
	Name string `json:"name,omitempty"`
	// Principal is the subject the rule applies to: exact, a glob where *
	// matches any run of characters ("svc-*"), or "*" (the default) for
	// every principal, each with a budget of its own. A delegated call
	// counts for the principal it is made for (an agent run's owner).
	Principal string `json:"principal,omitempty"`
	// Tool is a Toolkit.Tool pattern as in tools:call scopes
	// ("calculator.*", "search.web"; case-insensitive). Default "*".
	Tool string `json:"tool,omitempty"`
	// Rate is calls per second; 0: no rate limit.
	Rate float64 `json:"rate,omitempty"`
	// Burst is how many calls may come at once after a quiet spell. Default:
	// the rate rounded up (at least 1).
	Burst int `json:"burst,omitempty"`
	// Concurrent bounds the calls running at once; 0: no bound.
	Concurrent int `json:"concurrent,omitempty"`
	// Bytes bounds the request and result bytes per Window ("100MiB", or a
	// number of bytes); "" or 0: no bound.
	Bytes ByteSize `json:"bytes,omitempty"`
	// Window of Bytes ("1h", "30m"; at most 24h). Default 1h.
	Window Duration `json:"window,omitempty"`

	principal func(string) bool
	tool      string // lower case
	interval  time.Duration
	block     int
	// spare is how many idle slots a replica keeps of the concurrency limit
	// between syncs (a sixteenth of it; none under 16).
	spare int
	// admitted counts admissions per limit (rate, bytes, concurrent);
	// running is this replica's running calls (set by New).
	admitted [3]prometheus.Counter
	running  prometheus.Gauge
}

// ByteSize is a size in a limits file: a number of bytes or a string such as
// "100MiB" (jsassets.ParseBytes).
type ByteSize int64

// UnmarshalJSON reads a number or a size string.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	var n int64
	if json.Unmarshal(data, &n) == nil {
		*b = ByteSize(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.New("want a size such as 100MiB or a number of bytes")
	}
	if s == "" || s == "0" {
		*b = 0
		return nil
	}
	n, err := jsassets.ParseBytes(s)
	if err != nil {
		return err
	}
	*b = ByteSize(n)
	return nil
}

// Duration is a duration in a limits file ("1h", "90s").
type Duration time.Duration

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.New(`want a duration such as "1h"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: want a duration such as 1h", s)
	}
	*d = Duration(v)
	return nil
}

// File is the limits file (YAML or JSON): {"rules": [...]}.
type File struct {
	Rules []Rule `json:"rules"`
}

// Config configures a [Limiter]. No rules: no limiter (the gateway skips it).
type Config struct {
	Rules []Rule
	// WhenNATSDown is [Local] (default), [Open] or [Closed].
	WhenNATSDown string
	// Bucket names the KV bucket. Default [DefaultBucket].
	Bucket string
	// LeaseTTL is how long a replica's running calls count after its last
	// renewal (a dead replica's calls lapse after it). Default [DefaultLeaseTTL].
	LeaseTTL time.Duration
	// SyncInterval is how often released slots and counted bytes are written
	// to NATS, and how old a replica's copy of a byte counter may be.
	// Default [DefaultSyncInterval].
	SyncInterval time.Duration
	// MaxKeys bounds the (limit, rule, principal) keys one replica tracks.
	// Default [DefaultMaxKeys].
	MaxKeys int
	// Assets sizes the bucket (see sdk/jsassets).
	Assets jsassets.Config
	// Standalone: the gateway has no NATS; each replica enforces the rules
	// alone, as documented, without counting it as degraded.
	Standalone bool
	// Scope starts every key of this limiter in the bucket ("" for the
	// operator's limits), so that two limiters sharing the bucket never share
	// a key: the gateway's store shares use "share." (their rules are named
	// after the stores, and an operator may name a rule the same).
	Scope string
}

// LoadFile reads a limits file (YAML or JSON) and validates its rules.
func LoadFile(name string) ([]Rule, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("ratelimit: read %s: %w", name, err)
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalid, name, maxFileBytes)
	}
	return Parse(b)
}

// Parse reads a limits file's bytes (YAML or JSON) and validates its rules.
func Parse(b []byte) ([]Rule, error) {
	var f File
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c := Config{Rules: f.Rules}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c.Rules, nil
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// validate checks the rules and fills in their defaults.
func (c *Config) validate() error {
	var errs []error
	if len(c.Rules) > MaxRules {
		errs = append(errs, fmt.Errorf("%w: %d rules, at most %d", ErrInvalid, len(c.Rules), MaxRules))
	}
	switch c.WhenNATSDown {
	case "":
		c.WhenNATSDown = Local
	case Local, Open, Closed:
	default:
		errs = append(errs, fmt.Errorf("%w: when NATS is down %q: want local, open or closed", ErrInvalid, c.WhenNATSDown))
	}
	seen := map[string]bool{}
	for i := range c.Rules {
		r := &c.Rules[i]
		if r.Name == "" {
			r.Name = fmt.Sprintf("rule%d", i+1)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%w: rule %q: %s", ErrInvalid, r.Name, fmt.Sprintf(format, args...)))
		}
		if !nameRE.MatchString(r.Name) {
			bad("name: want 1 to 64 letters, digits, - and _")
		}
		if seen[r.Name] {
			bad("name used twice")
		}
		seen[r.Name] = true
		if r.Principal == "" {
			r.Principal = "*"
		}
		if r.Tool == "" {
			r.Tool = "*"
		}
		r.tool = strings.ToLower(r.Tool)
		if _, err := path.Match(r.tool, "x.y"); err != nil {
			bad("tool %q: not a pattern", r.Tool)
		}
		r.principal = glob(r.Principal)
		switch {
		case r.Rate < 0 || math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) || r.Rate > 1e9:
			bad("rate %v: want calls per second, 0 to 1e9", r.Rate)
		case r.Burst < 0 || r.Burst > 1e9:
			bad("burst %d: want 0 to 1e9", r.Burst)
		case r.Concurrent < 0:
			bad("concurrent %d: want 0 or more", r.Concurrent)
		case r.Bytes < 0:
			bad("bytes %d: want 0 or more", r.Bytes)
		case r.Rate == 0 && r.Concurrent == 0 && r.Bytes == 0:
			bad("sets no limit: set rate, concurrent or bytes")
		}
		if r.Burst == 0 {
			r.Burst = max(1, int(math.Ceil(r.Rate)))
		}
		if r.Window == 0 {
			r.Window = Duration(time.Hour)
		}
		if w := time.Duration(r.Window); w < time.Second || w > MaxWindow {
			bad("window %s: want 1s to %s", w, MaxWindow)
		}
		r.spare = r.Concurrent / 16
		if r.Rate > 0 {
			r.interval = time.Duration(float64(time.Second) / r.Rate)
			r.interval = max(r.interval, 1)
			// A lease is 20 ms worth of the rate, at least 1, at most the burst.
			r.block = min(r.Burst, max(1, int(r.Rate/50)))
		}
	}
	return errors.Join(errs...)
}

// glob matches a subject against a pattern where * matches any run of
// characters (subjects may hold / and . which path.Match treats apart).
func glob(pattern string) func(string) bool {
	if pattern == "*" {
		return func(string) bool { return true }
	}
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return func(s string) bool { return s == pattern }
	}
	return func(s string) bool {
		if !strings.HasPrefix(s, parts[0]) {
			return false
		}
		s = s[len(parts[0]):]
		last := parts[len(parts)-1]
		for _, p := range parts[1 : len(parts)-1] {
			i := strings.Index(s, p)
			if i < 0 {
				return false
			}
			s = s[i+len(p):]
		}
		return strings.HasSuffix(s, last)
	}
}
