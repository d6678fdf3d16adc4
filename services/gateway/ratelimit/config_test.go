package ratelimit

import (
	"testing"
	"time"
)

// TestShippedLimitsFile: the example rules of k8s/components/limits load, and
// say what their comments say.
func TestShippedLimitsFile(t *testing.T) {
	t.Parallel()
	rules, err := LoadFile("../../../k8s/components/limits/limits.yaml")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Rule{}
	for _, r := range rules {
		byName[r.Name] = r
	}
	if r := byName["batch"]; r.Principal != "svc-*" || r.Rate != 200 || r.Burst != 400 || r.Concurrent != 64 {
		t.Errorf("batch: %+v", r)
	}
	if r := byName["per-caller"]; r.Rate != 20 || r.Concurrent != 16 {
		t.Errorf("per-caller: %+v", r)
	}
	if r := byName["web-bytes"]; r.Tool != "web.*" || r.Bytes != 100<<20 || time.Duration(r.Window) != time.Hour {
		t.Errorf("web-bytes: %+v", r)
	}
}
