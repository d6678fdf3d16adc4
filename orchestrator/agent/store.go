package agent

import (
	"bytes"
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
)

// Store defaults.
const (
	DefaultTranscriptBucket = "toolfleet_transcripts"
	DefaultBlobBucket       = "toolfleet_run_blobs"
	// DefaultTranscriptBytes bounds the transcript bucket (file storage).
	DefaultTranscriptBytes = 4 << 30
	// DefaultBlobBytes bounds the blob bucket.
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
	// MaxTranscriptBytes and MaxBlobBytes bound the buckets (defaults
	// DefaultTranscriptBytes and DefaultBlobBytes; 64 and 128 MiB in memory).
	MaxTranscriptBytes int64
	MaxBlobBytes       int64
	// Memory keeps both buckets in memory (tests).
	Memory bool
}

// Store keeps run transcripts in a JetStream KV bucket, one key per message
// ("<run_id>.<seq>"), and blobs (inputs, large results, tool lists) in a
// content-addressed Object Store. Appends are create-only, so a retried
// activity that already wrote its message finds it instead of writing twice.
type Store struct {
	kv    jetstream.KeyValue
	blobs jetstream.ObjectStore
}

// OpenStore creates or opens the buckets.
func OpenStore(ctx context.Context, js jetstream.JetStream, cfg StoreConfig) (*Store, error) {
	if cfg.TranscriptBucket == "" {
		cfg.TranscriptBucket = DefaultTranscriptBucket
	}
	if cfg.BlobBucket == "" {
		cfg.BlobBucket = DefaultBlobBucket
	}
	if cfg.MaxTranscriptBytes <= 0 {
		cfg.MaxTranscriptBytes = DefaultTranscriptBytes
		if cfg.Memory {
			cfg.MaxTranscriptBytes = 64 << 20
		}
	}
	if cfg.MaxBlobBytes <= 0 {
		cfg.MaxBlobBytes = DefaultBlobBytes
		if cfg.Memory {
			cfg.MaxBlobBytes = 128 << 20
		}
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       cfg.TranscriptBucket,
		Description:  "toolfleet agent run transcripts: one message per key <run_id>.<seq>",
		MaxBytes:     cfg.MaxTranscriptBytes,
		MaxValueSize: MaxMessageBytes,
		Storage:      storage,
	})
	if err != nil {
		return nil, fmt.Errorf("agent: transcript bucket %s: %w", cfg.TranscriptBucket, err)
	}
	blobs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      cfg.BlobBucket,
		Description: "toolfleet agent run blobs, content-addressed (sha256)",
		MaxBytes:    cfg.MaxBlobBytes,
		Storage:     storage,
	})
	if err != nil {
		return nil, fmt.Errorf("agent: blob bucket %s: %w", cfg.BlobBucket, err)
	}
	return &Store{kv: kv, blobs: blobs}, nil
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
			if !bytes.Equal(old.Value(), b) {
				return fmt.Errorf("%w: %s", ErrConflict, key)
			}
		}
	}
	return nil
}

// At returns the message at seq, or nil when the position is empty.
func (s *Store) At(ctx context.Context, runID string, seq int) (*toolfleetv1.Message, error) {
	e, err := s.kv.Get(ctx, msgKey(runID, seq))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agent: read message %d: %w", seq, err)
	}
	m := &toolfleetv1.Message{}
	if err := proto.Unmarshal(e.Value(), m); err != nil {
		return nil, fmt.Errorf("agent: decode message %d: %w", seq, err)
	}
	return m, nil
}

// Load returns the first n messages of run (n < 0: all of them). Positions
// beyond n (a zombie attempt's write) are ignored.
func (s *Store) Load(ctx context.Context, runID string, n int) ([]*toolfleetv1.Message, error) {
	if n == 0 {
		return nil, nil
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
		m := &toolfleetv1.Message{}
		if err := proto.Unmarshal(e.Value(), m); err != nil {
			return nil, fmt.Errorf("agent: decode message %d: %w", seq, err)
		}
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
	b, err := s.blobs.GetBytes(ctx, ref)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("agent: blob %s: %w", ref, err)
	}
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
