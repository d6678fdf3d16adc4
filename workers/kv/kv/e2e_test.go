package kv_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/workers/kv/kv"
)

// serve runs the KV toolkit in a real worker on loopback, over a bucket on an
// embedded NATS server, until the test ends. It returns the client and the bucket.
func serve(t *testing.T) (kvv1.KVServiceClient, jetstream.KeyValue) {
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
	openCtx, cancelOpen := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancelOpen()
	bucket, err := kv.OpenBucket(openCtx, js, kv.BucketConfig{})
	if err != nil {
		t.Fatalf("OpenBucket: %v", err)
	}

	conn := tooltest.Serve(t, tool.Config{Name: "kv", NATSURL: srv.URL()}, func(w *tool.Worker) {
		kvv1.RegisterKVServiceServer(w, kv.New(bucket))
	})
	return kvv1.NewKVServiceClient(conn), bucket
}

func TestWorkerEndToEnd(t *testing.T) {
	t.Parallel()
	client, _ := serve(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	put, err := client.Put(ctx, &kvv1.PutRequest{Key: "customer.42.prefs", Value: `{"lang": "pt"}`})
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	again, err := client.Put(ctx, &kvv1.PutRequest{Key: "customer.42.prefs", Value: `{"lang": "pt"}`})
	if err != nil || again.GetRevision() != put.GetRevision() || again.GetChanged() {
		t.Fatalf("repeated Put = %v, %v; want revision %d unchanged", again, err, put.GetRevision())
	}
	got, err := client.Get(ctx, &kvv1.GetRequest{Key: "customer.42.prefs"})
	if err != nil || got.GetValue() != `{"lang": "pt"}` {
		t.Fatalf("Get = %v, %v", got, err)
	}
	list, err := client.List(ctx, &kvv1.ListRequest{Prefix: "customer."})
	if err != nil || strings.Join(list.GetKeys(), ",") != "customer.42.prefs" {
		t.Fatalf("List = %v, %v", list, err)
	}
	if _, err := client.Delete(ctx, &kvv1.DeleteRequest{Key: "customer.42.prefs"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = client.Get(ctx, &kvv1.GetRequest{Key: "customer.42.prefs"})
	if te, ok := tool.AsToolError(err); !ok || !strings.Contains(te.GetMessage(), "not found") || te.GetAdditionalPromptContent() == "" {
		t.Fatalf("Get after Delete err = %v, want a not-found execution error with a hint", err)
	}
}

// The contract's key pattern accepts exactly the keys NATS KV accepts: every key is
// tried both through the worker (validation) and directly on the bucket.
func TestKeyPatternMatchesNATS(t *testing.T) {
	t.Parallel()
	client, bucket := serve(t)
	keys := []string{
		"a", "a.b", "A-Z_0/9=x", "customer.42.prefs", "a.b.c.d.e", "-", "/a/b", "=",
		".a", "a.", "a..b", "a b", "a*", "a.>", "a>", "*", ">", "ä", "a\tb", "a:b", "a,b", "a#b",
	}
	for _, key := range keys {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, natsErr := bucket.PutString(ctx, key, "direct")
			natsOK := natsErr == nil
			if natsErr != nil && !errors.Is(natsErr, jetstream.ErrInvalidKey) {
				t.Fatalf("direct put of %q: %v", key, natsErr)
			}
			_, err := client.Put(ctx, &kvv1.PutRequest{Key: key, Value: "through the worker"})
			_, invalid := tool.AsValidationError(err)
			if err != nil && !invalid {
				t.Fatalf("Put(%q) through the worker: %v", key, err)
			}
			if natsOK == invalid {
				t.Errorf("key %q: NATS accepts it: %v, the contract accepts it: %v", key, natsOK, !invalid)
			}
		})
	}
}
