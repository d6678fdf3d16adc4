package gateway_test

import (
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// TestMetrics: /metrics counts calls by tool version and outcome, validation
// failures by field, idempotency refusals by reason, and shows the event
// backlog.
func TestMetrics(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, calc, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{calc}})
	waitTool(t, g, "Calculator.Add")
	waitStore(t, g)
	call := func(callID string, in map[string]any) {
		_, _ = g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{CallId: callID, ToolId: "Calculator.Add", Input: mustStruct(t, in)})
	}
	call("m-1", map[string]any{"a": 1, "b": 2})
	call("m-1", map[string]any{"a": 5, "b": 5}) // same call_id, other input
	call("", map[string]any{"a": "one", "b": 2})
	call("", map[string]any{"a": "one", "b": "two"})
	for name, want := range map[string]float64{
		`toolfleet_gateway_calls_total{outcome="success",tool="Add",toolkit="Calculator",version="1.0.0"}`:    1,
		`toolfleet_gateway_calls_total{outcome="validation",tool="Add",toolkit="Calculator",version="1.0.0"}`: 2,
		`toolfleet_gateway_calls_total{outcome="server",tool="Add",toolkit="Calculator",version="1.0.0"}`:     1,
		`toolfleet_gateway_validation_failures_total{field="a",tool="Add",toolkit="Calculator"}`:              2,
		`toolfleet_gateway_validation_failures_total{field="b",tool="Add",toolkit="Calculator"}`:              1,
		`toolfleet_gateway_idempotency_refused_total{reason="other_input"}`:                                   1,
		`toolfleet_gateway_call_duration_seconds_count{tool="Add",toolkit="Calculator",version="1.0.0"}`:      4,
	} {
		if got := metricValue(t, g, name); got != want {
			t.Errorf("%s = %g, want %g", name, got, want)
		}
	}
	if got := metricValue(t, g, "toolfleet_gateway_events_queued"); got < 0 || got > float64(gateway.DefaultEventQueue) {
		t.Errorf("events_queued = %g", got)
	}
}
