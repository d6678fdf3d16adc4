package events_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/services/gateway/events"
)

// BenchmarkPublish measures the throughput of call events to JetStream with an
// ack per event, from Publish to the last ack.
func BenchmarkPublish(b *testing.B) {
	srv := natstest.Start(b)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	m := events.Metrics{Published: prometheus.NewCounter(prometheus.CounterOpts{Name: "p"}), Dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "d"})}
	p := events.New(slog.New(slog.NewTextHandler(io.Discard, nil)), nc, js, jetstream.StreamConfig{
		Name: "BENCH_EVENTS", Subjects: []string{events.SubjectPrefix + ">"}, Storage: jetstream.MemoryStorage,
	}, 10000, m)
	ctx, cancel := context.WithCancel(b.Context())
	p.Run(ctx)
	defer func() { cancel(); p.Wait() }()
	b.ResetTimer()
	for i := range b.N {
		ev := &toolfleetv1.CallEvent{CallId: "c", ToolId: "Calculator.Add@1.0.0", UserId: "u"}
		p.Publish("tester", events.Succeeded, ev, "Calculator", "Add", "")
		if i%5000 == 4999 { // stay under the queue bound
			waitPublished(b, m, i+1)
		}
	}
	waitPublished(b, m, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if d := value(m.Dropped); d != 0 {
		b.Fatalf("%v events dropped", d)
	}
}

func waitPublished(b *testing.B, m events.Metrics, n int) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for value(m.Published) < float64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("%v of %d events published after a minute", value(m.Published), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
