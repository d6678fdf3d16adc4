package gateway

import (
	"net/http"

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
			Name: "toolfleet_gateway_events_dropped_total", Help: "Call events dropped because the queue was full while NATS was away."}),
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
