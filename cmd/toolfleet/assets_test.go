package main

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/trigger"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// TestEveryAssetTakesTheConfiguration starts what creates JetStream assets —
// the gateway and the bundled workers (as `toolfleet dev` does), the
// orchestrator's store, run events and trigger streams — against one NATS
// server with one asset configuration, then lists every stream on the server:
// each is one of the fleet's assets and carries the configured replicas,
// storage, byte bound and max age, overrides included; and no asset is missing.
func TestEveryAssetTakesTheConfiguration(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	cfg := jsassets.Config{Replicas: "1", Storage: "file", Profile: jsassets.ProfileDev,
		Overrides: "toolfleet_run_blobs.max-bytes=96MiB,TOOLFLEET_CALL_EVENTS.max-age=36h,agent_memory.max-age=90d"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	fl, err := startFleet(ctx, fleetConfig{Host: "127.0.0.1", NATSURL: srv.URL(), Assets: cfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fl.stop() })

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runstore.OpenStore(ctx, js, runstore.StoreConfig{Assets: cfg}); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.OpenEvents(ctx, nc, js, agent.EventStreamFor("", cfg)); err != nil {
		t.Fatal(err)
	}
	triggers := &trigger.Config{Triggers: []trigger.Trigger{{Name: "noop", Subject: "toolfleet.triggers.noop",
		RunAs: toolcall.Principal{Subject: "assets-test"}, Program: &trigger.ProgramTarget{Source: `result = 1`}}}}
	r, err := trigger.Start(ctx, js, triggers, trigger.Options{Programs: &program.Programs{}, Assets: cfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)

	want := map[string]jsassets.Asset{}
	for _, a := range jsassets.All() {
		want[a.StreamName()] = a
	}
	// Optional, but made here: the gateway has NATS and no --input-state-key-file.
	want[jsassets.InputKey.StreamName()] = jsassets.InputKey
	// Optional, but made here: the gateway's store shares are on by default.
	want[jsassets.RateLimits.StreamName()] = jsassets.RateLimits
	var found []string
	deadline := time.Now().Add(20 * time.Second) // the result store is made in the background
	for {
		found = found[:0]
		for name := range js.StreamNames(ctx).Name() {
			found = append(found, name)
		}
		if len(found) >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	slices.Sort(found)
	if len(found) != len(want) {
		t.Errorf("streams on the server: %v; want one per asset (%d)", found, len(want))
	}
	for _, name := range found {
		a, ok := want[name]
		if !ok {
			t.Errorf("stream %s is no asset of jsassets.All(): add it to the catalogue and docs/operations.md", name)
			continue
		}
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got, s := st.CachedInfo().Config, cfg.Settings(a)
		if got.Replicas != s.Replicas || got.Storage != s.Storage || got.MaxBytes != s.MaxBytes || got.MaxAge != s.MaxAge {
			t.Errorf("%s: replicas %d, storage %s, max bytes %d, max age %s; want %d, %s, %d, %s",
				name, got.Replicas, got.Storage, got.MaxBytes, got.MaxAge, s.Replicas, s.Storage, s.MaxBytes, s.MaxAge)
		}
	}
	// The overrides took effect (not just the profile).
	if s := cfg.Settings(jsassets.RunBlobs); s.MaxBytes != 96<<20 {
		t.Fatalf("run blobs override: %d", s.MaxBytes)
	}
}

// Replicas 3 cannot be placed on one embedded server; the configurations the
// components ask JetStream for carry them.
func TestAssetConfigsAskForTheConfiguredReplicas(t *testing.T) {
	t.Parallel()
	cfg := jsassets.Config{Replicas: "3"}
	g := gateway.Config{Assets: cfg}
	if n := g.EventStreamConfig().Replicas; n != 3 {
		t.Errorf("call events: %d replicas", n)
	}
	if n := g.IdempotencyConfig().Replicas; n != 3 {
		t.Errorf("idempotency: %d replicas", n)
	}
	if n := agent.EventStreamFor("", cfg).Replicas; n != 3 {
		t.Errorf("run events: %d replicas", n)
	}
	for _, a := range jsassets.All() {
		if s := cfg.Settings(a); s.Replicas != 3 || s.Storage != jetstream.FileStorage {
			t.Errorf("%s: %+v", a.Name, s)
		}
	}
}
