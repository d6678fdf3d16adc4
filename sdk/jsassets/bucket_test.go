package jsassets_test

import (
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// TestBucket: a store's own value wins over the profile and the fleet-wide
// flags, and loses to an override naming the asset; an unset value is the
// asset's.
func TestBucket(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, tt := range []struct {
		name   string
		assets jsassets.Config
		in     jsassets.BucketConfig
		want   jsassets.BucketConfig
	}{
		{"profile", jsassets.Config{}, jsassets.BucketConfig{},
			jsassets.BucketConfig{Bucket: "toolfleet_calls", TTL: 24 * time.Hour, MaxBytes: 256 * mib, Replicas: 1}},
		{"dev profile, fleet-wide memory", jsassets.Config{Profile: "dev", Storage: "memory", Replicas: "3"}, jsassets.BucketConfig{},
			jsassets.BucketConfig{Bucket: "toolfleet_calls", TTL: 24 * time.Hour, MaxBytes: 32 * mib, MemoryStorage: true, Replicas: 3}},
		{"own values win", jsassets.Config{Replicas: "3"}, jsassets.BucketConfig{TTL: time.Hour, MaxBytes: mib, MemoryStorage: true, Replicas: 1},
			jsassets.BucketConfig{Bucket: "toolfleet_calls", TTL: time.Hour, MaxBytes: mib, MemoryStorage: true, Replicas: 1}},
		{"overrides win", jsassets.Config{Overrides: "toolfleet_calls.max-bytes=2MiB,toolfleet_calls.max-age=2h,toolfleet_calls.storage=file,toolfleet_calls.replicas=5"},
			jsassets.BucketConfig{TTL: time.Hour, MaxBytes: mib, MemoryStorage: true, Replicas: 1},
			jsassets.BucketConfig{Bucket: "toolfleet_calls", TTL: 2 * time.Hour, MaxBytes: 2 * mib, Replicas: 5}},
		{"renamed bucket", jsassets.Config{Overrides: "toolfleet_calls.max-bytes=2MiB,mine.max-bytes=4MiB"}, jsassets.BucketConfig{Bucket: "mine"},
			jsassets.BucketConfig{Bucket: "mine", TTL: 24 * time.Hour, MaxBytes: 4 * mib, Replicas: 1}},
	} {
		if err := tt.assets.Validate(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := tt.assets.Bucket(jsassets.Idempotency, tt.in); got != tt.want {
			t.Errorf("%s: Bucket = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
