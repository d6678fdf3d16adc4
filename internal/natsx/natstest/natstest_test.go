package natstest_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
)

func TestStartServesJetStream(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("add stream: %v", err)
	}
	ack, err := js.Publish("t.x", []byte("hello"))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ack.Sequence != 1 {
		t.Fatalf("sequence = %d, want 1", ack.Sequence)
	}
}

// TestStartReservesRegardlessOfFreeDisk: a bucket may reserve far more than a
// test writes (here 32 GiB, more than this machine's disk may have free)
// under the fixed ceiling MaxStore.
func TestStartReservesRegardlessOfFreeDisk(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	if _, err := js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "big", MaxBytes: 32 << 30, Storage: nats.FileStorage}); err != nil {
		t.Fatalf("a 32 GiB reservation under a %d GiB ceiling: %v", natstest.MaxStore>>30, err)
	}
}
