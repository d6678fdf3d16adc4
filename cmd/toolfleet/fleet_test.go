package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
)

// TestFleet: the bundled workers announce themselves on NATS, the gateway finds
// them, the printed curl call works, and every call shows up on
// toolfleet.events.> (what `nats sub 'toolfleet.events.>'` prints). The
// gateway enforces the limits it is given (`toolfleet dev --limits-file`).
func TestFleet(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	limits := ratelimit.Config{Rules: []ratelimit.Rule{{Name: "clock", Tool: "clock.*", Rate: 1.0 / 60, Burst: 1}}}
	f, err := startFleet(ctx, fleetConfig{Host: "127.0.0.1", NATSURL: srv.URL(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Limits: limits})
	if err != nil {
		t.Fatalf("startFleet: %v", err)
	}
	defer func() {
		if err := f.stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	if err := f.waitToolkits(ctx, f.Toolkits...); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	events, err := nc.SubscribeSync("toolfleet.events.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	printFleet(&out, f, false, srv.URL())
	if !strings.Contains(out.String(), f.Gateway.Addr()) || !strings.Contains(out.String(), "grpcurl -plaintext -d") {
		t.Fatalf("printed:\n%s", out.String())
	}
	// With auth on, every hint names the variable the CLI reads, and says how to set it.
	out.Reset()
	printFleet(&out, f, true, srv.URL())
	if s := out.String(); !strings.Contains(s, "export TOOLFLEET_TOKEN=") || !strings.Contains(s, `Bearer $TOOLFLEET_TOKEN"`) {
		t.Fatalf("printed with auth on:\n%s", s)
	}
	body := `{"request": {"tool_id": "Calculator.Add", "input": {"a": 2, "b": 3}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.Gateway.Addr()+"/tools/call", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Result struct {
			Success bool               `json:"success"`
			Value   map[string]float64 `json:"value"`
		} `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 || got.Result.Value["result"] != 5 {
		t.Fatalf("HTTP %d %+v %v", resp.StatusCode, got, err)
	}
	// A fast call publishes its terminal event only (docs/gateway.md, "Events").
	for _, want := range []string{"toolfleet.events.call.Calculator.Add.succeeded"} {
		m, err := events.NextMsg(10 * time.Second)
		if err != nil || m.Subject != want {
			t.Fatalf("event %v %v, want %s", m, err, want)
		}
	}

	// The clock rule admits one call a minute: the second is refused with a delay.
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.Gateway.Addr()+"/tools/call",
			strings.NewReader(`{"request": {"tool_id": "Clock.Now", "input": {}}}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "") {
			t.Fatalf("Clock.Now call %d: HTTP %d (Retry-After %q), want %d", i+1, resp.StatusCode, resp.Header.Get("Retry-After"), want)
		}
	}
}

// TestDevLimitsFileIsChecked: `toolfleet dev --limits-file` with a file that
// is missing or limits nothing stops before anything starts.
func TestDevLimitsFileIsChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(empty, []byte("rules:\n  - name: nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{filepath.Join(dir, "missing.yaml"), empty} {
		out, err := runInProcess(t.Context(), "dev", "--data-dir", filepath.Join(dir, "data"), "--dev-file", "", "--limits-file", file)
		if err == nil || !strings.Contains(err.Error(), "--limits-file") {
			t.Fatalf("dev --limits-file %s: %v\n%s", file, err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
			t.Fatalf("dev --limits-file %s started the stack before refusing", file)
		}
	}
}

func TestDevConfigRefusesOpenGatewayOffLoopback(t *testing.T) {
	t.Parallel()
	cfg := devConfig{DataDir: "x", Host: "0.0.0.0", Namespace: "default", LogLevel: "warn", StopTimeout: time.Second, GatewayPort: 8080}
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "--gateway-jwt-secret") {
		t.Fatalf("validate = %v, want a demand for --gateway-jwt-secret", err)
	}
	cfg.JWTSecret = "s3cret"
	if err := cfg.validate(); err != nil {
		t.Fatalf("validate with a secret: %v", err)
	}
}

// TestFleetNATSCredentials: with a NATS that requires a token (as `toolfleet dev
// --nats-token` makes it), the bundled workers and the gateway connect with it
// and find each other; a wrong token is refused at once.
func TestFleetNATSCredentials(t *testing.T) {
	t.Parallel()
	creds := natsconn.Options{Token: "dev-t0ken"}
	require, err := natsx.RequireAuth(creds)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir(), Configure: require})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := startFleet(ctx, fleetConfig{Host: "127.0.0.1", NATSURL: srv.URL(), NATS: natsconn.Options{Token: "guess"}, Logger: quiet}); err == nil {
		t.Fatal("a fleet with a wrong token started")
	}
	f, err := startFleet(ctx, fleetConfig{Host: "127.0.0.1", NATSURL: srv.URL(), NATS: creds, Logger: quiet})
	if err != nil {
		t.Fatalf("startFleet: %v", err)
	}
	defer func() {
		if err := f.stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	if err := f.waitToolkits(ctx, f.Toolkits...); err != nil {
		t.Fatal(err)
	}
}
