package runstore_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// TestStoreAppend: a retried append of the same message is a no-op, another
// message at a taken position is a conflict, and Load refuses a transcript
// with a hole — with the in-process cache and without it.
func TestStoreAppend(t *testing.T) {
	t.Parallel()
	for _, budget := range []int64{0, -1} {
		t.Run(fmt.Sprintf("cache=%d", budget), func(t *testing.T) {
			t.Parallel()
			testStoreAppend(t, openStore(t, budget))
		})
	}
}

func openStore(t *testing.T, cacheBytes int64) *runstore.Store {
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
	s, err := runstore.OpenStore(t.Context(), js, runstore.StoreConfig{Memory: true, CacheBytes: cacheBytes})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStoreReplicas: two stores on one bucket (two orchestrator replicas,
// each with its own cache) see each other's appends, and a message read
// through the cache is a fresh copy.
func TestStoreReplicas(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect(natstest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	one, err := runstore.OpenStore(ctx, js, runstore.StoreConfig{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	two, err := runstore.OpenStore(ctx, js, runstore.StoreConfig{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := one.Append(ctx, "r", 0, llm.User("a"), llm.User("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := one.Load(ctx, "r", 3); !errors.Is(err, runstore.ErrGap) {
		t.Fatalf("Load past the end: %v, want ErrGap", err)
	}
	if err := two.Append(ctx, "r", 2, llm.User("c")); err != nil {
		t.Fatal(err)
	}
	if err := two.Append(ctx, "r", 1, llm.User("other")); !errors.Is(err, runstore.ErrConflict) {
		t.Fatalf("replica two overwrote position 1: %v, want ErrConflict", err)
	}
	for name, s := range map[string]*runstore.Store{"one": one, "two": two} {
		msgs, err := s.Load(ctx, "r", 3)
		if err != nil || len(msgs) != 3 || llm.MessageText(msgs[1]) != "b" || llm.MessageText(msgs[2]) != "c" {
			t.Fatalf("replica %s: Load = %v, %v", name, msgs, err)
		}
		msgs[0].Parts = nil // a caller's change must not reach the cache
		again, err := s.Load(ctx, "r", 3)
		if err != nil || llm.MessageText(again[0]) != "a" {
			t.Fatalf("replica %s: after changing a loaded message, Load = %v, %v", name, again, err)
		}
	}
}

func testStoreAppend(t *testing.T, s *runstore.Store) {
	ctx := t.Context()
	a, b := llm.User("first"), llm.User("second")
	if err := s.Append(ctx, "r", 0, a, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, "r", 1, b); err != nil {
		t.Fatalf("repeating an append: %v, want nil", err)
	}
	if err := s.Append(ctx, "r", 1, llm.User("other")); !errors.Is(err, runstore.ErrConflict) {
		t.Fatalf("another message at a taken position: %v, want ErrConflict", err)
	}
	msgs, err := s.Load(ctx, "r", -1)
	if err != nil || len(msgs) != 2 || !proto.Equal(msgs[1], b) {
		t.Fatalf("Load = %v, %v", msgs, err)
	}
	if got, err := s.Load(ctx, "r", 1); err != nil || len(got) != 1 {
		t.Fatalf("Load(1) = %v, %v; want the first message only", got, err)
	}
	if _, err := s.Load(ctx, "r", 3); !errors.Is(err, runstore.ErrGap) {
		t.Fatalf("Load past the end: %v, want ErrGap", err)
	}
	if err := s.Append(ctx, "r", 3, a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "r", -1); !errors.Is(err, runstore.ErrGap) {
		t.Fatalf("Load with a hole at 2: %v, want ErrGap", err)
	}
	if got, err := s.Load(ctx, "other-run", -1); err != nil || len(got) != 0 {
		t.Fatalf("another run's transcript: %v, %v; want empty", got, err)
	}

	ref, err := s.PutMessages(ctx, "r", a)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.PutMessages(ctx, "r", a)
	if err != nil || again != ref {
		t.Fatalf("content addressing: %q then %q (%v)", ref, again, err)
	}
	// Blobs belong to their run: the same content of another run is its own
	// blob, so freeing one run never takes another's.
	if other, err := s.PutMessages(ctx, "other-run", a); err != nil || other == ref {
		t.Fatalf("the same content for another run: %q (%v), want a blob apart from %q", other, err, ref)
	}
	if _, err := s.Blob(ctx, "sha256-00"); !errors.Is(err, runstore.ErrNotFound) {
		t.Fatalf("missing blob: %v, want ErrNotFound", err)
	}
}
