package connections

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Keys of the bucket. A principal's subject is hashed into its keys: subjects
// may hold characters KV keys cannot, and the bucket's key names should not
// list who has connected.
const (
	connPrefix  = "conn."
	statePrefix = "state."
)

// subjectKey is the hashed subject as it appears in keys.
func subjectKey(subject string) string {
	h := sha256.Sum256([]byte(subject))
	return hex.EncodeToString(h[:16])
}

func connKey(subject, provider string) string {
	return connPrefix + subjectKey(subject) + "." + provider
}

// record is one connection as stored, sealed, in the bucket.
type record struct {
	ID       string    `json:"id"`
	Subject  string    `json:"subject"`
	Provider string    `json:"provider"`
	Scopes   []string  `json:"scopes"`
	Created  time.Time `json:"created"`
	// Refreshed is when the tokens were last renewed (zero: never).
	Refreshed time.Time `json:"refreshed,omitzero"`
	// Access is the connection's own access token; Narrowed holds access
	// tokens for subsets of its scopes, keyed by scopeSet.
	Access   token            `json:"access"`
	Narrowed map[string]token `json:"narrowed,omitempty"`
	Refresh  string           `json:"refresh,omitempty"`
	// RefreshingUntil is the lease of the replica refreshing the tokens now.
	RefreshingUntil time.Time `json:"refreshing_until,omitzero"`
}

// token is one access token and when it expires (zero: unknown).
type token struct {
	Value  string    `json:"value"`
	Type   string    `json:"type,omitempty"`
	Expiry time.Time `json:"expiry,omitzero"`
}

// Connection is what a principal sees of one of its connections: never a token.
type Connection struct {
	ID       string    `json:"id"`
	Provider string    `json:"provider"`
	Scopes   []string  `json:"scopes"`
	Created  time.Time `json:"created"`
	// Expires is when the current access token expires (zero: unknown); the
	// gateway refreshes it before that when the provider gave a refresh token.
	Expires   time.Time `json:"expires,omitzero"`
	Refreshed time.Time `json:"refreshed,omitzero"`
	// Refreshable: the provider gave a refresh token.
	Refreshable bool `json:"refreshable"`
}

func (r *record) public() Connection {
	return Connection{ID: r.ID, Provider: r.Provider, Scopes: slices.Clone(r.Scopes), Created: r.Created,
		Expires: r.Access.Expiry, Refreshed: r.Refreshed, Refreshable: r.Refresh != ""}
}

// store reads and writes sealed records. Its bucket is made on first use
// (and again after a failure): a gateway starts while NATS is away.
type store struct {
	js   jetstream.JetStream
	kvc  jetstream.KeyValueConfig
	ring *KeyRing

	mu sync.Mutex
	kv jetstream.KeyValue
}

// bucket returns the bucket, creating or updating it first when needed.
func (s *store) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, s.kvc)
	if err != nil {
		return nil, fmt.Errorf("connections: bucket %s: %w", s.kvc.Bucket, err)
	}
	s.kv = kv
	return kv, nil
}

// delete removes key (only at revision rev with jetstream.LastRevision).
func (s *store) delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	kv, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	return kv.Delete(ctx, key, opts...)
}

// errNoRecord: the key holds nothing (or was deleted).
var errNoRecord = errors.New("connections: no record")

// get reads the record at key and its revision.
func (s *store) get(ctx context.Context, key string, into any) (uint64, error) {
	kv, err := s.bucket(ctx)
	if err != nil {
		return 0, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return 0, errNoRecord
	}
	if err != nil {
		return 0, fmt.Errorf("connections: read: %w", err)
	}
	pt, err := s.ring.Open(e.Value(), []byte(key))
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(pt, into); err != nil {
		return 0, fmt.Errorf("connections: record %s: %w", e.Key(), err)
	}
	return e.Revision(), nil
}

// put writes v at key: created when rev is 0 (failing with
// jetstream.ErrKeyExists when it exists), else only over revision rev
// (compare-and-swap; another writer's change fails it). It returns the new
// revision.
func (s *store) put(ctx context.Context, key string, v any, rev uint64, opts ...jetstream.KVCreateOpt) (uint64, error) {
	pt, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	kv, err := s.bucket(ctx)
	if err != nil {
		return 0, err
	}
	sealed := s.ring.Seal(pt, []byte(key))
	if rev == 0 {
		return kv.Create(ctx, key, sealed, opts...)
	}
	return kv.Update(ctx, key, sealed, rev)
}

// overwrite writes v at key whatever it held.
func (s *store) overwrite(ctx context.Context, key string, v any) error {
	pt, err := json.Marshal(v)
	if err != nil {
		return err
	}
	kv, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, key, s.ring.Seal(pt, []byte(key)))
	return err
}

// keys lists the keys under prefix (a subject filter ending in ".>").
func (s *store) keys(ctx context.Context, filter string) ([]string, error) {
	kv, err := s.bucket(ctx)
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("connections: list: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var out []string
	for k := range lister.Keys() {
		out = append(out, k)
	}
	return out, nil
}
