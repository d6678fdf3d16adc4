package runstore

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
// and CacheBytes of cfg are used; the quota is the one the orchestrator
// wrote into the records bucket.
func BindStore(ctx context.Context, js jetstream.JetStream, cfg StoreConfig) (*Store, error) {
	if cfg.TranscriptBucket == "" {
		cfg.TranscriptBucket = DefaultTranscriptBucket
	}
	if cfg.BlobBucket == "" {
		cfg.BlobBucket = DefaultBlobBucket
	}
	kv, err := js.KeyValue(ctx, cfg.TranscriptBucket)
	if err != nil {
		return nil, fmt.Errorf("runstore: transcript bucket %s: %w", cfg.TranscriptBucket, err)
	}
	blobs, err := js.ObjectStore(ctx, cfg.BlobBucket)
	if err != nil {
		return nil, fmt.Errorf("runstore: blob bucket %s: %w", cfg.BlobBucket, err)
	}
	// The records bucket (quotas) is bound on first use: an older
	// orchestrator does not make it, and a gateway bound before it was made
	// finds it later.
	return newStore(js, kv, blobs, cfg), nil
}
