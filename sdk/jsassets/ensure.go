package jsassets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MigrationDoc is where the storage migration path is documented.
const MigrationDoc = "docs/operations.md, \"Changing an asset's storage\""

// Errors of the Ensure functions; match them with errors.Is.
var (
	// ErrUnsupportedChange: the asset exists with a setting JetStream cannot
	// change in place (its storage type). Wrapped by [*ChangeError].
	ErrUnsupportedChange = errors.New("jsassets: change not supported in place")
	// ErrInsufficientStorage: the NATS server cannot reserve the asset's byte
	// bound (file storage needs it free on disk, memory storage in memory).
	ErrInsufficientStorage = errors.New("jsassets: insufficient storage for the asset's byte bound")
)

// ChangeError is an unsupported change to an existing asset.
type ChangeError struct {
	// Asset is the stream or bucket name; Stream the JetStream stream.
	Asset, Stream string
	// Setting is the setting that cannot change ("storage").
	Setting string
	// Current and Wanted are its values on the server and in the configuration.
	Current, Wanted string
}

func (e *ChangeError) Error() string {
	return fmt.Sprintf("JetStream asset %s (stream %s): its %s is %s on the server but the configuration asks for %s, "+
		"and JetStream cannot change a stream's %s in place: keep %s (--js-overrides %s.%s=%s) or migrate the asset (%s)",
		e.Asset, e.Stream, e.Setting, e.Current, e.Wanted, e.Setting, e.Current, e.Asset, e.Setting, e.Current, MigrationDoc)
}

// Unwrap makes errors.Is(err, ErrUnsupportedChange) true.
func (e *ChangeError) Unwrap() error { return ErrUnsupportedChange }

// Stream returns sc with s applied: replicas, storage, byte bound and max age.
// A duplicate window longer than the max age is shortened to it (JetStream
// refuses the combination).
func (s Settings) Stream(sc jetstream.StreamConfig) jetstream.StreamConfig {
	sc.Replicas, sc.Storage, sc.MaxBytes, sc.MaxAge = s.Replicas, s.Storage, s.MaxBytes, s.MaxAge
	if s.MaxAge > 0 && sc.Duplicates > s.MaxAge {
		sc.Duplicates = s.MaxAge
	}
	return sc
}

// KeyValue returns kc with s applied (its TTL is the max age).
func (s Settings) KeyValue(kc jetstream.KeyValueConfig) jetstream.KeyValueConfig {
	kc.Replicas, kc.Storage, kc.MaxBytes, kc.TTL = s.Replicas, s.Storage, s.MaxBytes, s.MaxAge
	return kc
}

// ObjectStore returns oc with s applied (its TTL is the max age).
func (s Settings) ObjectStore(oc jetstream.ObjectStoreConfig) jetstream.ObjectStoreConfig {
	oc.Replicas, oc.Storage, oc.MaxBytes, oc.TTL = s.Replicas, s.Storage, s.MaxBytes, s.MaxAge
	return oc
}

// checkStorage refuses a storage change of an existing stream. A missing
// stream is fine (it is created); another error is returned wrapped.
func checkStorage(ctx context.Context, js jetstream.JetStream, asset, stream string, want jetstream.StorageType) (*jetstream.StreamInfo, error) {
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("JetStream asset %s: look up stream %s: %w", asset, stream, err)
	}
	info := st.CachedInfo()
	if have := info.Config.Storage; have != want {
		return nil, &ChangeError{Asset: asset, Stream: stream, Setting: "storage", Current: StorageName(have), Wanted: StorageName(want)}
	}
	return info, nil
}

// wrap names the asset in err and turns NATS's refusal to reserve the byte
// bound into [ErrInsufficientStorage] naming the setting to change.
func wrap(asset string, maxBytes int64, storage jetstream.StorageType, err error) error {
	if insufficient(err) {
		where := "JetStream file storage (free disk, or max_file_store)"
		if storage == jetstream.MemoryStorage {
			where = "JetStream memory storage (max_memory_store)"
		}
		return fmt.Errorf("JetStream asset %s: the NATS server cannot reserve its byte bound of %s in %s: "+
			"lower it with --js-overrides %s.max-bytes=SIZE or --js-profile dev (env %s, %s), or free space: %w: %w",
			asset, FormatBytes(maxBytes), where, asset, EnvOverrides, EnvProfile, ErrInsufficientStorage, err)
	}
	return fmt.Errorf("JetStream asset %s: %w", asset, err)
}

// insufficient reports whether err is JetStream's "insufficient resources"
// (10023), "insufficient memory resources" (10028) or "storage resources
// exceeded" (10047).
func insufficient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && slices.Contains([]jetstream.ErrorCode{10023, 10028, 10047}, apiErr.ErrorCode) {
		return true
	}
	return err != nil && strings.Contains(err.Error(), "insufficient") && strings.Contains(err.Error(), "resources")
}

// EnsureTimeout bounds one Ensure* call, whatever the caller's deadline: in
// a JetStream cluster an API request to a stream that has no leader yet (a
// node restarting, an election under way) gets no answer at all, and a
// start-up that waited on it for its whole start timeout would never try
// again. The caller's retry loop asks again instead.
const EnsureTimeout = 20 * time.Second

// EnsureStream creates the stream sc, or brings an existing one to sc when
// its subjects, replicas, byte bound, max age, message size, discard policy
// or duplicate window differ (an unchanged stream is not updated, so a
// component needs the update permission only to apply a change). A storage
// change is refused with a [*ChangeError].
func EnsureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, EnsureTimeout)
	defer cancel()
	info, err := checkStorage(ctx, js, sc.Name, sc.Name, sc.Storage)
	if err != nil {
		return nil, err
	}
	if info == nil {
		st, err := js.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another replica created it meanwhile: bring it to sc.
			return EnsureStream(ctx, js, sc)
		}
		if err != nil {
			return nil, wrap(sc.Name, sc.MaxBytes, sc.Storage, err)
		}
		return st, nil
	}
	if sameStream(info.Config, sc) {
		st, err := js.Stream(ctx, sc.Name)
		if err != nil {
			return nil, wrap(sc.Name, sc.MaxBytes, sc.Storage, err)
		}
		return st, nil
	}
	st, err := js.UpdateStream(ctx, sc)
	if err != nil {
		return nil, wrap(sc.Name, sc.MaxBytes, sc.Storage, err)
	}
	return st, nil
}

// sameStream reports whether have already is what want asks for, comparing
// the fields a component sets.
func sameStream(have, want jetstream.StreamConfig) bool {
	maxMsgSize := want.MaxMsgSize
	if maxMsgSize == 0 {
		maxMsgSize = -1
	}
	return slices.Equal(have.Subjects, want.Subjects) && have.Replicas == max(want.Replicas, 1) &&
		have.MaxBytes == want.MaxBytes && have.MaxAge == want.MaxAge && have.MaxMsgSize == maxMsgSize &&
		have.Discard == want.Discard && (want.Duplicates == 0 || have.Duplicates == want.Duplicates) &&
		have.Description == want.Description
}

// EnsureKeyValue creates the KV bucket kc or applies kc to an existing one
// (JetStream's CreateOrUpdate); a storage change is refused with a
// [*ChangeError].
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, EnsureTimeout)
	defer cancel()
	if _, err := checkStorage(ctx, js, kc.Bucket, "KV_"+kc.Bucket, kc.Storage); err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, kc)
	if err != nil {
		return nil, wrap(kc.Bucket, kc.MaxBytes, kc.Storage, err)
	}
	return kv, nil
}

// EnsureObjectStore creates the object store oc or applies oc to an existing
// one; a storage change is refused with a [*ChangeError].
func EnsureObjectStore(ctx context.Context, js jetstream.JetStream, oc jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	ctx, cancel := context.WithTimeout(ctx, EnsureTimeout)
	defer cancel()
	if _, err := checkStorage(ctx, js, oc.Bucket, "OBJ_"+oc.Bucket, oc.Storage); err != nil {
		return nil, err
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, oc)
	if err != nil {
		return nil, wrap(oc.Bucket, oc.MaxBytes, oc.Storage, err)
	}
	return obs, nil
}
