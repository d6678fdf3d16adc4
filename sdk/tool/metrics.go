package tool

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/status"
)

// Metrics are a worker's Prometheus metrics: calls by method and outcome and
// their latency, on a registry of their own. [Main] serves them on
// --metrics-listen; a worker built by hand sets Config.Metrics to Hook and
// serves Handler wherever it likes.
type Metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics makes a worker's metrics, with the Go runtime and process
// collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_worker_calls_total",
			Help: "Tool calls handled, by gRPC method and outcome (success, execution, or the gRPC code of a rejection).",
		}, []string{"method", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolfleet_worker_call_duration_seconds",
			Help:    "Time of each tool call in the worker, by gRPC method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"method"}),
	}
	m.reg.MustRegister(m.calls, m.duration, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Hook is the MetricsHook that records into m. The method label is bounded:
// only registered methods reach a hook (gRPC answers others itself).
func (m *Metrics) Hook(_ context.Context, info CallInfo, d time.Duration, err error) {
	outcome := "success"
	if _, isTool := AsToolError(err); isTool {
		outcome = "execution"
	} else if err != nil {
		outcome = status.Code(err).String()
	}
	m.calls.WithLabelValues(info.FullMethod, outcome).Inc()
	m.duration.WithLabelValues(info.FullMethod).Observe(d.Seconds())
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }
