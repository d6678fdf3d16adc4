package gateway

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus metrics, on a registry of its own so that
// several gateways can live in one process (tests, `toolfleet dev`).
type metrics struct {
	reg             *prometheus.Registry
	calls           *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	eventsPublished prometheus.Counter
	eventsDropped   prometheus.Counter
	idempotentHits  prometheus.Counter
	// byKit caches each toolkit's metric handles (string → *kitMetrics):
	// WithLabelValues hashes its labels and locks the vector on every call.
	byKit sync.Map
}

// kitMetrics are one toolkit's call metrics. Outcome counters are made on first
// use, so /metrics shows the same series as with WithLabelValues per call.
type kitMetrics struct {
	toolkit  string
	duration prometheus.Observer
	outcomes [len(outcomes)]atomic.Pointer[prometheus.Counter]
}

// outcomes are the values of the calls_total outcome label.
var outcomes = [...]string{"success", KindExecution, KindValidation, KindServer}

func (m *metrics) kit(toolkit string) *kitMetrics {
	if k, ok := m.byKit.Load(toolkit); ok {
		return k.(*kitMetrics)
	}
	k, _ := m.byKit.LoadOrStore(toolkit, &kitMetrics{toolkit: toolkit, duration: m.duration.WithLabelValues(toolkit)})
	return k.(*kitMetrics)
}

// count adds a call with outcome "success" or a failure kind.
func (m *metrics) count(k *kitMetrics, outcome string) {
	for i, o := range outcomes {
		if o != outcome {
			continue
		}
		c := k.outcomes[i].Load()
		if c == nil {
			c = new(m.calls.WithLabelValues(k.toolkit, outcome))
			k.outcomes[i].Store(c)
		}
		(*c).Inc()
		return
	}
	m.calls.WithLabelValues(k.toolkit, outcome).Inc()
}

func newMetrics(tools func() float64) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_gateway_calls_total",
			Help: "Tool calls by toolkit and outcome (success, execution, validation, server).",
		}, []string{"toolkit", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolfleet_gateway_call_duration_seconds",
			Help:    "Time from the start of the pipeline to the response, by toolkit.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"toolkit"}),
		eventsPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolfleet_gateway_events_published_total", Help: "Call events acknowledged by JetStream."}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolfleet_gateway_events_dropped_total", Help: "Call events dropped: the queue was full while NATS was away, the stream refused them repeatedly, or they were left at shutdown."}),
		idempotentHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolfleet_gateway_idempotent_replays_total", Help: "Calls answered from the idempotency store without running the tool."}),
	}
	m.reg.MustRegister(m.calls, m.duration, m.eventsPublished, m.eventsDropped, m.idempotentHits,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolfleet_gateway_tools", Help: "Tool versions currently served."}, tools),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
