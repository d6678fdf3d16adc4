package gateway

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

func TestFieldLabel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a":                      "a",
		"items[3].name":          "items[].name",
		`labels["secret"].value`: "labels[].value",
		"bad\xffutf8":            "bad?utf8",
		strings.Repeat("x", 500): strings.Repeat("x", maxFieldLabel),
	} {
		if got := fieldLabel(in); got != want {
			t.Errorf("fieldLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// Series are bounded: tool versions past maxToolSeries and fields past
// maxFieldSeries share the "other" series.
func TestMetricSeriesBounded(t *testing.T) {
	t.Parallel()
	m := newMetrics(func() float64 { return 0 })
	for i := range maxToolSeries + 50 {
		v := strconv.Itoa(i)
		km := m.tool(&toolfleetv1.ToolDefinition{Id: "Kit.Tool@" + v + ".0.0", Toolkit: "Kit", Name: "Tool", Version: v + ".0.0"})
		m.count(km, "success")
		m.validationFailed(km, &toolfleetv1.ValidationError{ParameterErrors: map[string]string{"f" + v: "bad"}})
	}
	if n := testutil.CollectAndCount(m.reg, "toolfleet_gateway_calls_total"); n != maxToolSeries+1 {
		t.Errorf("call series %d, want %d", n, maxToolSeries+1)
	}
	if got := testutil.ToFloat64(m.calls.WithLabelValues(otherLabel, otherLabel, otherLabel, "success")); got != 50 {
		t.Errorf("other series counted %g calls, want 50", got)
	}
	if n := testutil.CollectAndCount(m.reg, "toolfleet_gateway_validation_failures_total"); n > maxFieldSeries+2 {
		t.Errorf("validation series %d, want at most %d", n, maxFieldSeries+2)
	}
}
