package runstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
	ErrConflict = errors.New("runstore: transcript position already holds another message")
	// ErrGap means the transcript is shorter than the workflow expects.
	ErrGap = errors.New("runstore: transcript is missing messages")
	// ErrNotFound means a blob does not exist.
	ErrNotFound = errors.New("runstore: blob not found")
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
	// RecordsBucket is the run records bucket (default DefaultRecordsBucket):
	// reap timers and quotas. Its max age (Assets) is the run retention.
	RecordsBucket string
	// Settings, when set, are written for every process that starts runs
	// (OpenStore only; the quota's Retention is the records bucket's max age).
	Settings *Settings
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

	js             jetstream.JetStream
	transcriptName string
	// recs is the run records bucket (reap timers, quotas); nil until bound
	// (BindStore binds it on first use, at most every recordsRetry).
	recsMu    sync.Mutex
	recs      *records
	recsTried time.Time
	recsName  string
	// retention is how long a closed run's data is kept (0: no timer; the
	// buckets' max age alone frees it). Set by OpenStore.
	retention time.Duration
	// owners caches run id → principal for charging (bounded).
	ownersMu sync.Mutex
	owners   map[string]ownerOf
	// blobName is the blob bucket's name; blobRoom caches its fill for
	// the program reserve (programRoom).
	blobName   string
	blobRoomMu sync.Mutex
	blobRoom   blobFill
}

// ownerOf is who holds a run id: the principal's subject, and whether the
// id is a program's (programs count bytes, never runs).
type ownerOf struct {
	subject string
	program bool
}

// recordsRetry is how often a bound store looks for a records bucket it did
// not find.
const recordsRetry = 10 * time.Second

// maxOwners bounds the run → principal cache.
const maxOwners = 4096

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
		assets = assets.WithStorage(jsassets.StorageMemory)
	}
	ts := assets.Settings(jsassets.Transcripts.Named(cfg.TranscriptBucket))
	bs := assets.Settings(jsassets.RunBlobs.Named(cfg.BlobBucket))
	if cfg.Memory {
		// Tests: in memory, at most 64 and 128 MiB unless told otherwise
		// (the fields, or smaller bounds in Assets).
		cfg.MaxTranscriptBytes = cmp.Or(cfg.MaxTranscriptBytes, min(ts.MaxBytes, 64<<20))
		cfg.MaxBlobBytes = cmp.Or(cfg.MaxBlobBytes, min(bs.MaxBytes, 128<<20))
	}
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
		return nil, fmt.Errorf("runstore: transcript bucket: %w", err)
	}
	blobs, err := jsassets.EnsureObjectStore(ctx, js, bs.ObjectStore(jetstream.ObjectStoreConfig{
		Bucket:      cfg.BlobBucket,
		Description: "toolfleet agent run blobs, content-addressed (sha256)",
	}))
	if err != nil {
		return nil, fmt.Errorf("runstore: blob bucket: %w", err)
	}
	rs := assets.Settings(jsassets.RunRecords.Named(cfg.RecordsBucket))
	if cfg.Memory {
		rs.MaxBytes = min(rs.MaxBytes, 16<<20)
	}
	recs, err := openRecords(ctx, js, cmp.Or(cfg.RecordsBucket, DefaultRecordsBucket), rs)
	if err != nil {
		return nil, err
	}
	st := newStore(js, kv, blobs, cfg)
	st.recs, st.retention = recs, rs.MaxAge
	if cfg.Settings != nil {
		set := *cfg.Settings
		set.Quota.Retention = rs.MaxAge
		if err := recs.writeSettings(ctx, set); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func newStore(js jetstream.JetStream, kv jetstream.KeyValue, blobs jetstream.ObjectStore, cfg StoreConfig) *Store {
	st := &Store{kv: kv, blobs: blobs, js: js, transcriptName: cmp.Or(cfg.TranscriptBucket, DefaultTranscriptBucket),
		recsName: cmp.Or(cfg.RecordsBucket, DefaultRecordsBucket), owners: map[string]ownerOf{},
		blobName: cmp.Or(cfg.BlobBucket, DefaultBlobBucket)}
	if n := cfg.CacheBytes; n >= 0 {
		if n == 0 {
			n = DefaultCacheBytes
		}
		st.msgs, st.blobCache = newByteCache(n, cacheMessageBytes), newByteCache(n/4, cacheBlobBytes)
	}
	return st
}

// records returns the records bucket, binding it when the store was bound
// (BindStore) and the orchestrator has made it since; nil without one.
func (s *Store) records(ctx context.Context) *records {
	s.recsMu.Lock()
	defer s.recsMu.Unlock()
	if s.recs != nil || s.js == nil || time.Since(s.recsTried) < recordsRetry {
		return s.recs
	}
	s.recsTried = time.Now()
	if kv, err := s.js.KeyValue(ctx, s.recsName); err == nil {
		s.recs = &records{kv: kv, js: s.js, bucket: s.recsName}
	}
	return s.recs
}

// Owner is the subject of the principal that started runID ("" when the
// run has no record).
func (s *Store) Owner(ctx context.Context, runID string) string {
	return s.holder(ctx, runID).subject
}

// holder is who holds runID (a run or a program; zero when it has no record).
func (s *Store) holder(ctx context.Context, runID string) ownerOf {
	s.ownersMu.Lock()
	o, ok := s.owners[runID]
	s.ownersMu.Unlock()
	if ok {
		return o
	}
	b, err := s.Meta(ctx, runID)
	if err != nil {
		return ownerOf{}
	}
	var meta holderRecord
	if json.Unmarshal(b, &meta) != nil {
		return ownerOf{}
	}
	o = ownerOf{subject: meta.Principal.Subject, program: meta.Kind == KindProgram}
	s.ownersMu.Lock()
	if len(s.owners) >= maxOwners {
		clear(s.owners)
	}
	s.owners[runID] = o
	s.ownersMu.Unlock()
	return o
}

// Purge frees everything the store holds for runID: its blobs, its
// messages and its description. The reaper calls it once the run has been
// closed for the retention; the run id is then unknown to the store.
func (s *Store) Purge(ctx context.Context, runID string) error {
	lister, err := s.kv.ListKeysFiltered(ctx, runID+".blob.*")
	if err != nil {
		return fmt.Errorf("runstore: list blobs of %s: %w", runID, err)
	}
	var names []string
	for k := range lister.Keys() {
		names = append(names, runID+"/sha256-"+strings.TrimPrefix(k, runID+".blob."))
	}
	for _, name := range names {
		if err := s.blobs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("runstore: delete blob %s: %w", name, err)
		}
	}
	st, err := s.js.Stream(ctx, "KV_"+s.transcriptName)
	if err != nil {
		return fmt.Errorf("runstore: transcript stream: %w", err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject("$KV."+s.transcriptName+"."+runID+".>")); err != nil {
		return fmt.Errorf("runstore: purge transcript of %s: %w", runID, err)
	}
	s.ownersMu.Lock()
	delete(s.owners, runID)
	s.ownersMu.Unlock()
	return nil
}

// decode decodes a stored message.
func decode(b []byte, seq int) (*toolfleetv1.Message, error) {
	m := &toolfleetv1.Message{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("runstore: decode message %d: %w", seq, err)
	}
	return m, nil
}

func msgKey(runID string, seq int) string { return fmt.Sprintf("%s.%08d", runID, seq) }

// Append writes msgs at positions seq, seq+1, … of run. A position that
// already holds the same message counts as written (a retry); one holding
// another message is [ErrConflict].
func (s *Store) Append(ctx context.Context, runID string, seq int, msgs ...*toolfleetv1.Message) error {
	var stored int64
	defer func() { s.charge(ctx, runID, stored, countStored) }()
	for i, m := range msgs {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return fmt.Errorf("runstore: encode message: %w", err)
		}
		if len(b) > MaxMessageBytes {
			return fmt.Errorf("runstore: message of %d bytes over the %d-byte limit", len(b), MaxMessageBytes)
		}
		key := msgKey(runID, seq+i)
		if _, err := s.kv.Create(ctx, key, b); err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("runstore: append %s: %w", key, err)
			}
			old, gerr := s.kv.Get(ctx, key)
			if gerr != nil {
				return fmt.Errorf("runstore: append %s: %w", key, gerr)
			}
			s.msgs.add(key, old.Value())
			if !bytes.Equal(old.Value(), b) {
				return fmt.Errorf("%w: %s", ErrConflict, key)
			}
			continue
		}
		stored += int64(len(b) + len(key))
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
		return nil, fmt.Errorf("runstore: read message %d: %w", seq, err)
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
		return nil, fmt.Errorf("runstore: load transcript: %w", err)
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
			return nil, fmt.Errorf("runstore: load transcript: %w", ctx.Err())
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

// metaKey holds a run's spec and principal next to its messages.
func metaKey(runID string) string { return runID + ".meta" }

// PutMeta stores a run's description (spec and principal, JSON) once: the
// first start of a run id wins, and reports created false for a later one.
func (s *Store) PutMeta(ctx context.Context, runID string, b []byte) (created bool, err error) {
	if _, err := s.kv.Create(ctx, metaKey(runID), b); errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("runstore: store run %s: %w", runID, err)
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
		return nil, fmt.Errorf("runstore: read run %s: %w", runID, err)
	}
	return e.Value(), nil
}

// DeleteMeta removes what PutMeta stored for runID: a start that created
// the description but lost the id to a workflow of another kind gives the
// id back.
func (s *Store) DeleteMeta(ctx context.Context, runID string) error {
	return s.kv.Delete(ctx, metaKey(runID))
}
