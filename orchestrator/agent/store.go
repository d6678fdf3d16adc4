package agent

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// Store defaults.
const (
	DefaultTranscriptBucket = "toolfleet_transcripts"
	DefaultBlobBucket       = "toolfleet_run_blobs"
	// DefaultTranscriptBytes bounds the transcript bucket in the prod
	// profile (jsassets.Transcripts).
	DefaultTranscriptBytes = 4 << 30
	// DefaultBlobBytes bounds the blob bucket in the prod profile
	// (jsassets.RunBlobs).
	DefaultBlobBytes = 16 << 30
	// MaxMessageBytes bounds one stored message; larger tool results are
	// stored as blobs and previewed (see InlineLimit).
	MaxMessageBytes = 512 << 10
)

// Sentinel errors of the store.
var (
	// ErrConflict means another message already holds a position.
	ErrConflict = errors.New("agent: transcript position already holds another message")
	// ErrGap means the transcript is shorter than the workflow expects.
	ErrGap = errors.New("agent: transcript is missing messages")
	// ErrNotFound means a blob does not exist.
	ErrNotFound = errors.New("agent: blob not found")
)

// StoreConfig configures a [Store].
type StoreConfig struct {
	TranscriptBucket string
	BlobBucket       string
	// MaxTranscriptBytes and MaxBlobBytes bound the buckets (defaults: the
	// byte bounds of Assets; 64 and 128 MiB with Memory).
	MaxTranscriptBytes int64
	MaxBlobBytes       int64
	// Memory keeps both buckets in memory (tests).
	Memory bool
	// Assets sets the buckets' replicas, storage, byte bounds and retention
	// (sdk/jsassets; the zero value: R1, file, the prod profile). The
	// fields above win over its profile when set.
	Assets jsassets.Config
	// CacheBytes bounds the in-process cache of transcript messages (default
	// DefaultCacheBytes; a quarter as much again for blobs; negative turns it off).
	CacheBytes int64
}

// DefaultCacheBytes bounds the store's message cache. A run's messages are
// mostly small (tool results over the inline limit are blobs), so 64 MiB
// holds the transcripts of thousands of runs in flight.
const DefaultCacheBytes = 64 << 20

// The largest message and blob the cache keeps.
const (
	cacheMessageBytes = 64 << 10
	cacheBlobBytes    = 1 << 20
)

// Store keeps run transcripts in a JetStream KV bucket, one key per message
// ("<run_id>.<seq>"), and blobs (inputs, large results, tool lists) in a
// content-addressed Object Store. Appends are create-only, so a retried
// activity that already wrote its message finds it instead of writing twice.
type Store struct {
	kv    jetstream.KeyValue
	blobs jetstream.ObjectStore
	// Transcript positions and blobs never change once written (appends are
	// create-only, blobs content-addressed), so what this process read or
	// wrote can be served again without a round trip, on any replica. Values
	// are kept encoded: every read decodes a fresh message.
	msgs, blobCache *byteCache
}

// OpenStore creates or opens the buckets.
func OpenStore(ctx context.Context, js jetstream.JetStream, cfg StoreConfig) (*Store, error) {
	if cfg.TranscriptBucket == "" {
		cfg.TranscriptBucket = DefaultTranscriptBucket
	}
	if cfg.BlobBucket == "" {
		cfg.BlobBucket = DefaultBlobBucket
	}
	assets := cfg.Assets
	if cfg.Memory {
		// Tests: in memory, at most 64 and 128 MiB unless told otherwise.
		assets = assets.WithStorage(jsassets.StorageMemory)
		cfg.MaxTranscriptBytes = cmp.Or(cfg.MaxTranscriptBytes, 64<<20)
		cfg.MaxBlobBytes = cmp.Or(cfg.MaxBlobBytes, 128<<20)
	}
	ts := assets.Settings(jsassets.Transcripts.Named(cfg.TranscriptBucket))
	bs := assets.Settings(jsassets.RunBlobs.Named(cfg.BlobBucket))
	if cfg.MaxTranscriptBytes > 0 {
		ts.MaxBytes = cfg.MaxTranscriptBytes
	}
	if cfg.MaxBlobBytes > 0 {
		bs.MaxBytes = cfg.MaxBlobBytes
	}
	kv, err := jsassets.EnsureKeyValue(ctx, js, ts.KeyValue(jetstream.KeyValueConfig{
		Bucket:       cfg.TranscriptBucket,
		Description:  "toolfleet agent run transcripts: one message per key <run_id>.<seq>",
		MaxValueSize: MaxMessageBytes,
	}))
	if err != nil {
		return nil, fmt.Errorf("agent: transcript bucket: %w", err)
	}
	blobs, err := jsassets.EnsureObjectStore(ctx, js, bs.ObjectStore(jetstream.ObjectStoreConfig{
		Bucket:      cfg.BlobBucket,
		Description: "toolfleet agent run blobs, content-addressed (sha256)",
	}))
	if err != nil {
		return nil, fmt.Errorf("agent: blob bucket: %w", err)
	}
	st := &Store{kv: kv, blobs: blobs}
	if n := cfg.CacheBytes; n >= 0 {
		if n == 0 {
			n = DefaultCacheBytes
		}
		st.msgs, st.blobCache = newByteCache(n, cacheMessageBytes), newByteCache(n/4, cacheBlobBytes)
	}
	return st, nil
}

// decode decodes a stored message.
func decode(b []byte, seq int) (*toolfleetv1.Message, error) {
	m := &toolfleetv1.Message{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("agent: decode message %d: %w", seq, err)
	}
	return m, nil
}

func msgKey(runID string, seq int) string { return fmt.Sprintf("%s.%08d", runID, seq) }

// Append writes msgs at positions seq, seq+1, … of run. A position that
// already holds the same message counts as written (a retry); one holding
// another message is [ErrConflict].
func (s *Store) Append(ctx context.Context, runID string, seq int, msgs ...*toolfleetv1.Message) error {
	for i, m := range msgs {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return fmt.Errorf("agent: encode message: %w", err)
		}
		if len(b) > MaxMessageBytes {
			return fmt.Errorf("agent: message of %d bytes over the %d-byte limit", len(b), MaxMessageBytes)
		}
		key := msgKey(runID, seq+i)
		if _, err := s.kv.Create(ctx, key, b); err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("agent: append %s: %w", key, err)
			}
			old, gerr := s.kv.Get(ctx, key)
			if gerr != nil {
				return fmt.Errorf("agent: append %s: %w", key, gerr)
			}
			s.msgs.add(key, old.Value())
			if !bytes.Equal(old.Value(), b) {
				return fmt.Errorf("%w: %s", ErrConflict, key)
			}
			continue
		}
		s.msgs.add(key, b)
	}
	return nil
}

// At returns the message at seq, or nil when the position is empty.
func (s *Store) At(ctx context.Context, runID string, seq int) (*toolfleetv1.Message, error) {
	key := msgKey(runID, seq)
	if b, ok := s.msgs.get(key); ok {
		return decode(b, seq)
	}
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil // an empty position is not cached: another worker may fill it
	}
	if err != nil {
		return nil, fmt.Errorf("agent: read message %d: %w", seq, err)
	}
	s.msgs.add(key, e.Value())
	return decode(e.Value(), seq)
}

// maxCacheMisses is how many uncached positions Load reads one by one; with
// more it reads the run's keys in one watch.
const maxCacheMisses = 8

// Load returns the first n messages of run (n < 0: all of them). Positions
// beyond n (a zombie attempt's write) are ignored.
func (s *Store) Load(ctx context.Context, runID string, n int) ([]*toolfleetv1.Message, error) {
	if n == 0 {
		return nil, nil
	}
	if n > 0 && s.msgs != nil {
		if out, ok, err := s.loadCached(ctx, runID, n); ok || err != nil {
			return out, err
		}
	}
	w, err := s.kv.Watch(ctx, runID+".*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("agent: load transcript: %w", err)
	}
	defer func() { _ = w.Stop() }()
	type item struct {
		seq int
		msg *toolfleetv1.Message
	}
	var items []item
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("agent: load transcript: %w", ctx.Err())
		case e = <-w.Updates():
		}
		if e == nil {
			break // the initial values are all delivered
		}
		seq, err := strconv.Atoi(strings.TrimPrefix(e.Key(), runID+"."))
		if err != nil || (n >= 0 && seq >= n) {
			continue
		}
		m, err := decode(e.Value(), seq)
		if err != nil {
			return nil, err
		}
		s.msgs.add(e.Key(), e.Value())
		items = append(items, item{seq, m})
	}
	slices.SortFunc(items, func(a, b item) int { return a.seq - b.seq })
	out := make([]*toolfleetv1.Message, len(items))
	for i, it := range items {
		if it.seq != i {
			return nil, fmt.Errorf("%w: position %d", ErrGap, i)
		}
		out[i] = it.msg
	}
	if n >= 0 && len(out) != n {
		return nil, fmt.Errorf("%w: have %d of %d", ErrGap, len(out), n)
	}
	return out, nil
}

// loadCached loads the first n messages from the cache, reading the few it
// lacks one by one; ok is false when too many are missing.
func (s *Store) loadCached(ctx context.Context, runID string, n int) (_ []*toolfleetv1.Message, ok bool, _ error) {
	out := make([]*toolfleetv1.Message, n)
	var missing []int
	for i := range n {
		b, hit := s.msgs.get(msgKey(runID, i))
		if !hit {
			if missing = append(missing, i); len(missing) > maxCacheMisses {
				return nil, false, nil
			}
			continue
		}
		m, err := decode(b, i)
		if err != nil {
			return nil, false, err
		}
		out[i] = m
	}
	for _, i := range missing {
		m, err := s.At(ctx, runID, i)
		if err != nil {
			return nil, false, err
		}
		if m == nil {
			return nil, false, fmt.Errorf("%w: position %d", ErrGap, i)
		}
		out[i] = m
	}
	return out, true, nil
}

// PutBlob stores data under its content address and returns it ("sha256-<hex>").
func (s *Store) PutBlob(ctx context.Context, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	ref := "sha256-" + hex.EncodeToString(sum[:])
	if _, err := s.blobs.GetInfo(ctx, ref); err == nil {
		return ref, nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", fmt.Errorf("agent: blob %s: %w", ref, err)
	}
	if _, err := s.blobs.PutBytes(ctx, ref, data); err != nil {
		return "", fmt.Errorf("agent: put blob: %w", err)
	}
	return ref, nil
}

// Blob returns the blob named ref.
func (s *Store) Blob(ctx context.Context, ref string) ([]byte, error) {
	if b, ok := s.blobCache.get(ref); ok {
		return bytes.Clone(b), nil
	}
	b, err := s.blobs.GetBytes(ctx, ref)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("agent: blob %s: %w", ref, err)
	}
	s.blobCache.add(ref, bytes.Clone(b))
	return b, nil
}

// PutMessages stores msgs as one blob (the input of StartRun or SendMessage).
func (s *Store) PutMessages(ctx context.Context, msgs ...*toolfleetv1.Message) (string, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&toolfleetv1.Conversation{Messages: msgs})
	if err != nil {
		return "", fmt.Errorf("agent: encode messages: %w", err)
	}
	return s.PutBlob(ctx, b)
}

// Messages reads a blob written by PutMessages.
func (s *Store) Messages(ctx context.Context, ref string) ([]*toolfleetv1.Message, error) {
	b, err := s.Blob(ctx, ref)
	if err != nil {
		return nil, err
	}
	c := &toolfleetv1.Conversation{}
	if err := proto.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("agent: decode messages %s: %w", ref, err)
	}
	return c.GetMessages(), nil
}

// metaKey holds a run's spec and principal next to its messages.
func metaKey(runID string) string { return runID + ".meta" }

// PutMeta stores a run's description (spec and principal, JSON) once: the
// first start of a run id wins, and reports created false for a later one.
func (s *Store) PutMeta(ctx context.Context, runID string, b []byte) (created bool, err error) {
	if _, err := s.kv.Create(ctx, metaKey(runID), b); errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("agent: store run %s: %w", runID, err)
	}
	return true, nil
}

// Meta returns what PutMeta stored, or ErrNotFound.
func (s *Store) Meta(ctx context.Context, runID string) ([]byte, error) {
	e, err := s.kv.Get(ctx, metaKey(runID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: run %s", ErrNotFound, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("agent: read run %s: %w", runID, err)
	}
	return e.Value(), nil
}
