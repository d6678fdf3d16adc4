package devstack_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/devstack"
)

// kindTemporal is the kind overlay's Temporal dev server (docs/operations.md).
const kindTemporal = "../../k8s/overlays/kind/temporal.yaml"

// TestKindTemporalMatchesDevConfig: the Temporal dev server on kind runs with the
// same latency-tuned dynamic config as `toolfleet dev`, given as
// `--dynamic-config-value KEY=JSON` arguments.
func TestKindTemporalMatchesDevConfig(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(kindTemporal)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	next := false
	for line := range strings.Lines(string(b)) {
		arg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- "))
		if next {
			k, v, ok := strings.Cut(arg, "=")
			if !ok {
				t.Fatalf("%s: --dynamic-config-value %q is not KEY=VALUE", kindTemporal, arg)
			}
			got[strings.ToLower(k)] = v // Temporal's keys are case-insensitive
		}
		next = arg == "--dynamic-config-value"
	}
	want := map[string]string{}
	for k, v := range devstack.LatencyTunedDynamicConfig() {
		switch v := v.(type) {
		case int:
			want[strings.ToLower(k)] = fmt.Sprint(v)
		case time.Duration:
			want[strings.ToLower(k)] = `"` + v.String() + `"`
		default:
			t.Fatalf("%s is a %T: teach this test how the temporal CLI spells it", k, v)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s dynamic config\n got %v\nwant %v", kindTemporal, sorted(got), sorted(want))
	}
}

func sorted(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}
