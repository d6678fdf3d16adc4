// Package results keeps tool results that are too large to return inline, for
// the caller that asked for a result handle (CallToolRequest.allow_result_handle).
//
// A result is one object in a NATS JetStream object store bucket, named by a
// random 128-bit id (32 lowercase hex characters). Its metadata records the
// owner (the effective principal's subject) and the tool; [Store.Open] answers
// [ErrNotFound] alike for an unknown id, an expired one and one owned by another
// principal, so an id is no oracle. The bucket drops a result after its TTL and
// refuses new ones when full ([ErrFull]), never dropping a result early.
package results

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// Defaults of [Config].
const (
	DefaultBucket = "toolfleet_results"
	DefaultTTL    = time.Hour
	// DefaultMaxBytes bounds the whole bucket (1 GiB).
	DefaultMaxBytes = 1 << 30
	// DefaultMaxResultBytes is the ceiling on one stored result (64 MiB).
	DefaultMaxResultBytes = 64 << 20
)

// ContentTypeJSON is the content type of a tool result (its JSON form).
const ContentTypeJSON = "application/json"

// PreviewBytes bounds ResultHandle.preview.
const PreviewBytes = 256

// Errors of [Store]; match them with errors.Is.
var (
	// ErrInvalidID: the id is not 32 lowercase hex characters.
	ErrInvalidID = errors.New("results: malformed result id")
	// ErrNotFound: no result with this id for this principal (unknown, expired,
	// or another principal's).
	ErrNotFound = errors.New("results: no such result")
	// ErrTooLarge: the result is over Config.MaxResultBytes.
	ErrTooLarge = errors.New("results: result over the ceiling for stored results")
	// ErrFull: the bucket is full until older results expire.
	ErrFull = errors.New("results: the result store is full")
	// ErrUnavailable: NATS could not answer.
	ErrUnavailable = errors.New("results: store unavailable")
)

// Config configures a [Store].
type Config struct {
	// BucketConfig names and sizes the object store: Bucket (default
	// [DefaultBucket]), TTL, how long a result is kept (default
	// [DefaultTTL]), MaxBytes, its bound (default [DefaultMaxBytes]),
	// MemoryStorage (dev and tests; default on disk) and Replicas (default 1).
	jsassets.BucketConfig
	// MaxResultBytes bounds one result. Default [DefaultMaxResultBytes].
	MaxResultBytes int64
}

// Defaults applies the defaults and checks that one result fits the bucket.
func (c *Config) Defaults() error {
	c.BucketConfig.Defaults(jsassets.BucketConfig{Bucket: DefaultBucket, TTL: DefaultTTL, MaxBytes: DefaultMaxBytes})
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.MaxResultBytes > c.MaxBytes {
		return fmt.Errorf("results: the ceiling on one result (%d bytes) is over the bucket's bound (%d bytes)", c.MaxResultBytes, c.MaxBytes)
	}
	return nil
}

// Metadata keys of a stored result.
const (
	metaOwner   = "owner"
	metaTool    = "tool"
	metaType    = "content-type"
	metaExpires = "expires-unix-ms"
)

// Store is the result store of a gateway.
type Store struct {
	cfg Config
	js  jetstream.JetStream
	obs jetstream.ObjectStore
}

// New creates (or updates) the bucket and returns the store.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if err := cfg.Defaults(); err != nil {
		return nil, err
	}
	obs, err := jsassets.EnsureObjectStore(ctx, js, jetstream.ObjectStoreConfig{
		Bucket:      cfg.Bucket,
		Description: "toolfleet gateway: results too large to return inline, by handle id",
		TTL:         cfg.TTL,
		MaxBytes:    cfg.MaxBytes,
		Storage:     cfg.Storage(),
		Replicas:    max(cfg.Replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("results: %w", err)
	}
	return &Store{cfg: cfg, js: js, obs: obs}, nil
}

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }

// NewID returns a random 128-bit result id (32 lowercase hex characters).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ValidID reports whether id has the form of [NewID]'s ids.
func ValidID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Put stores data for owner and returns its handle. Errors: [ErrTooLarge],
// [ErrFull], [ErrUnavailable].
func (s *Store) Put(ctx context.Context, owner, tool, contentType string, data []byte) (*toolfleetv1.ResultHandle, error) {
	if int64(len(data)) > s.cfg.MaxResultBytes {
		return nil, ErrTooLarge
	}
	// The expiry counts from before the first chunk is written: the bucket's
	// TTL drops no chunk before it (give or take the clocks of gateway and NATS).
	expires := time.Now().Add(s.cfg.TTL)
	id := NewID()
	_, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: id, Metadata: map[string]string{
		metaOwner:   owner,
		metaTool:    tool,
		metaType:    contentType,
		metaExpires: strconv.FormatInt(expires.UnixMilli(), 10),
	}}, bytes.NewReader(data))
	if err != nil {
		if isFull(err) {
			return nil, fmt.Errorf("%w: %w", ErrFull, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return &toolfleetv1.ResultHandle{
		Id:          id,
		SizeBytes:   int64(len(data)),
		ExpiresAt:   timestamppb.New(expires),
		ContentType: contentType,
		Preview:     preview(data),
	}, nil
}

// isFull reports the refusal of a full bucket (maximum bytes exceeded).
func isFull(err error) bool {
	// NATS says so only in the text of its refusal (err_code 10077, "store failed", covers more).
	return strings.Contains(err.Error(), "maximum bytes exceeded")
}

// Open returns the result id of owner, to be read and closed by the caller
// before ctx ends (a Read waiting for the store returns ctx's error when it
// does). Errors:
// [ErrInvalidID] (before the store is asked), [ErrNotFound], [ErrUnavailable].
func (s *Store) Open(ctx context.Context, owner, id string) (*Object, error) {
	if !ValidID(id) {
		return nil, ErrInvalidID
	}
	info, err := s.obs.GetInfo(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	md := info.Metadata
	expires, perr := strconv.ParseInt(md[metaExpires], 10, 64)
	// Past its expiry its chunks may be gone while its metadata is not yet.
	if md[metaOwner] != owner || perr != nil || time.Now().UnixMilli() >= expires {
		return nil, ErrNotFound
	}
	if info.Opts != nil && info.Opts.Link != nil { // Put never links: not a result
		return nil, ErrNotFound
	}
	r, err := s.openChunks(ctx, info)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return &Object{ReadCloser: r, ContentType: md[metaType], Size: int64(info.Size)}, nil
}

// preview returns the first bytes of data, at most PreviewBytes, cut at a
// UTF-8 boundary.
func preview(data []byte) string {
	n := min(len(data), PreviewBytes)
	for n > 0 && n < len(data) && !utf8.RuneStart(data[n]) {
		n--
	}
	return string(data[:n])
}

// Object is a stored result being read; Close it.
type Object struct {
	io.ReadCloser
	// ContentType is the stored media type.
	ContentType string
	// Size is the result's size in bytes.
	Size int64
}
