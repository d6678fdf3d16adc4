// Package kv implements the KV toolkit (tools.kv.v1.KVService): a durable key-value
// memory for agents in a NATS JetStream KV bucket.
//
// Keys follow NATS KV's rules (the contract checks them with a pattern, so invalid
// keys never reach the bucket). Put is idempotent: storing the value a key already
// holds writes nothing and returns the current revision. Missing keys are execution
// errors that tell the model to List first.
package kv

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// Defaults of BucketConfig.
const (
	DefaultBucket  = "agent_memory"
	DefaultHistory = 10
)

// DefaultListLimit is the number of keys List returns when the request sets none.
const DefaultListLimit = 100

// retryAfter is suggested to callers when NATS does not answer.
const retryAfter = 2 * time.Second

// DefaultOpTimeout bounds one call's work on the store (see WithOpTimeout).
const DefaultOpTimeout = 4 * time.Second

// errStoreTimeout is the cause of the service's own per-call deadline.
var errStoreTimeout = errors.New("kv: the store did not answer in time")

// BucketConfig names and shapes the bucket the memory lives in.
type BucketConfig struct {
	// Name of the KV bucket. Default DefaultBucket.
	Name string
	// History is the number of revisions kept per key (1-64) of a new
	// bucket; an existing one keeps its own. Default DefaultHistory.
	History uint8
	// Assets sets the bucket's replicas, storage, byte bound and max age
	// (sdk/jsassets, asset jsassets.AgentMemory under Name). Zero: R1, file,
	// the prod profile.
	Assets jsassets.Config
}

// OpenBucket returns the bucket described by cfg, creating it when it is
// missing and bringing an existing one to the configured replicas, byte
// bound and max age (jsassets.EnsureKeyValue; a storage change is refused).
func OpenBucket(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (jetstream.KeyValue, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultBucket
	}
	if cfg.History == 0 {
		cfg.History = DefaultHistory
	}
	// An existing bucket keeps the history it was made with.
	if st, err := js.Stream(ctx, "KV_"+cfg.Name); err == nil {
		if h := st.CachedInfo().Config.MaxMsgsPerSubject; h >= 1 && h <= jetstream.KeyValueMaxHistory {
			cfg.History = uint8(h)
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("kv: open bucket %q: %w", cfg.Name, err)
	}
	s := cfg.Assets.Settings(jsassets.AgentMemory.Named(cfg.Name))
	kv, err := jsassets.EnsureKeyValue(ctx, js, s.KeyValue(jetstream.KeyValueConfig{
		Bucket:      cfg.Name,
		Description: "toolfleet KV toolkit: durable memory for agents",
		History:     cfg.History,
	}))
	if err != nil {
		return nil, fmt.Errorf("kv: bucket: %w", err)
	}
	return kv, nil
}

// Service implements kvv1.KVServiceServer over one bucket.
type Service struct {
	kvv1.UnimplementedKVServiceServer

	kv        jetstream.KeyValue
	opTimeout time.Duration
}

var _ kvv1.KVServiceServer = (*Service)(nil)

// Option configures a Service.
type Option func(*Service)

// WithOpTimeout bounds each call's work on the store, so that an unreachable NATS
// becomes a retryable execution error rather than the caller's deadline running
// out. Default DefaultOpTimeout.
func WithOpTimeout(d time.Duration) Option { return func(s *Service) { s.opTimeout = d } }

// New returns the KV service over kv (see OpenBucket).
func New(kv jetstream.KeyValue, opts ...Option) *Service {
	s := &Service{kv: kv, opTimeout: DefaultOpTimeout}
	for _, o := range opts {
		o(s)
	}
	return s
}

// opContext bounds one call's store work by the service's own deadline.
func (s *Service) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, s.opTimeout, errStoreTimeout)
}

// Put stores req.Value under req.Key unless the key already holds exactly that value.
func (s *Service) Put(ctx context.Context, req *kvv1.PutRequest) (*kvv1.PutResponse, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	cur, err := s.kv.Get(ctx, req.GetKey())
	switch {
	case err == nil && string(cur.Value()) == req.GetValue():
		return &kvv1.PutResponse{Revision: cur.Revision(), Changed: false}, nil
	case err != nil && !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, s.storeError(ctx, "read", req.GetKey(), err)
	}
	rev, err := s.kv.PutString(ctx, req.GetKey(), req.GetValue())
	if err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			return nil, tool.NewError(fmt.Sprintf("the value (%d bytes) is larger than the memory store accepts", len(req.GetValue())),
				tool.WithPromptHint("Store a shorter value, or split it over several keys."), tool.WithDeveloperMessage(err.Error()))
		}
		return nil, s.storeError(ctx, "write", req.GetKey(), err)
	}
	return &kvv1.PutResponse{Revision: rev, Changed: true}, nil
}

// maxIncrementAttempts bounds the compare-and-set rounds of one Increment
// under contention; each round reads the counter and writes it back only if
// no one wrote it in between.
const maxIncrementAttempts = 64

// Increment adds req.By (1 when 0) to the integer counter under req.Key,
// atomically: the new value is written with the revision it was computed
// from (compare-and-set), so concurrent increments never lose one; a lost
// race reads again, at most maxIncrementAttempts times within the service's
// deadline. A missing or deleted key counts as 0.
func (s *Service) Increment(ctx context.Context, req *kvv1.IncrementRequest) (*kvv1.IncrementResponse, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	key, by := req.GetKey(), req.GetBy()
	if by == 0 {
		by = 1
	}
	for attempt := range maxIncrementAttempts {
		var n int64
		var rev uint64
		cur, err := s.kv.Get(ctx, key)
		switch {
		case err == nil:
			rev = cur.Revision()
			if n, err = strconv.ParseInt(strings.TrimSpace(string(cur.Value())), 10, 64); err != nil {
				return nil, tool.NewError(fmt.Sprintf("key %q holds text that is not a whole number, so it is not a counter", key),
					tool.WithPromptHint("Use another key for the counter, or Put a whole number under this one first."))
			}
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		default:
			return nil, s.storeError(ctx, "read", key, err)
		}
		if (by > 0 && n > math.MaxInt64-by) || (by < 0 && n < math.MinInt64-by) {
			return nil, tool.NewError(fmt.Sprintf("adding %d to %d under key %q would overflow a 64-bit counter; nothing was added", by, n, key))
		}
		next := []byte(strconv.FormatInt(n+by, 10))
		var newRev uint64
		if rev == 0 {
			newRev, err = s.kv.Create(ctx, key, next)
		} else {
			newRev, err = s.kv.Update(ctx, key, next, rev)
		}
		if err == nil {
			return &kvv1.IncrementResponse{Value: n + by, Revision: newRev}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			return nil, s.storeError(ctx, "write", key, err)
		}
		// Another writer was first: back off a little (spreading the
		// contenders), then read its value and try again.
		select {
		case <-ctx.Done():
			return nil, s.storeError(ctx, "write", key, context.Cause(ctx))
		case <-time.After(time.Duration(rand.Int64N(int64(min(attempt+1, 10)) * int64(time.Millisecond)))):
		}
	}
	return nil, tool.NewError(fmt.Sprintf("key %q changed too often while it was being incremented; nothing was added", key),
		tool.WithRetry(retryAfter), tool.WithPromptHint("Try again in a moment."))
}

// Get returns the latest value of req.Key, or the value at req.Revision.
func (s *Service) Get(ctx context.Context, req *kvv1.GetRequest) (*kvv1.GetResponse, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	var (
		e   jetstream.KeyValueEntry
		err error
	)
	if rev := req.GetRevision(); rev > 0 {
		e, err = s.kv.GetRevision(ctx, req.GetKey(), rev)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return nil, tool.NewError(
				fmt.Sprintf("key %q has no value at revision %d (it is another key's revision, a deletion, or older than the kept history)", req.GetKey(), rev),
				tool.WithPromptHint("Omit revision to read the latest value."))
		}
	} else {
		e, err = s.kv.Get(ctx, req.GetKey())
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return nil, notFound(req.GetKey())
		}
	}
	if err != nil {
		return nil, s.storeError(ctx, "read", req.GetKey(), err)
	}
	return &kvv1.GetResponse{
		Key:       e.Key(),
		Value:     string(e.Value()),
		Revision:  e.Revision(),
		UpdatedAt: timestamppb.New(e.Created()),
	}, nil
}

// Delete removes req.Key; a key that does not exist is an execution error.
func (s *Service) Delete(ctx context.Context, req *kvv1.DeleteRequest) (*kvv1.DeleteResponse, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	cur, err := s.kv.Get(ctx, req.GetKey())
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, notFound(req.GetKey())
	}
	if err != nil {
		return nil, s.storeError(ctx, "read", req.GetKey(), err)
	}
	// LastRevision makes the delete apply to the value we return as deleted_value;
	// a concurrent Put in between makes it fail instead of deleting unseen data.
	if err := s.kv.Delete(ctx, req.GetKey(), jetstream.LastRevision(cur.Revision())); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
			return nil, tool.NewError(fmt.Sprintf("key %q changed while it was being deleted; nothing was deleted", req.GetKey()),
				tool.WithRetry(0), tool.WithPromptHint("Get the key again to see its new value before deciding to delete it."))
		}
		return nil, s.storeError(ctx, "delete", req.GetKey(), err)
	}
	// Delete does not report the marker's revision; the key's history ends with it.
	rev, err := s.lastRevision(ctx, req.GetKey())
	if err != nil {
		return nil, s.storeError(ctx, "read back", req.GetKey(), err)
	}
	return &kvv1.DeleteResponse{Revision: rev, DeletedValue: string(cur.Value())}, nil
}

// List returns the first req.Limit keys, in lexical order, that start with req.Prefix.
func (s *Service) List(ctx context.Context, req *kvv1.ListRequest) (*kvv1.ListResponse, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = DefaultListLimit
	}
	prefix := req.GetPrefix()
	lister, err := s.kv.ListKeysFiltered(ctx, subjectFilter(prefix))
	if err != nil {
		return nil, s.storeError(ctx, "list", prefix, err)
	}
	// Keep only the limit+1 smallest keys (one more tells whether there are more),
	// so that memory stays bounded however big the bucket is. The lister must be
	// drained: its goroutine blocks on a full channel otherwise.
	keep := limit + 1
	var keys []string
	for k := range lister.Keys() {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		keys = append(keys, k)
		if len(keys) >= 2*keep {
			keys = smallest(keys, keep)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, s.storeError(ctx, "list", prefix, err) // the lister stopped early
	}
	keys = smallest(keys, keep)
	resp := &kvv1.ListResponse{Keys: keys}
	if len(keys) > limit {
		resp.Keys, resp.Truncated = keys[:limit], true
	}
	return resp, nil
}

// subjectFilter is the narrowest KV subject filter that covers every key starting
// with prefix: wildcards match whole dot-separated tokens only, so a partial last
// token is filtered by the caller.
func subjectFilter(prefix string) string {
	i := strings.LastIndexByte(prefix, '.')
	if i < 0 {
		return ">"
	}
	return prefix[:i+1] + ">"
}

// smallest sorts keys, drops duplicates (the lister may report a key twice) and
// keeps the first n.
func smallest(keys []string, n int) []string {
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) > n {
		keys = keys[:n]
	}
	return keys
}

// lastRevision returns the revision of the newest entry of key, delete markers included.
func (s *Service) lastRevision(ctx context.Context, key string) (uint64, error) {
	hist, err := s.kv.History(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(hist) == 0 {
		return 0, jetstream.ErrKeyNotFound
	}
	return hist[len(hist)-1].Revision(), nil
}

func notFound(key string) error {
	return tool.NewError(fmt.Sprintf("key %q not found (it was never stored or has been deleted)", key),
		tool.WithPromptHint("Use List with a prefix to see which keys exist."))
}

// storeError reports a failure of the store. The caller giving up is passed on as
// is; anything else, the service's own deadline included, is a retryable
// execution error.
func (s *Service) storeError(ctx context.Context, op, key string, err error) error {
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errStoreTimeout) {
		return ctx.Err()
	}
	return tool.NewError(fmt.Sprintf("the memory store could not %s %q right now", op, key),
		tool.WithRetry(retryAfter), tool.WithDeveloperMessage(fmt.Sprintf("bucket %s: %v", s.kv.Bucket(), err)))
}

// isWrongLastSequence reports JetStream's answer to a failed LastRevision condition.
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
