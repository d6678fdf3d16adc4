package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// Asset is the JetStream KV bucket of the shared limit state (docs/operations.md
// "JetStream assets"). Its max age outlives the longest byte window.
var Asset = jsassets.RateLimits

// errConflict: the key changed since it was read (compare-and-set lost).
var errConflict = errors.New("ratelimit: key changed")

// store holds the shared state: a value and its revision per key (0: none).
type store interface {
	get(ctx context.Context, key string) ([]byte, uint64, error)
	// cas writes val if the key's revision still is rev (0: the key does not
	// exist), returning the new revision, or errConflict.
	cas(ctx context.Context, key string, val []byte, rev uint64) (uint64, error)
	forget(key string)
}

// memStore is the state of one replica alone (WhenNATSDown=local, and a
// gateway without NATS).
type memStore struct {
	mu sync.Mutex
	m  map[string]memValue
}

type memValue struct {
	val []byte
	rev uint64
}

func newMemStore() *memStore { return &memStore{m: map[string]memValue{}} }

func (s *memStore) get(_ context.Context, key string) ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.m[key]
	return v.val, v.rev, nil
}

func (s *memStore) cas(_ context.Context, key string, val []byte, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[key].rev != rev {
		return 0, errConflict
	}
	v := memValue{val: val, rev: rev + 1}
	s.m[key] = v
	return v.rev, nil
}

// forget drops a key the limiter evicted: the memory store holds only the
// keys the limiter tracks, so it is bounded by Config.MaxKeys.
func (s *memStore) forget(key string) {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

// kvStore is the fleet's shared state in a NATS KV bucket.
type kvStore struct {
	nc *nats.Conn
	kv jetstream.KeyValue
}

// newKVStore creates (or updates) the bucket.
func newKVStore(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config) (*kvStore, error) {
	s := cfg.Assets.Settings(Asset.Named(cfg.Bucket))
	kv, err := jsassets.EnsureKeyValue(ctx, js, s.KeyValue(jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "toolfleet gateway: rate limit and quota state by (limit, rule, principal)",
		History:     1,
	}))
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	return &kvStore{nc: nc, kv: kv}, nil
}

func (s *kvStore) up() bool { return s != nil && s.nc.IsConnected() }

func (s *kvStore) get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("ratelimit: get %s: %w", key, err)
	}
	return e.Value(), e.Revision(), nil
}

func (s *kvStore) cas(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	var n uint64
	var err error
	if rev == 0 {
		n, err = s.kv.Create(ctx, key, val)
	} else {
		n, err = s.kv.Update(ctx, key, val, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, errConflict
	}
	if err != nil {
		return 0, fmt.Errorf("ratelimit: write %s: %w", key, err)
	}
	return n, nil
}

func (*kvStore) forget(string) {} // keys lapse by the bucket's max age and byte bound
