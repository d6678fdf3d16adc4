package agent

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// BindStore opens the transcript and blob buckets an orchestrator created,
// without creating or changing them: a process that only serves the
// AgentService (the production gateway) reads and appends transcripts but
// leaves the buckets' configuration (size, storage, replicas) to the
// orchestrator that owns them. It fails with jetstream.ErrBucketNotFound
// (wrapped) until the orchestrator has started once. Only the bucket names
// and CacheBytes of cfg are used.
func BindStore(ctx context.Context, js jetstream.JetStream, cfg StoreConfig) (*Store, error) {
	if cfg.TranscriptBucket == "" {
		cfg.TranscriptBucket = DefaultTranscriptBucket
	}
	if cfg.BlobBucket == "" {
		cfg.BlobBucket = DefaultBlobBucket
	}
	kv, err := js.KeyValue(ctx, cfg.TranscriptBucket)
	if err != nil {
		return nil, fmt.Errorf("agent: transcript bucket %s: %w", cfg.TranscriptBucket, err)
	}
	blobs, err := js.ObjectStore(ctx, cfg.BlobBucket)
	if err != nil {
		return nil, fmt.Errorf("agent: blob bucket %s: %w", cfg.BlobBucket, err)
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
