package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/internal/telemetry"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// TestNoEmbeddedServers keeps the production binary free of the embedded
// NATS and Temporal servers that only `toolfleet dev` links.
func TestNoEmbeddedServers(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps found only %d packages", len(deps))
	}
	for _, d := range deps {
		for _, bad := range []string{"github.com/nats-io/nats-server", "go.temporal.io/server", "github.com/toolfleet/toolfleet/internal/devstack"} {
			if strings.HasPrefix(d, bad) {
				t.Errorf("cmd/orchestrator links %s", d)
			}
		}
	}
}

func TestFlagsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad log level", []string{"--log-level", "loud"}, "--log-level"},
		{"no temporal", []string{"--temporal-address", ""}, "Temporal address is required"},
		{"unknown flag", []string{"--nope"}, "unknown flag"},
		{"bad metrics address", []string{"--metrics-listen", "9090"}, "--metrics-listen"},
		{"missing trigger file", []string{"--triggers", "/nonexistent/triggers.yaml"}, "trigger:"},
		{"bad history content", []string{"--history-content", "some"}, "--history-content"},
		{"bad quota bytes", []string{"--principal-max-bytes", "lots"}, "--principal-max-bytes"},
		{"bad event quota bytes", []string{"--principal-max-event-bytes", "lots"}, "--principal-max-event-bytes"},
		{"negative quota runs", []string{"--principal-max-runs", "-2"}, "--principal-max-runs"},
		{"too many quota runs", []string{"--principal-max-runs", "20000"}, "--principal-max-runs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(t.Context(), tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestMetricsEndpoint: --metrics-listen serves the orchestrator's metrics in
// the Prometheus text format, and nothing else.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	m.RunFinished("COMPLETED")
	stop := telemetry.ServeMetrics(lis, m.Handler(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer stop()
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+lis.Addr().String()+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get(http.MethodGet, "/metrics")
	for _, want := range []string{`toolfleet_agent_runs_finished_total{status="COMPLETED"} 1`, "go_goroutines "} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("GET /metrics: %d, lacks %q:\n%s", code, want, body)
		}
	}
	if code, _ := get(http.MethodPost, "/metrics"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", code)
	}
	if code, _ := get(http.MethodGet, "/"); code != http.StatusNotFound {
		t.Errorf("GET /: %d, want 404", code)
	}
}

// TestStorageFlags: the history setting and the quota flags reach the
// orchestrator's configuration (none and 0 turn a bound off).
func TestStorageFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args     []string
		content  string
		maxBytes int64
		maxRuns  int
	}{
		{nil, "previews", 0, 1000},
		{[]string{"--history-content=none", "--principal-max-bytes=2GiB", "--principal-max-runs=50"}, "none", 2 << 30, 50},
		{[]string{"--principal-max-bytes=none", "--principal-max-runs=0"}, "previews", -1, -1},
	}
	for _, tt := range tests {
		cfg, _, err := parse(tt.args)
		if err != nil {
			t.Fatalf("parse(%v): %v", tt.args, err)
		}
		if cfg.HistoryContent != tt.content || cfg.PrincipalMaxBytes != tt.maxBytes || cfg.PrincipalMaxRuns != tt.maxRuns {
			t.Errorf("parse(%v): history %q, max bytes %d, max runs %d; want %q, %d, %d", tt.args,
				cfg.HistoryContent, cfg.PrincipalMaxBytes, cfg.PrincipalMaxRuns, tt.content, tt.maxBytes, tt.maxRuns)
		}
	}
}

// TestScriptDir: --script-dir serves scripted:NAME.yaml model files, as
// `toolfleet dev --script-dir` does; without it script files are refused
// (the demo still works), and a missing folder fails at start.
func TestScriptDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "count.yaml"), []byte("turns:\n  - calls:\n      - tool: KV.Increment\n        args: {key: k}\n  - text: counted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := agent.ModelSpec{Spec: llm.Spec{Provider: llm.ProviderScripted, Name: "count.yaml"}}
	demo := agent.ModelSpec{Spec: llm.Spec{Provider: llm.ProviderScripted, Name: llm.DemoModelName}}

	cfg, _, err := parse([]string{"--script-dir", dir})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Models == nil {
		t.Fatal("--script-dir set no model resolver")
	}
	for _, spec := range []agent.ModelSpec{file, demo} {
		if _, err := cfg.Models.Model(t.Context(), spec); err != nil {
			t.Errorf("with --script-dir, model %s: %v", spec.Name, err)
		}
	}
	// Without the flag, the runner's default resolver refuses script files.
	cfg, _, err = parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Models != nil {
		if _, err := cfg.Models.Model(t.Context(), file); err == nil {
			t.Error("without --script-dir a script file was served")
		}
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), filepath.Join(dir, "count.yaml")} {
		if _, _, err := parse([]string{"--script-dir", bad}); err == nil || !strings.Contains(err.Error(), "--script-dir") {
			t.Errorf("--script-dir %s: %v, want an error naming the flag", bad, err)
		}
	}
}
