package runstore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// openStores opens n stores (n orchestrator replicas, each with its own
// connection) on one NATS server with cfg.
func openStores(t *testing.T, n int, cfg runstore.StoreConfig) []*runstore.Store {
	t.Helper()
	url := natstest.Start(t).URL()
	var out []*runstore.Store
	for range n {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Memory = true
		s, err := runstore.OpenStore(t.Context(), js, cfg)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestQuotaHoldsAcrossReplicas: 40 starts of 1,000 bytes by one principal,
// racing on two replicas against a 10,000-byte quota: exactly 10 are
// admitted, the rest refused with a QuotaError, and another principal is
// admitted all along.
func TestQuotaHoldsAcrossReplicas(t *testing.T) {
	t.Parallel()
	stores := openStores(t, 2, runstore.StoreConfig{Settings: &runstore.Settings{Quota: runstore.Quota{MaxBytes: 10_000, MaxRuns: 100}}})
	ctx := t.Context()
	var mu sync.Mutex
	admitted, refused := 0, 0
	var wg sync.WaitGroup
	began := time.Now()
	for i := range 40 {
		wg.Go(func() {
			err := stores[i%2].Admit(ctx, "mallory", fmt.Sprintf("run-%d", i), 1000)
			mu.Lock()
			defer mu.Unlock()
			var qe *runstore.QuotaError
			switch {
			case err == nil:
				admitted++
			case errors.As(err, &qe) && errors.Is(err, runstore.ErrQuotaExceeded):
				refused++
			default:
				t.Errorf("admit %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	t.Logf("40 racing admissions on 2 replicas: %s", time.Since(began))
	if admitted != 10 || refused != 30 {
		t.Errorf("%d admitted, %d refused; want 10 and 30", admitted, refused)
	}
	if held, runs, err := stores[1].Held(ctx, "mallory"); err != nil || held != 10_000 || runs != 10 {
		t.Errorf("held: %d bytes in %d runs (%v); want 10000 in 10", held, runs, err)
	}
	began = time.Now()
	if err := stores[0].Admit(ctx, "alice", "alice-run", 9_000); err != nil {
		t.Errorf("another principal: %v", err)
	}
	t.Logf("one uncontended admission: %s", time.Since(began))
}

// TestQuotaLeakRepairs: a run counted but never freed (its orchestrator
// crashed before the run started) stops counting once its entry lapses, so
// its principal can start again without anyone repairing anything.
func TestQuotaLeakRepairs(t *testing.T) {
	t.Parallel()
	stores := openStores(t, 1, runstore.StoreConfig{Assets: jsassets.Config{Overrides: "toolfleet_runs.max-age=1s"},
		Settings: &runstore.Settings{Quota: runstore.Quota{MaxRuns: 1, Hold: time.Second}}})
	s, ctx := stores[0], t.Context()
	if err := s.Admit(ctx, "ana", "leaked", 10); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(ctx, "ana", "next", 10); !errors.Is(err, runstore.ErrQuotaExceeded) {
		t.Fatalf("a second run over a quota of one: %v, want ErrQuotaExceeded", err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := s.Admit(ctx, "ana", "next", 10)
		if err == nil {
			break
		}
		if !errors.Is(err, runstore.ErrQuotaExceeded) || time.Now().After(deadline) {
			t.Fatalf("the leaked count did not lapse: %v", err)
		}
	}
}

// TestHoldProgramRecord: a held program's description keeps the layout it
// always had (a run's, with an empty spec and kind "program"), its owner is
// the holder, and its refusals are what Refused and IsFull recognise.
func TestHoldProgramRecord(t *testing.T) {
	t.Parallel()
	s := openStores(t, 1, runstore.StoreConfig{Settings: &runstore.Settings{Quota: runstore.Quota{MaxBytes: 10_000, MaxRuns: 100}}})[0]
	ctx := t.Context()
	if err := s.HoldProgram(ctx, "alice", "prog-1"); err != nil {
		t.Fatal(err)
	}
	b, err := s.Meta(ctx, "prog-1")
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"spec":{"model":{"provider":"","name":""},"budget":{},"approval":{}},"principal":{"subject":"alice"},"kind":"program"}`
	if string(b) != want {
		t.Errorf("program record %s, want %s", b, want)
	}
	if got := s.Owner(ctx, "prog-1"); got != "alice" {
		t.Errorf("owner %q, want alice", got)
	}
	if err := s.Admit(ctx, "alice", "run-1", 10_000); err != nil {
		t.Fatal(err)
	}
	err = s.HoldProgram(ctx, "alice", "prog-2")
	if !runstore.Refused(err) || runstore.IsFull(err) || !errors.Is(err, runstore.ErrQuotaExceeded) {
		t.Errorf("HoldProgram over the quota: %v, want a quota refusal", err)
	}
	if runstore.Refused(errors.New("nats: timeout")) {
		t.Error("a failure to ask counts as a refusal")
	}
	if full := fmt.Errorf("wrapped: %w", &runstore.StoreFullError{Program: true}); !runstore.Refused(full) || !runstore.IsFull(full) {
		t.Error("a full store is not recognised")
	}
}
