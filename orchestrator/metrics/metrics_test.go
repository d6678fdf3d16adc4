package metrics_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolfleet/toolfleet/orchestrator/metrics"
)

// Model names come from callers: past MaxModels distinct names, the rest
// share the "other" series, so a caller cannot grow the series without bound.
func TestModelLabelsAreBounded(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	for i := range metrics.MaxModels + 10 {
		m.ModelTurn("openai", fmt.Sprintf("model-%d", i), time.Millisecond, 1, 2)
	}
	m.ModelTurn("openai", "model-0", time.Millisecond, 5, 0) // seen before: keeps its series
	m.ModelTurn("openai", "\xff"+strings.Repeat("x", 200), time.Millisecond, 1, 0)

	if n := testutil.CollectAndCount(m.Registry(), "toolfleet_agent_model_tokens_total"); n != 2*(metrics.MaxModels+1) {
		t.Errorf("token series %d, want %d (MaxModels names and other, in and out)", n, 2*(metrics.MaxModels+1))
	}
	for _, c := range []struct {
		model, direction string
		want             float64
	}{
		{"model-0", "input", 6}, {"model-0", "output", 2},
		{metrics.Other, "input", 11}, {metrics.Other, "output", 20},
	} {
		labels := map[string]string{"provider": "openai", "model": c.model, "direction": c.direction}
		if got := value(t, m, "toolfleet_agent_model_tokens_total", labels); got != c.want {
			t.Errorf("tokens %v = %g, want %g", labels, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.Registry(), "toolfleet_agent_model_turn_seconds"); n != 1 {
		t.Errorf("turn histogram series %d, want 1 (provider openai)", n)
	}
}

func TestProvidersAreBounded(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	for i := range metrics.MaxProviders + 3 {
		m.ModelTurn(fmt.Sprintf("p%d", i), "m", time.Second, 0, 0)
	}
	if n := testutil.CollectAndCount(m.Registry(), "toolfleet_agent_model_turn_seconds"); n != metrics.MaxProviders+1 {
		t.Errorf("turn histogram series %d, want %d", n, metrics.MaxProviders+1)
	}
}

func TestProgramFinished(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.ProgramFinished("FAILED", "max_steps")
	m.ProgramFinished("FAILED", "")
	m.ProgramFinished("COMPLETED", "")
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP toolfleet_program_limits_hit_total Programs that failed on a limit, by limit (max_steps, max_tool_calls, max_width, deadline, max_value_bytes, max_result_bytes, max_memory_bytes, max_parallel).
# TYPE toolfleet_program_limits_hit_total counter
toolfleet_program_limits_hit_total{limit="max_steps"} 1
# HELP toolfleet_program_runs_finished_total Programs that ended, by status (COMPLETED, FAILED, CANCELED).
# TYPE toolfleet_program_runs_finished_total counter
toolfleet_program_runs_finished_total{status="COMPLETED"} 1
toolfleet_program_runs_finished_total{status="FAILED"} 2
`), "toolfleet_program_limits_hit_total", "toolfleet_program_runs_finished_total"); err != nil {
		t.Error(err)
	}
}

// Activities built without metrics (tests) record nothing and do not panic.
func TestNilMetrics(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	m.RunFinished("COMPLETED")
	m.ModelTurn("openai", "gpt", time.Second, 1, 1)
	m.AgentToolCall("ok")
	m.AgentGatewayCall(time.Second)
	m.ProgramToolCall("ok")
	m.ProgramGatewayCall(time.Second)
	m.ProgramFinished("FAILED", "deadline")
}

// value is the value of the counter name with exactly labels, or -1.
func value(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			if len(s.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range s.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return s.GetCounter().GetValue()
		}
	}
	return -1
}
