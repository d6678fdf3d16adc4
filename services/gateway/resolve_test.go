package gateway_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// TestResolveSpellingsDoNotGrowTheCache: 10,000 distinct spellings of
// Calculator.Add@1.0.0 (leading zeros, which resolved before versions were
// strict) are refused, the canonical spellings resolve, and the resolution cache
// holds canonical references only: it does not grow with what callers send.
func TestResolveSpellingsDoNotGrowTheCache(t *testing.T) {
	t.Parallel()
	_, calc, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{Workers: []string{calc}, Auth: gateway.AuthConfig{Disabled: true}})
	waitTool(t, g, "Calculator.Add@1.0.0")

	canonical := []string{"Calculator.Add@1.0.0", "Calculator.Add@1", "Calculator_Add@1", "Calculator_Add@1.0.0", "Calculator.Add", "Calculator_Add"}
	for _, id := range canonical {
		if _, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: id}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	base := gateway.ResolveCacheLenForTest(g)
	// Two canonical references: Calculator.Add@1.0.0 and Calculator.Add (latest).
	if base != 2 {
		t.Fatalf("%d cached references after %d spellings of two canonical ones, want 2", base, len(canonical))
	}

	zeros := func(n int) string { return strings.Repeat("0", n) }
	n := 0
	for a := 0; a < 22 && n < 10000; a++ {
		for b := 0; b < 22 && n < 10000; b++ {
			for c := 0; c < 22 && n < 10000; c++ {
				if a+b+c == 0 {
					continue // the canonical spelling
				}
				id := "Calculator.Add@" + zeros(a) + "1." + zeros(b) + "0." + zeros(c) + "0"
				_, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: id})
				if gateway.CodeOf(err) != codes.NotFound || !errors.Is(err, gateway.ErrUnknownTool) {
					t.Fatalf("%s: %v, want NotFound", id, err)
				}
				n++
			}
		}
	}
	if n != 10000 {
		t.Fatalf("tried %d spellings, want 10000", n)
	}
	if got := gateway.ResolveCacheLenForTest(g); got != base {
		t.Fatalf("resolution cache grew from %d to %d entries after %d spellings", base, got, n)
	}
}

// TestResolveRejects: signs, leading zeros and over-long ids are refused as
// client errors; an over-long id is refused before any search for close names
// and is not echoed back.
func TestResolveRejects(t *testing.T) {
	t.Parallel()
	_, calc, _ := calculatorWorker(t, "")
	logs := &lockedBuffer{}
	g := startGateway(t, gateway.Config{Workers: []string{calc}, Auth: gateway.AuthConfig{Disabled: true},
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	waitTool(t, g, "Calculator.Add@1.0.0")
	t.Cleanup(func() {
		// Logged, but bounded: the log of six refused calls stays far below one huge id.
		if n := len(logs.String()); n > 64<<10 {
			t.Errorf("the refused calls logged %d bytes", n)
		}
	})
	huge := "Calculator.Add" + strings.Repeat("x", 1<<20)
	tests := []struct {
		name, id string
		code     codes.Code
	}{
		{"padded patch", "Calculator.Add@1.0.0000000", codes.NotFound},
		{"negative minor", "Calculator.Add@1.-0.0", codes.NotFound},
		{"plus sign", "Calculator.Add@+1", codes.NotFound},
		{"leading zero major", "Calculator.Add@01", codes.NotFound},
		{"just over the cap", "Calculator.Add@" + strings.Repeat("1", contract.MaxToolRefLen), codes.InvalidArgument},
		{"1 MiB", huge, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: tt.id, Input: addInput(1, 2)})
			if gateway.CodeOf(err) != tt.code {
				t.Fatalf("err = %v, want %v", err, tt.code)
			}
			var ce *gateway.CallError
			if !errors.As(err, &ce) {
				t.Fatalf("%T is not a *CallError", err)
			}
			msg := ce.Error() + ce.Server.GetDeveloperMessage()
			if len(tt.id) > contract.MaxToolRefLen && (len(msg) > 512 || strings.Contains(msg, "xxxxxxxx") || strings.Contains(msg, "11111111")) {
				t.Fatalf("an over-long id is echoed: %d bytes of error", len(msg))
			}
		})
	}
}

// TestDiscoveryCaps: ListTools and SearchTools refuse over-long tokens, globs,
// toolkit names and queries before any work, without echoing them.
func TestDiscoveryCaps(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gateway.Config{Auth: gateway.AuthConfig{Disabled: true}})
	huge := strings.Repeat("z", 1<<20)
	calls := map[string]func() error{
		"page token": func() error { _, err := g.ListTools(&toolfleetv1.ListToolsRequest{PageToken: huge}); return err },
		"filter":     func() error { _, err := g.ListTools(&toolfleetv1.ListToolsRequest{Filter: huge}); return err },
		"toolkit":    func() error { _, err := g.ListTools(&toolfleetv1.ListToolsRequest{Toolkit: huge}); return err },
		"query":      func() error { _, err := g.SearchTools(&toolfleetv1.SearchToolsRequest{Query: huge}); return err },
		"search toolkit": func() error {
			_, err := g.SearchTools(&toolfleetv1.SearchToolsRequest{Query: "add", Toolkit: huge})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := call()
			if gateway.CodeOf(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			if strings.Contains(err.Error(), "zzzzzzzz") || len(err.Error()) > 256 {
				t.Fatalf("the value is echoed: %d bytes", len(err.Error()))
			}
		})
	}
	// Values within the caps still work.
	if _, err := g.SearchTools(&toolfleetv1.SearchToolsRequest{Query: strings.Repeat("add ", 1000)}); err != nil {
		t.Fatalf("a 4000-byte query: %v", err)
	}
}
