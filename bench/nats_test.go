package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// BenchmarkNATSRoundTrip times the one NATS round trip on the gateway's call
// path, the idempotency lock (a JetStream KV create, sent as the gateway sends
// it, to a bucket a gateway created), against a core NATS request/reply to an in-process responder, in the same
// run. Each runs back to back and with a busy gap between requests like the
// gRPC work around the lock in a real call; the gap shows what waking the NATS
// client's and server's goroutines costs on this machine.
//
//	go test ./bench -run '^$' -bench NATSRoundTrip -benchtime 5000x
func BenchmarkNATSRoundTrip(b *testing.B) {
	srv := natstest.Start(b)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	// A gateway creates its idempotency bucket, so the locks below go to a bucket
	// with exactly the gateway's settings.
	ctx, cancel := context.WithCancel(context.Background())
	g, err := gateway.New(ctx, gateway.Config{Listen: "127.0.0.1:0", NATSURL: srv.URL(), Auth: gateway.AuthConfig{Disabled: true},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	ran := make(chan struct{})
	go func() { defer close(ran); _ = g.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-ran })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := js.KeyValue(ctx, gateway.DefaultIdempotencyBucket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the gateway did not create its idempotency bucket")
		}
	}
	sub, err := nc.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	var seq int
	lock := func() *nats.Msg {
		seq++
		return &nats.Msg{Subject: fmt.Sprintf("$KV.%s.bench%d", gateway.DefaultIdempotencyBucket, seq), Header: nats.Header{
			jetstream.ExpectedLastSubjSeqHeader: {"0"}, jetstream.MsgTTLHeader: {"40s"}}}
	}
	echo := func() *nats.Msg { return &nats.Msg{Subject: "bench.echo"} }
	for _, gap := range []time.Duration{0, 300 * time.Microsecond} {
		b.Run(fmt.Sprintf("gap=%s", gap), func(b *testing.B) {
			p50 := func(msg func() *nats.Msg) time.Duration {
				lat := make([]time.Duration, 0, b.N)
				for range b.N {
					for t := time.Now(); time.Since(t) < gap; {
						// busy, as the call's own work keeps a core busy
					}
					t0 := time.Now()
					if _, err := nc.RequestMsg(msg(), 5*time.Second); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				slices.Sort(lat)
				return lat[len(lat)/2]
			}
			e, l := p50(echo), p50(lock)
			b.ReportMetric(float64(e.Microseconds()), "echo-p50-µs")
			b.ReportMetric(float64(l.Microseconds()), "lock-p50-µs")
			b.ReportMetric(float64(l)/float64(e), "lock÷echo")
		})
	}
}
