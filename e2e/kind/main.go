// Command kind is `make kind-test`: it proves a toolfleet fleet on the current
// kube context as a user would use it. It brings the fleet up with `tilt ci`
// (overlay k8s/overlays/$OVERLAY, kind, kind-ha or kind-hydra), then, through kubectl
// port-forwards and with a bearer token signed with the kind overlays'
// dev-only secret:
//
//   - checks every pod is ready and NATS is a 3-node JetStream cluster whose
//     streams, KV buckets and object stores all have 3 current replicas;
//   - lists and calls tools;
//   - completes an agent run (model scripted:demo) and a program;
//   - approves a call a run waits on;
//   - starts a run from a NATS trigger;
//   - with k8s/components/hydra (overlay kind-hydra), connects a principal
//     to the acme provider through Ory Hydra, sees both gateway pods list
//     the connection and revokes it (hydra.go);
//   - chaos: while programs and agent runs make non-idempotent KV.Increment
//     calls (and runs save their results), deletes the orchestrator pod, a
//     NATS pod and a gateway pod with --force and rolls every Deployment; every
//     program and run completes, and every counter ends exact; direct gRPC
//     callers retry each KV.Increment call_id across the deletions (direct.go),
//     and no call of theirs may run twice, be lost or find the tool unknown.
//
// It prints one line per check and `cluster checks passed: N/M` last, and
// exits 1 unless all passed. It is its own Go module so that production
// builds and `go test ./...` never compile it; it needs kubectl (and tilt,
// unless -skip-up) on PATH and a cluster. See docs/operations.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

// config is the command line.
type config struct {
	overlay   string
	repo      string
	namespace string
	skipUp    bool
	upTimeout time.Duration
	programs  int
	runs      int
	counts    int
	// directCallers make KV.Increment calls with their own call ids during
	// the chaos (direct.go).
	directCallers int
	calm          bool
	timeout       time.Duration
	only          string
}

func run(ctx context.Context, args []string) int {
	var cfg config
	fs := flag.NewFlagSet("kind-test", flag.ContinueOnError)
	fs.StringVar(&cfg.overlay, "overlay", envOr("OVERLAY", "kind"), "the overlay tilt deploys: kind, kind-ha or kind-hydra (env OVERLAY)")
	fs.StringVar(&cfg.repo, "repo", "../..", "the repository root (where the Tiltfile is)")
	fs.StringVar(&cfg.namespace, "namespace", "toolfleet", "the fleet's namespace")
	fs.BoolVar(&cfg.skipUp, "skip-up", false, "do not run tilt ci: test the fleet already deployed")
	fs.DurationVar(&cfg.upTimeout, "up-timeout", 30*time.Minute, "how long tilt ci may take")
	fs.IntVar(&cfg.programs, "chaos-programs", 4, "programs running KV.Increment loops during the chaos")
	fs.IntVar(&cfg.runs, "chaos-runs", 4, "agent runs during the chaos")
	fs.IntVar(&cfg.counts, "chaos-increments", 60, "increments each chaos program makes")
	fs.IntVar(&cfg.directCallers, "chaos-direct-callers", 4, "gRPC callers making KV.Increment calls with their own call ids, retried across the gateway pod's deletion, during the chaos")
	fs.BoolVar(&cfg.calm, "chaos-calm", false, "run the chaos workload without the kills and rollouts (a baseline)")
	fs.DurationVar(&cfg.timeout, "timeout", 45*time.Minute, "bound of the whole test")
	fs.StringVar(&cfg.only, "only", "", "run only the checks whose name contains this (comma-separated: any of these)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !slices.Contains([]string{"kind", "kind-ha", "kind-hydra"}, cfg.overlay) {
		fmt.Fprintf(os.Stderr, "-overlay %q: want kind, kind-ha or kind-hydra\n", cfg.overlay)
		return 2
	}
	repo, err := filepath.Abs(cfg.repo)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.repo = repo
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	h := &harness{cfg: cfg, start: time.Now()}
	defer h.close()
	checks := h.checks()
	passed, ran := 0, 0
	for _, c := range checks {
		if cfg.only != "" && !c.always && !slices.ContainsFunc(strings.Split(cfg.only, ","), func(o string) bool { return strings.Contains(c.name, o) }) {
			continue
		}
		ran++
		begin := time.Now()
		err := c.fn(ctx)
		d := time.Since(begin).Round(100 * time.Millisecond)
		if err != nil {
			fmt.Printf("FAIL %-34s %6s  %v\n", c.name, d, err)
			if c.fatal {
				fmt.Printf("     (the checks after it need it: stopping)\n")
				break
			}
			continue
		}
		passed++
		fmt.Printf("ok   %-34s %6s  %s\n", c.name, d, h.note)
		h.note = ""
	}
	total := ran
	if cfg.only == "" {
		total = len(checks)
	}
	fmt.Printf("\noverlay %s, %s in all\n", cfg.overlay, time.Since(h.start).Round(time.Second))
	for _, f := range h.figures {
		fmt.Println("  " + f)
	}
	fmt.Printf("cluster checks passed: %d/%d\n", passed, total)
	if passed != total {
		return 1
	}
	return 0
}

// check is one named step; fatal ones stop the run when they fail.
type check struct {
	name   string
	fn     func(context.Context) error
	fatal  bool
	always bool // runs even when -only filters it out (setup)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// errf is fmt.Errorf, for brevity in the checks.
func errf(format string, args ...any) error { return fmt.Errorf(format, args...) }

var errNotYet = errors.New("not yet")
