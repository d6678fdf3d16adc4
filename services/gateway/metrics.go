package gateway

import (
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/telemetry"
)

// Bounds on label values, so that neither announced tools nor callers' inputs
// can grow the number of series without bound: past them, values share the
// "other" series.
const (
	// maxToolSeries bounds the distinct (toolkit, tool, version) label sets.
	maxToolSeries = 1000
	// maxFieldSeries bounds the distinct (toolkit, tool, field) label sets of
	// validation failures.
	maxFieldSeries = 1000
	// maxFieldLabel cuts long field paths.
	maxFieldLabel = 128
	otherLabel    = "other"
)

// metrics are the gateway's Prometheus metrics, on a registry of its own so that
// several gateways can live in one process (tests, `toolfleet dev`).
type metrics struct {
	reg                *prometheus.Registry
	calls              *prometheus.CounterVec
	duration           *prometheus.HistogramVec
	validationFailures *prometheus.CounterVec
	eventsPublished    prometheus.Counter
	eventsDropped      prometheus.Counter
	idempotentHits     prometheus.Counter
	idempotencyRefused *prometheus.CounterVec
	// byTool caches each tool version's metric handles (tool id with version →
	// *toolMetrics): WithLabelValues hashes its labels and locks the vector on
	// every call.
	byTool    sync.Map
	toolCount atomic.Int64
	fields    *telemetry.LabelSet
}

// toolMetrics are one tool version's call metrics. Outcome counters are made
// on first use, so /metrics shows the same series as with WithLabelValues per
// call.
type toolMetrics struct {
	labels   [3]string // toolkit, tool, version
	duration prometheus.Observer
	outcomes [len(outcomes)]atomic.Pointer[prometheus.Counter]
}

// outcomes are the values of the calls_total outcome label.
var outcomes = [...]string{"success", KindExecution, KindValidation, KindServer, outcomeInputRequired}

// outcomeInputRequired counts calls that ended asking their caller for input.
const outcomeInputRequired = "input_required"

// unresolved labels calls that named no known tool (or failed before).
var unresolved = &toolfleetv1.ToolDefinition{Toolkit: "unknown", Name: "unknown"}

// tool returns the metric handles of def's tool version.
func (m *metrics) tool(def *toolfleetv1.ToolDefinition) *toolMetrics {
	id := def.GetId()
	if t, ok := m.byTool.Load(id); ok {
		return t.(*toolMetrics)
	}
	labels := [3]string{def.GetToolkit(), def.GetName(), def.GetVersion()}
	if m.toolCount.Add(1) > maxToolSeries {
		labels, id = [3]string{otherLabel, otherLabel, otherLabel}, "\x00other"
		if t, ok := m.byTool.Load(id); ok {
			return t.(*toolMetrics)
		}
	}
	t, _ := m.byTool.LoadOrStore(id, &toolMetrics{labels: labels, duration: m.duration.WithLabelValues(labels[:]...)})
	return t.(*toolMetrics)
}

// count adds a call with outcome "success" or a failure kind.
func (m *metrics) count(t *toolMetrics, outcome string) {
	for i, o := range outcomes {
		if o != outcome {
			continue
		}
		c := t.outcomes[i].Load()
		if c == nil {
			c = new(m.calls.WithLabelValues(t.labels[0], t.labels[1], t.labels[2], outcome))
			t.outcomes[i].Store(c)
		}
		(*c).Inc()
		return
	}
	m.calls.WithLabelValues(t.labels[0], t.labels[1], t.labels[2], outcome).Inc()
}

// indexes matches list indexes and map keys in a field path ("items[3]",
// "labels[\"x\"]"), which callers choose: they are folded into "[]".
var indexes = regexp.MustCompile(`\[[^\]]*\]`)

// validationFailed counts each field a validation error names.
func (m *metrics) validationFailed(t *toolMetrics, ve *toolfleetv1.ValidationError) {
	fields := ve.GetParameterErrors()
	if len(fields) == 0 {
		m.validationFailures.WithLabelValues(t.labels[0], t.labels[1], "").Inc()
		return
	}
	for path := range fields {
		field := fieldLabel(path)
		if !m.fields.Admit(t.labels[0] + "\x00" + t.labels[1] + "\x00" + field) {
			field = otherLabel
		}
		m.validationFailures.WithLabelValues(t.labels[0], t.labels[1], field).Inc()
	}
}

// fieldLabel is a field path as a label value: indexes folded, valid UTF-8,
// at most maxFieldLabel bytes.
func fieldLabel(path string) string {
	if strings.IndexByte(path, '[') >= 0 {
		path = indexes.ReplaceAllString(path, "[]")
	}
	return telemetry.CleanLabel(path, maxFieldLabel)
}

// Reasons of idempotency_refused_total.
const (
	refusedOtherInput     = "other_input"
	refusedOutcomeUnknown = "outcome_unknown"
	refusedTooLarge       = "result_too_large"
	refusedStillRunning   = "still_running"
	refusedUnavailable    = "store_unavailable"
	refusedFull           = "store_full"
	refusedOverShare      = "over_share"
)

func newMetrics(tools func() float64) *metrics {
	toolLabels := []string{"toolkit", "tool", "version"}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_gateway_calls_total",
			Help: "Tool calls by toolkit, tool, version and outcome (success, execution, validation, server).",
		}, append(toolLabels, "outcome")),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolfleet_gateway_call_duration_seconds",
			Help:    "Time from the start of the pipeline to the response, by toolkit, tool and version.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, toolLabels),
		validationFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_gateway_validation_failures_total",
			Help: "Fields named by validation errors, by toolkit, tool and field path (list indexes and map keys folded into []).",
		}, []string{"toolkit", "tool", "field"}),
		eventsPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolfleet_gateway_events_published_total", Help: "Call events acknowledged by JetStream."}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolfleet_gateway_events_dropped_total", Help: "Call events dropped: the queue was full while NATS was away, the stream refused them repeatedly, or they were left at shutdown."}),
		idempotentHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolfleet_gateway_idempotent_replays_total", Help: "Calls answered from the idempotency store without running the tool."}),
		idempotencyRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_gateway_idempotency_refused_total",
			Help: "Calls with a call_id refused by the idempotency rules, by reason (other_input, outcome_unknown, result_too_large, still_running, store_unavailable, store_full, over_share).",
		}, []string{"reason"}),
		fields: telemetry.NewLabelSet(maxFieldSeries),
	}
	m.reg.MustRegister(m.calls, m.duration, m.validationFailures, m.eventsPublished, m.eventsDropped, m.idempotentHits, m.idempotencyRefused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolfleet_gateway_tools", Help: "Tool versions currently served."}, tools),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
