package toolcall_test

import (
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// TestResolve: the one rule runs and programs get their tools by, against a
// real gateway with the calculator and SchemaTest workers.
func TestResolve(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{})
	gw, err := client.New(fleet.Addr, client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	names := func(defs []*toolfleetv1.ToolDefinition) string {
		var s []string
		for _, d := range defs {
			s = append(s, d.GetToolkit()+"."+d.GetName())
		}
		return strings.Join(s, " ")
	}
	configError := func(err error, want string) bool {
		var app *temporal.ApplicationError
		return errors.As(err, &app) && app.NonRetryable() && app.Type() == toolcall.ErrTypeConfig && strings.Contains(app.Message(), want)
	}

	t.Run("order of the patterns, each tool once", func(t *testing.T) {
		t.Parallel()
		defs, err := toolcall.Resolve(t.Context(), gw, toolcall.Selection{
			Patterns: []string{"Calculator.Divide", "Calculator.*", "SchemaTest.Types@0.3.1", "Calculator.Add"}, Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		got := names(defs)
		if !strings.HasPrefix(got, "Calculator.Divide Calculator.") || !strings.HasSuffix(got, " SchemaTest.Types") || len(defs) != 6 {
			t.Fatalf("resolved %q, want Divide, the other four calculator tools, then SchemaTest.Types", got)
		}
	})
	t.Run("a glob that matches nothing fails for good", func(t *testing.T) {
		t.Parallel()
		_, err := toolcall.Resolve(t.Context(), gw, toolcall.Selection{Patterns: []string{"Nothing.*"}, Max: 10})
		if !configError(err, `no tool matches "Nothing.*"`) {
			t.Fatalf("err = %v, want a non-retryable ConfigError naming the glob", err)
		}
	})
	t.Run("an unknown exact id fails for good", func(t *testing.T) {
		t.Parallel()
		_, err := toolcall.Resolve(t.Context(), gw, toolcall.Selection{Patterns: []string{"Calculator.Nope@1"}, Max: 10})
		if !configError(err, `tool "Calculator.Nope@1"`) {
			t.Fatalf("err = %v, want a non-retryable ConfigError naming the id", err)
		}
	})
	t.Run("more than Max from the patterns is refused, not cut", func(t *testing.T) {
		t.Parallel()
		_, err := toolcall.Resolve(t.Context(), gw, toolcall.Selection{Patterns: []string{"Calculator.*"}, Max: 3})
		if !configError(err, "more than 3 tools match") {
			t.Fatalf("err = %v, want a non-retryable ConfigError saying more than 3", err)
		}
	})
	t.Run("search results fill the room left", func(t *testing.T) {
		t.Parallel()
		defs, err := toolcall.Resolve(t.Context(), gw, toolcall.Selection{
			Patterns: []string{"SchemaTest.Types"}, Search: "add two numbers", SearchLimit: 8, Max: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(defs) != 2 || defs[0].GetName() != "Types" || defs[1].GetToolkit() != "Calculator" {
			t.Fatalf("resolved %q, want SchemaTest.Types then one calculator tool from the search", names(defs))
		}
	})
}
