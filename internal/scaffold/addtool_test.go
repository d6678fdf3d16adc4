package scaffold_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/internal/scaffold"
)

// AddTool extends the contract inside the service (braces in comments and
// strings do not fool it), writes a handler and a test named after the
// tool, and refuses names that are taken or malformed without writing.
// TestScaffoldBuildsAndPasses and TestAuthoringWithOnlyGo compile and run
// what it writes.
func TestAddTool(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "weather")
	if _, err := (scaffold.Toolkit{Name: "weather", Module: "github.com/acme/weather"}).Write(dir); err != nil {
		t.Fatal(err)
	}
	protoPath := filepath.Join(dir, "proto", "weather", "v1", "weather.proto")
	src, err := os.ReadFile(protoPath)
	if err != nil {
		t.Fatal(err)
	}
	// Braces in a comment and a string inside the service must not end it early.
	tricky := strings.Replace(string(src), `description: "Greet someone by name."`, `description: "Greet someone by name. } {"
      // a comment with a brace }`, 1)
	if err := os.WriteFile(protoPath, []byte(tricky), 0o644); err != nil {
		t.Fatal(err)
	}
	added, err := scaffold.AddTool(dir, "ForecastToday")
	if err != nil {
		t.Fatal(err)
	}
	if added.ToolID != "Weather.ForecastToday" || len(added.Files) != 2 {
		t.Errorf("added = %+v", added)
	}
	got, err := os.ReadFile(protoPath)
	if err != nil {
		t.Fatal(err)
	}
	contract := string(got)
	rpc := strings.Index(contract, "rpc ForecastToday(ForecastTodayRequest) returns (ForecastTodayResponse)")
	svcEnd := strings.Index(contract, "\n}\n")
	if rpc < 0 || svcEnd < rpc || !strings.Contains(contract[svcEnd:], "message ForecastTodayRequest {") || !strings.Contains(contract, "message ForecastTodayResponse {") {
		t.Errorf("the rpc is not inside the service, or the messages are missing:\n%s", contract)
	}
	for file, want := range map[string]string{
		"weather/forecast_today.go":      "func (s *Service) ForecastToday(_ context.Context, req *weatherv1.ForecastTodayRequest) (*weatherv1.ForecastTodayResponse, error)",
		"weather/forecast_today_test.go": `gw.Call(t.Context(), "Weather.ForecastToday"`,
	} {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(file)))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q (%v):\n%s", file, want, err, b)
		}
	}

	// Taken and malformed names are refused and change nothing.
	for _, tc := range []struct {
		name string
		want error
	}{
		{"ForecastToday", scaffold.ErrToolExists},
		{"Hello", scaffold.ErrToolExists},
		{"forecast", scaffold.ErrBadTool},
		{"Fore-cast", scaffold.ErrBadTool},
		{"", scaffold.ErrBadTool},
	} {
		if _, err := scaffold.AddTool(dir, tc.name); !errors.Is(err, tc.want) {
			t.Errorf("AddTool(%q) = %v, want %v", tc.name, err, tc.want)
		}
	}
	if again, _ := os.ReadFile(protoPath); string(again) != contract {
		t.Error("a refused AddTool changed the contract")
	}
	// A folder that is not a toolkit.
	if _, err := scaffold.AddTool(t.TempDir(), "Forecast"); !errors.Is(err, scaffold.ErrNotToolkit) {
		t.Errorf("AddTool outside a toolkit = %v, want ErrNotToolkit", err)
	}
}
