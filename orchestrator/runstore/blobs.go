package runstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// blobKey is the transcript-bucket key that lists a run's blob.
func blobKey(runID, hexSum string) string { return runID + ".blob." + hexSum }

// PutBlob stores data as a blob of run runID under its content address and
// returns its name ("<run_id>/sha256-<hex>"), counting new bytes against
// the run's principal. Blobs belong to one run, so freeing a run frees them.
func (s *Store) PutBlob(ctx context.Context, runID string, data []byte) (string, error) {
	return s.putBlob(ctx, runID, data, true)
}

func (s *Store) putBlob(ctx context.Context, runID string, data []byte, charge bool) (string, error) {
	if err := validID(runID); err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	ref := runID + "/sha256-" + hexSum
	if _, err := s.blobs.GetInfo(ctx, ref); err == nil {
		return ref, nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", fmt.Errorf("runstore: blob %s: %w", ref, err)
	}
	// Listed with the run first, so freeing the run finds it even if this
	// process stops between the two writes.
	if _, err := s.kv.Create(ctx, blobKey(runID, hexSum), []byte(strconv.Itoa(len(data)))); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return "", fmt.Errorf("runstore: list blob: %w", err)
	}
	if _, err := s.blobs.PutBytes(ctx, ref, data); err != nil {
		if storeFull(err) {
			return "", &StoreFullError{}
		}
		return "", fmt.Errorf("runstore: put blob: %w", err)
	}
	s.filled(int64(len(data)))
	if charge {
		s.charge(ctx, runID, int64(len(data)), countStored)
	}
	return ref, nil
}

// Blob returns the blob named ref.
func (s *Store) Blob(ctx context.Context, ref string) ([]byte, error) {
	if b, ok := s.blobCache.get(ref); ok {
		return bytes.Clone(b), nil
	}
	b, err := s.blobs.GetBytes(ctx, ref)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("runstore: blob %s: %w", ref, err)
	}
	s.blobCache.add(ref, bytes.Clone(b))
	return b, nil
}

// EncodeMessages encodes msgs as PutMessages stores them.
func EncodeMessages(msgs ...*toolfleetv1.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&toolfleetv1.Conversation{Messages: msgs})
	if err != nil {
		return nil, fmt.Errorf("runstore: encode messages: %w", err)
	}
	return b, nil
}

// PutMessages stores msgs as one blob of run runID (the input of StartRun
// or SendMessage). It does not count the bytes: [Runs] admits them first.
func (s *Store) PutMessages(ctx context.Context, runID string, msgs ...*toolfleetv1.Message) (string, error) {
	b, err := EncodeMessages(msgs...)
	if err != nil {
		return "", err
	}
	return s.putBlob(ctx, runID, b, false)
}

// Messages reads a blob written by PutMessages.
func (s *Store) Messages(ctx context.Context, ref string) ([]*toolfleetv1.Message, error) {
	b, err := s.Blob(ctx, ref)
	if err != nil {
		return nil, err
	}
	c := &toolfleetv1.Conversation{}
	if err := proto.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("runstore: decode messages %s: %w", ref, err)
	}
	return c.GetMessages(), nil
}
