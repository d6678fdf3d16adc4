package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
)

// BenchmarkNATSRoundTrip times the one NATS round trip on the gateway's call
// path, the idempotency lock (a JetStream KV create, sent as the gateway sends
// it), against a core NATS request/reply to an in-process responder, in the same
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The gateway's bucket settings (see services/gateway/idempotency.go).
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_calls", TTL: 24 * time.Hour,
		History: 1, Storage: jetstream.MemoryStorage, LimitMarkerTTL: time.Minute}); err != nil {
		b.Fatal(err)
	}
	sub, err := nc.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	var seq int
	lock := func() *nats.Msg {
		seq++
		return &nats.Msg{Subject: fmt.Sprintf("$KV.bench_calls.k%d", seq), Header: nats.Header{
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
