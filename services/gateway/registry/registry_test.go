package registry_test

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// calculators starts n calculator workers on loopback and a registry that knows
// them as static workers; it returns once the registry serves Calculator.Add on
// all of them.
func calculators(t *testing.T, n int) (*registry.Registry, []string) {
	t.Helper()
	var addrs []string
	for range n {
		w, _ := tooltest.Start(t, tool.Config{Name: "calculator"}, func(w *tool.Worker) {
			calculatorv1.RegisterCalculatorServiceServer(w, calculator.New())
		})
		addrs = append(addrs, w.Addr())
	}
	r := registry.New(slog.New(slog.NewTextHandler(io.Discard, nil)), 10*time.Second)
	t.Cleanup(r.Close)
	r.KeepStatic(t.Context(), addrs, 100*time.Millisecond)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if rt := r.Current().Route("Calculator.Add@1.0.0"); rt != nil && rt.Replicas() == n {
			return r, addrs
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry never served Calculator.Add@1.0.0 on %d replicas", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	r, _ := calculators(t, 1)
	snap := r.Current()
	want := snap.Route("Calculator.Add@1.0.0")
	for _, id := range []string{"Calculator.Add@1.0.0", "Calculator.Add@1", "Calculator.Add", "Calculator_Add", "Calculator_Add@1"} {
		rt, re := snap.Resolve(id)
		if re != nil || rt != want {
			t.Errorf("Resolve(%q) = %p, %v; want the route of Calculator.Add@1.0.0", id, rt, re)
		}
	}
	// Every spelling shares one of two canonical references (exact and latest).
	if n := snap.ResolvedLen(); n < 1 || n > 2 {
		t.Errorf("%d cached resolutions after 5 spellings of one tool; want 1 or 2", n)
	}
	cached := snap.ResolvedLen()

	tests := []struct {
		name, id string
		code     codes.Code
		says     string
	}{
		{"misspelt", "Calculator.Ad", codes.NotFound, "closest tools: Calculator.Add"},
		{"unserved version", "Calculator.Add@9", codes.NotFound, "served versions: 1.0.0"},
		{"not a reference", "no spaces allowed", codes.NotFound, "want Toolkit.Tool"},
		{"over-long", "Calculator.Add" + strings.Repeat("x", contract.MaxToolRefLen), codes.InvalidArgument, "tool ids are at most"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt, re := snap.Resolve(tc.id)
			if rt != nil || re == nil {
				t.Fatalf("Resolve(%q) = %v, %v; want a ResolveError", tc.id, rt, re)
			}
			if re.Code != tc.code || !strings.Contains(re.Message, tc.says) || !errors.Is(re, registry.ErrUnknownTool) {
				t.Errorf("Resolve(%q) = %v %q; want %v saying %q, wrapping ErrUnknownTool", tc.id, re.Code, re.Message, tc.code, tc.says)
			}
			if len(tc.id) > contract.MaxToolRefLen && strings.Contains(re.Message, tc.id) {
				t.Errorf("an over-long id is echoed: %q", re.Message)
			}
		})
	}
	t.Cleanup(func() {
		// Failed resolutions are not cached: a caller cannot grow the cache.
		if n := snap.ResolvedLen(); n != cached {
			t.Errorf("%d cached resolutions after failed ones; want %d", n, cached)
		}
	})
}

func TestPickRoundRobin(t *testing.T) {
	t.Parallel()
	r, addrs := calculators(t, 2)
	snap := r.Current()
	rt := snap.Route("Calculator.Add@1.0.0")
	first, second := rt.Pick(), rt.Pick()
	if len(first) != 2 || len(second) != 2 {
		t.Fatalf("Pick returned %d and %d replicas; want 2 each", len(first), len(second))
	}
	if first[0].Addr() == second[0].Addr() {
		t.Errorf("two picks both start with %s; want round robin over %v", first[0].Addr(), addrs)
	}
	if d := snap.Defs(); len(d) == 0 || !snap.IsLatest(rt.Def()) {
		t.Errorf("Defs() = %d tools, IsLatest(Calculator.Add@1.0.0) = %v; want the served tool as latest", len(d), snap.IsLatest(rt.Def()))
	}
}
