package kv

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// newService starts an embedded NATS server and returns the service over a fresh
// bucket, plus the bucket for direct checks.
func newService(t *testing.T) (*Service, jetstream.KeyValue) {
	t.Helper()
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	kv, err := OpenBucket(ctx, js, BucketConfig{Name: "memory_test", History: 5})
	if err != nil {
		t.Fatalf("OpenBucket: %v", err)
	}
	return New(kv), kv
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func assertExecError(t *testing.T, err error, want string) {
	t.Helper()
	te, ok := tool.AsToolError(err)
	if !ok {
		t.Fatalf("err = %v (%T), want an execution error", err, err)
	}
	if !strings.Contains(te.GetMessage(), want) {
		t.Errorf("message = %q, want it to contain %q", te.GetMessage(), want)
	}
}

func TestPutGetDelete(t *testing.T) {
	t.Parallel()
	svc, _ := newService(t)
	ctx := ctxT(t)

	put, err := svc.Put(ctx, &kvv1.PutRequest{Key: "user.ana.language", Value: "Portuguese"})
	if err != nil || !put.GetChanged() || put.GetRevision() == 0 {
		t.Fatalf("first Put = %v, %v; want a change with a revision", put, err)
	}
	// The same value again is a no-op with the same revision: Put is idempotent.
	again, err := svc.Put(ctx, &kvv1.PutRequest{Key: "user.ana.language", Value: "Portuguese"})
	if err != nil || again.GetChanged() || again.GetRevision() != put.GetRevision() {
		t.Fatalf("repeated Put = %v, %v; want unchanged at revision %d", again, err, put.GetRevision())
	}
	got, err := svc.Get(ctx, &kvv1.GetRequest{Key: "user.ana.language"})
	if err != nil || got.GetValue() != "Portuguese" || got.GetRevision() != put.GetRevision() || got.GetUpdatedAt() == nil {
		t.Fatalf("Get = %v, %v", got, err)
	}

	changed, err := svc.Put(ctx, &kvv1.PutRequest{Key: "user.ana.language", Value: "Galician"})
	if err != nil || !changed.GetChanged() || changed.GetRevision() <= put.GetRevision() {
		t.Fatalf("changing Put = %v, %v; want a newer revision", changed, err)
	}
	old, err := svc.Get(ctx, &kvv1.GetRequest{Key: "user.ana.language", Revision: put.GetRevision()})
	if err != nil || old.GetValue() != "Portuguese" {
		t.Fatalf("Get at revision %d = %v, %v; want Portuguese", put.GetRevision(), old, err)
	}

	del, err := svc.Delete(ctx, &kvv1.DeleteRequest{Key: "user.ana.language"})
	if err != nil || del.GetDeletedValue() != "Galician" || del.GetRevision() <= changed.GetRevision() {
		t.Fatalf("Delete = %v, %v; want the deleted value and a newer revision", del, err)
	}
	_, err = svc.Get(ctx, &kvv1.GetRequest{Key: "user.ana.language"})
	assertExecError(t, err, `key "user.ana.language" not found`)
	_, err = svc.Delete(ctx, &kvv1.DeleteRequest{Key: "user.ana.language"})
	assertExecError(t, err, `key "user.ana.language" not found`)

	// A deleted key can be stored again.
	if _, err := svc.Put(ctx, &kvv1.PutRequest{Key: "user.ana.language", Value: "Portuguese"}); err != nil {
		t.Fatalf("Put after Delete: %v", err)
	}
	// An empty value is a value, not a deletion.
	if _, err := svc.Put(ctx, &kvv1.PutRequest{Key: "empty", Value: ""}); err != nil {
		t.Fatalf("Put empty: %v", err)
	}
	if got, err := svc.Get(ctx, &kvv1.GetRequest{Key: "empty"}); err != nil || got.GetValue() != "" {
		t.Fatalf("Get empty = %v, %v", got, err)
	}
}

func TestGetErrors(t *testing.T) {
	t.Parallel()
	svc, _ := newService(t)
	ctx := ctxT(t)
	put, err := svc.Put(ctx, &kvv1.PutRequest{Key: "a", Value: "1"})
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if _, err := svc.Put(ctx, &kvv1.PutRequest{Key: "b", Value: "2"}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	tests := []struct {
		name string
		req  *kvv1.GetRequest
		want string
	}{
		{"missing key", &kvv1.GetRequest{Key: "nope"}, `key "nope" not found`},
		{"revision of another key", &kvv1.GetRequest{Key: "b", Revision: put.GetRevision()}, fmt.Sprintf(`key "b" has no value at revision %d`, put.GetRevision())},
		{"revision from the future", &kvv1.GetRequest{Key: "a", Revision: 1000}, `key "a" has no value at revision 1000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := svc.Get(ctx, tt.req)
			assertExecError(t, err, tt.want)
		})
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	svc, _ := newService(t)
	ctx := ctxT(t)
	for _, k := range []string{"user.ana.language", "user.ana.city", "user.bo.language", "users", "project/alpha.status", "user.ana"} {
		if _, err := svc.Put(ctx, &kvv1.PutRequest{Key: k, Value: "v"}); err != nil {
			t.Fatalf("Put %s: %v", k, err)
		}
	}
	if _, err := svc.Delete(ctx, &kvv1.DeleteRequest{Key: "user.bo.language"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	tests := []struct {
		prefix        string
		limit         int32
		want          []string
		wantTruncated bool
	}{
		{prefix: "", want: []string{"project/alpha.status", "user.ana", "user.ana.city", "user.ana.language", "users"}},
		{prefix: "user.ana.", want: []string{"user.ana.city", "user.ana.language"}},
		{prefix: "user.ana", want: []string{"user.ana", "user.ana.city", "user.ana.language"}},
		{prefix: "user", want: []string{"user.ana", "user.ana.city", "user.ana.language", "users"}},
		{prefix: "user.an", want: []string{"user.ana", "user.ana.city", "user.ana.language"}},
		{prefix: "user.bo.", want: nil}, // deleted keys are not listed
		{prefix: "nothing", want: nil},
		{prefix: "user", limit: 2, want: []string{"user.ana", "user.ana.city"}, wantTruncated: true},
		{prefix: "user", limit: 4, want: []string{"user.ana", "user.ana.city", "user.ana.language", "users"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%d", tt.prefix, tt.limit), func(t *testing.T) {
			t.Parallel()
			resp, err := svc.List(ctx, &kvv1.ListRequest{Prefix: tt.prefix, Limit: tt.limit})
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if strings.Join(resp.GetKeys(), ",") != strings.Join(tt.want, ",") || resp.GetTruncated() != tt.wantTruncated {
				t.Errorf("List(%q, %d) = %v truncated=%v, want %v truncated=%v", tt.prefix, tt.limit, resp.GetKeys(), resp.GetTruncated(), tt.want, tt.wantTruncated)
			}
		})
	}
}

// More keys than the lister's buffer and the trimming threshold: the result stays
// the sorted head and the call returns (the lister is drained).
func TestListManyKeys(t *testing.T) {
	t.Parallel()
	svc, kv := newService(t)
	ctx := ctxT(t)
	const n = 600
	for i := range n {
		if _, err := kv.PutString(ctx, fmt.Sprintf("note.%04d", n-1-i), "x"); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	resp, err := svc.List(ctx, &kvv1.ListRequest{Prefix: "note.", Limit: 3})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if got := strings.Join(resp.GetKeys(), ","); got != "note.0000,note.0001,note.0002" || !resp.GetTruncated() {
		t.Errorf("List = %s truncated=%v, want the first three, truncated", got, resp.GetTruncated())
	}
}

func TestSubjectFilter(t *testing.T) {
	t.Parallel()
	for prefix, want := range map[string]string{"": ">", "user": ">", "user.": "user.>", "user.an": "user.>", "a.b.c": "a.b.>"} {
		if got := subjectFilter(prefix); got != want {
			t.Errorf("subjectFilter(%q) = %q, want %q", prefix, got, want)
		}
	}
}

// OpenBucket creates the bucket once and reuses it afterwards.
func TestOpenBucketReuses(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx := ctxT(t)
	first, err := OpenBucket(ctx, js, BucketConfig{})
	if err != nil {
		t.Fatalf("OpenBucket: %v", err)
	}
	if _, err := first.PutString(ctx, "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	second, err := OpenBucket(ctx, js, BucketConfig{History: 3})
	if err != nil {
		t.Fatalf("second OpenBucket: %v", err)
	}
	if e, err := second.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("value through the reopened bucket = %v, %v", e, err)
	}
	st, err := second.Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.Bucket() != DefaultBucket || st.History() != DefaultHistory {
		t.Errorf("bucket %s history %d, want %s with history %d", st.Bucket(), st.History(), DefaultBucket, DefaultHistory)
	}
}

// When NATS goes away, calls fail as retryable execution errors within the
// service's own deadline instead of hanging until the caller's.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx := ctxT(t)
	kv, err := OpenBucket(ctx, js, BucketConfig{})
	if err != nil {
		t.Fatalf("OpenBucket: %v", err)
	}
	svc := New(kv, WithOpTimeout(300*time.Millisecond))
	srv.Shutdown()

	_, err = svc.Get(ctx, &kvv1.GetRequest{Key: "k"})
	te, ok := tool.AsToolError(err)
	if !ok || !te.GetCanRetry() || !strings.Contains(te.GetMessage(), `could not read "k"`) {
		t.Fatalf("Get with NATS down: err = %v, want a retryable execution error", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the caller's context ran out: %v", ctx.Err())
	}
}

// racingKV simulates another agent writing the key right after the service read it.
type racingKV struct {
	jetstream.KeyValue
	raced bool
}

func (r *racingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := r.KeyValue.Get(ctx, key)
	if err == nil && !r.raced {
		r.raced = true
		if _, perr := r.KeyValue.PutString(ctx, key, "newer"); perr != nil {
			return nil, perr
		}
	}
	return e, err
}

// Delete removes only the value it read: a concurrent change makes it fail and
// keeps the newer value.
func TestDeleteRacingPut(t *testing.T) {
	t.Parallel()
	_, bucket := newService(t)
	ctx := ctxT(t)
	if _, err := bucket.PutString(ctx, "k", "old"); err != nil {
		t.Fatalf("put: %v", err)
	}
	svc := New(&racingKV{KeyValue: bucket})
	_, err := svc.Delete(ctx, &kvv1.DeleteRequest{Key: "k"})
	te, ok := tool.AsToolError(err)
	if !ok || !strings.Contains(te.GetMessage(), `key "k" changed while it was being deleted`) || !te.GetCanRetry() {
		t.Fatalf("Delete during a concurrent Put: err = %v, want a retryable conflict", err)
	}
	if e, err := bucket.Get(ctx, "k"); err != nil || string(e.Value()) != "newer" {
		t.Fatalf("value after the failed Delete = %v, %v; want newer", e, err)
	}
}

// Concurrent increments of one counter sum exactly: each is applied once,
// none is lost to a race (compare-and-set on the revision).
func TestIncrementConcurrentSumsExactly(t *testing.T) {
	t.Parallel()
	svc, bucket := newService(t)
	ctx := ctxT(t)
	const callers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	seen := make(chan int64, callers*each)
	for c := range callers {
		wg.Go(func() {
			for range each {
				resp, err := svc.Increment(ctx, &kvv1.IncrementRequest{Key: "stats.hits", By: int64(c%2 + 1)})
				if err != nil {
					errs <- err
					return
				}
				seen <- resp.GetValue()
			}
		})
	}
	wg.Wait()
	close(errs)
	close(seen)
	for err := range errs {
		t.Fatalf("Increment: %v", err)
	}
	want := int64(callers/2*each*1 + callers/2*each*2)
	e, err := bucket.Get(ctx, "stats.hits")
	if err != nil || string(e.Value()) != fmt.Sprint(want) {
		t.Fatalf("counter = %v, %v; want %d", e, err, want)
	}
	// Every increment saw its own new value: no two returned the same.
	values := map[int64]bool{}
	for v := range seen {
		if values[v] {
			t.Fatalf("two increments returned %d", v)
		}
		values[v] = true
	}
}

func TestIncrement(t *testing.T) {
	t.Parallel()
	svc, bucket := newService(t)
	ctx := ctxT(t)
	for _, step := range []struct {
		by, want int64
	}{{0, 1}, {5, 6}, {-10, -4}} {
		resp, err := svc.Increment(ctx, &kvv1.IncrementRequest{Key: "c", By: step.by})
		if err != nil || resp.GetValue() != step.want {
			t.Fatalf("Increment(by %d) = %v, %v; want %d", step.by, resp, err, step.want)
		}
	}
	if _, err := bucket.PutString(ctx, "text", "hello"); err != nil {
		t.Fatal(err)
	}
	_, err := svc.Increment(ctx, &kvv1.IncrementRequest{Key: "text", By: 1})
	assertExecError(t, err, "not a whole number")
	if _, err := bucket.PutString(ctx, "big", fmt.Sprint(int64(math.MaxInt64-1))); err != nil {
		t.Fatal(err)
	}
	_, err = svc.Increment(ctx, &kvv1.IncrementRequest{Key: "big", By: 2})
	assertExecError(t, err, "overflow")
	// A deleted counter starts again from 0.
	if err := bucket.Delete(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if resp, err := svc.Increment(ctx, &kvv1.IncrementRequest{Key: "c", By: 3}); err != nil || resp.GetValue() != 3 {
		t.Fatalf("Increment after Delete = %v, %v; want 3", resp, err)
	}
}
