// Package metrics holds the orchestrator's Prometheus metrics. They are
// recorded by activities only, never by workflow code: a workflow replays its
// history on every worker that picks it up, and counting there would count
// again on every replay.
//
// Every method is safe on a nil *Metrics, so activities built without
// metrics (tests) record nothing.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolfleet/toolfleet/internal/telemetry"
)

// Bounds on label values that come from callers (a run's model spec), so a
// caller cannot grow the number of series without bound.
const (
	// MaxModels is how many model names get a series of their own; later
	// ones are counted as Other.
	MaxModels = 50
	// MaxProviders bounds the provider label the same way.
	MaxProviders = 16
	// maxLabelBytes cuts long label values.
	maxLabelBytes = 64
	// Other is the label value of what is over a bound.
	Other = "other"
)

// Metrics are one orchestrator's metrics, on a registry of its own so that
// several orchestrators can live in one process (tests, `toolfleet dev`).
type Metrics struct {
	reg *prometheus.Registry

	runsFinished *prometheus.CounterVec
	tokens       *prometheus.CounterVec
	turnSeconds  *prometheus.HistogramVec
	agentCalls   *prometheus.CounterVec
	agentCallDur prometheus.Histogram

	programCalls    *prometheus.CounterVec
	programCallDur  prometheus.Histogram
	programLimits   *prometheus.CounterVec
	programFinished *prometheus.CounterVec

	models, providers bounded
}

// New makes the metrics on a new registry, with the Go runtime and process
// collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_agent_runs_finished_total",
			Help: "Agent runs that ended, by status (COMPLETED, FAILED, BUDGET_EXHAUSTED, CANCELED); a conversation counts each answer.",
		}, []string{"status"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_agent_model_tokens_total",
			Help: "Tokens of model turns as the provider reported them, by provider, model and direction (input, output).",
		}, []string{"provider", "model", "direction"}),
		turnSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolfleet_agent_model_turn_seconds",
			Help:    "Time of each model call (attempt) of a turn, streaming included, by provider.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2.5, 10),
		}, []string{"provider"}),
		agentCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_agent_tool_calls_total",
			Help: "Tool call results appended to agent runs, by outcome (ok, validation, execution, denied, unknown_tool, refused).",
		}, []string{"outcome"}),
		agentCallDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "toolfleet_agent_tool_call_duration_seconds",
			Help:    "Time of each gateway call (attempt) an agent run makes for a tool call.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		programCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_program_tool_calls_total",
			Help: "Tool calls of Starlark programs, by outcome (ok, validation, execution, server, too_large).",
		}, []string{"outcome"}),
		programCallDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "toolfleet_program_tool_call_duration_seconds",
			Help:    "Time of each gateway call (attempt) a program makes for a tool call.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		programLimits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_program_limits_hit_total",
			Help: "Programs that failed on a limit, by limit (max_steps, max_tool_calls, max_width, deadline, max_value_bytes, max_result_bytes, max_memory_bytes, max_parallel).",
		}, []string{"limit"}),
		programFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolfleet_program_runs_finished_total",
			Help: "Programs that ended, by status (COMPLETED, FAILED, CANCELED).",
		}, []string{"status"}),
		models:    bounded{telemetry.NewLabelSet(MaxModels)},
		providers: bounded{telemetry.NewLabelSet(MaxProviders)},
	}
	m.reg.MustRegister(m.runsFinished, m.tokens, m.turnSeconds, m.agentCalls, m.agentCallDur,
		m.programCalls, m.programCallDur, m.programLimits, m.programFinished,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry the metrics are on, to add more or to gather.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// RunFinished counts an agent run that ended with status.
func (m *Metrics) RunFinished(status string) {
	if m == nil {
		return
	}
	m.runsFinished.WithLabelValues(status).Inc()
}

// ModelTurn records one model call of provider and model that took d, and
// the tokens it reported (zero when the call failed).
func (m *Metrics) ModelTurn(provider, model string, d time.Duration, input, output int64) {
	if m == nil {
		return
	}
	provider, model = m.providers.label(provider), m.models.label(model)
	m.turnSeconds.WithLabelValues(provider).Observe(d.Seconds())
	if input > 0 {
		m.tokens.WithLabelValues(provider, model, "input").Add(float64(input))
	}
	if output > 0 {
		m.tokens.WithLabelValues(provider, model, "output").Add(float64(output))
	}
}

// AgentToolCall counts a tool result appended to an agent run.
func (m *Metrics) AgentToolCall(outcome string) {
	if m == nil {
		return
	}
	m.agentCalls.WithLabelValues(outcome).Inc()
}

// AgentGatewayCall records the time of one gateway call of an agent run.
func (m *Metrics) AgentGatewayCall(d time.Duration) {
	if m == nil {
		return
	}
	m.agentCallDur.Observe(d.Seconds())
}

// ProgramToolCall counts a program's tool call with its outcome.
func (m *Metrics) ProgramToolCall(outcome string) {
	if m == nil {
		return
	}
	m.programCalls.WithLabelValues(outcome).Inc()
}

// ProgramGatewayCall records the time of one gateway call of a program.
func (m *Metrics) ProgramGatewayCall(d time.Duration) {
	if m == nil {
		return
	}
	m.programCallDur.Observe(d.Seconds())
}

// ProgramFinished counts a program that ended with status and, when it
// failed on one, the limit it hit.
func (m *Metrics) ProgramFinished(status, limit string) {
	if m == nil {
		return
	}
	m.programFinished.WithLabelValues(status).Inc()
	if limit != "" {
		m.programLimits.WithLabelValues(limit).Inc()
	}
}

// bounded hands out at most max distinct label values, first come first
// served, and Other for the rest.
type bounded struct{ set *telemetry.LabelSet }

func (b bounded) label(v string) string {
	if v == "" {
		return "unknown"
	}
	if v = telemetry.CleanLabel(v, maxLabelBytes); !b.set.Admit(v) {
		return Other
	}
	return v
}
