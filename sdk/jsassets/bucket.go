package jsassets

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketConfig is the shape the configurations of a component's KV buckets
// and object stores share (the gateway's idempotency bucket and result
// store embed it): the bucket's name, retention, byte bound, storage and
// replicas. Zero fields take the store's defaults, or the asset's settings
// through [Config.Bucket].
type BucketConfig struct {
	// Bucket names the KV bucket or object store.
	Bucket string
	// TTL is how long an entry is kept.
	TTL time.Duration
	// MaxBytes bounds the bucket.
	MaxBytes int64
	// MemoryStorage keeps the bucket in memory; default on disk.
	MemoryStorage bool
	// Replicas of the bucket. Default 1.
	Replicas int
}

// Storage is the JetStream storage type b asks for.
func (b BucketConfig) Storage() jetstream.StorageType {
	if b.MemoryStorage {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// Defaults fills the name, TTL and byte bound b leaves unset from def.
func (b *BucketConfig) Defaults(def BucketConfig) {
	if b.Bucket == "" {
		b.Bucket = def.Bucket
	}
	if b.TTL <= 0 {
		b.TTL = def.TTL
	}
	if b.MaxBytes <= 0 {
		b.MaxBytes = def.MaxBytes
	}
}

// Bucket applies c to b, the configuration of asset a (named b.Bucket when
// set): every field comes from the asset's [Settings] under c, except a value
// b sets, which wins over the profile and the fleet-wide flags and loses to
// an override that names the asset. It is the one place a component's own
// bucket fields meet the asset profile.
func (c Config) Bucket(a Asset, b BucketConfig) BucketConfig {
	a = a.Named(b.Bucket)
	s := c.Settings(a)
	if b.MaxBytes > 0 && !c.Overridden(a.Name, "max-bytes") {
		s.MaxBytes = b.MaxBytes
	}
	if b.TTL > 0 && !c.Overridden(a.Name, "max-age") {
		s.MaxAge = b.TTL
	}
	if b.MemoryStorage && !c.Overridden(a.Name, "storage") {
		s.Storage = jetstream.MemoryStorage
	}
	if b.Replicas > 0 && !c.Overridden(a.Name, "replicas") {
		s.Replicas = b.Replicas
	}
	return BucketConfig{Bucket: a.Name, TTL: s.MaxAge, MaxBytes: s.MaxBytes,
		MemoryStorage: s.Storage == jetstream.MemoryStorage, Replicas: s.Replicas}
}
