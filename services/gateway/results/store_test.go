package results_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/services/gateway/results"
)

func newStore(t *testing.T) (*results.Store, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(natstest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := results.New(t.Context(), js, results.Config{BucketConfig: jsassets.BucketConfig{MemoryStorage: true}})
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

func TestOpenReadsWhatPutStored(t *testing.T) {
	s, _ := newStore(t)
	for _, size := range []int{0, 1, 128 << 10, 1<<20 + 7} {
		data := bytes.Repeat([]byte("toolfleet"), size/9+1)[:size]
		h, err := s.Put(t.Context(), "ana", "T.X", results.ContentTypeJSON, data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Open(t.Context(), "bo", h.Id); !errors.Is(err, results.ErrNotFound) {
			t.Fatalf("another owner: %v, want ErrNotFound", err)
		}
		obj, err := s.Open(t.Context(), "ana", h.Id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(obj)
		_ = obj.Close()
		if err != nil || !bytes.Equal(got, data) || obj.Size != int64(size) {
			t.Fatalf("size %d: read %d bytes (%v), want what was stored", size, len(got), err)
		}
	}
}

// A Read waiting for a chunk that never comes (the result dropped while being
// read) ends with its context, and Close does not wait: through nats.go's
// ObjectStore.Get it waited for the context's deadline, and a gateway's
// graceful stop with it.
func TestOpenEndsWithItsContext(t *testing.T) {
	s, js := newStore(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB: many more chunks than are read ahead
	h, err := s.Put(t.Context(), "ana", "T.X", results.ContentTypeJSON, data)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	obj, err := s.Open(ctx, "ana", h.Id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(obj, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(t.Context(), results.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Delete(t.Context(), h.Id); err != nil { // purges the chunks not yet read
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, obj)
		_ = obj.Close()
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // let the copy reach the chunk that never comes
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("read after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read and close did not end with their context")
	}
}
