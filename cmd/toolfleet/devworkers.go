package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/devworker"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// devWorkerSettle is how long a new worker runs beside the old one after it
// announced itself SERVING and answered reflection: the gateway loads it from
// the same announcement (a dial and the same reflection exchange, milliseconds
// on loopback), so that calls have a replica to move to when the old one drains.
const devWorkerSettle = time.Second

// startDevWorkers runs each `toolfleet dev --worker DIR` from source
// (internal/devworker: built, swapped in on change with no downtime, backed
// off on crashes), listening on a free loopback port and announcing on the
// dev NATS with the dev NATS credentials (passed in the environment, never as
// arguments). Its "building…" / "ready …" / "build failed …" lines go to
// stderr. admission is the dev gateway's verdict on a worker address
// (gateway.Gateway.WorkerAdmission): a rebuild that only adds tools joins
// beside the running worker, which then stops, with no gap. stop stops them
// all and returns once their processes are gone.
func startDevWorkers(dirs []string, natsURL string, creds natsconn.Options, admission func(addr string) (joined, refused bool),
	stderr io.Writer, logger *slog.Logger) (stop func(), err error) {
	if err := checkDevWorkers(dirs); err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return func() {}, nil
	}
	nc, err := creds.Connect(natsURL, "toolfleet dev workers")
	if err != nil {
		return nil, fmt.Errorf("--worker: connect to the dev NATS: %w", err)
	}
	env := natsEnv(creds)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, d := range dirs {
		wg.Go(func() {
			err := devworker.Run(ctx, devworker.Config{Dir: d, Args: []string{"--nats", natsURL}, Listen: "127.0.0.1",
				Ready: func(ctx context.Context, addr string) (string, error) { return devWorkerReady(ctx, nc, addr) },
				Draining: func(ctx context.Context, addr string, stop func()) error {
					return devWorkerDraining(ctx, nc, addr, stop)
				},
				Joined: func(ctx context.Context, addr string) bool { return devWorkerJoined(ctx, admission, addr) },
				Env:    env, Stdout: stderr, Stderr: stderr, Status: stderr, Logger: logger})
			if err != nil {
				logger.Error("worker from source stopped", "worker", d, "error", err)
			}
		})
	}
	return func() { cancel(); wg.Wait(); nc.Close() }, nil
}

// devWorkerReady returns once the worker at addr announced itself SERVING on
// nc and its contracts were read by reflection (and devWorkerSettle later),
// with a key of those contracts: Toolkit@version=digest, sorted.
func devWorkerReady(ctx context.Context, nc *nats.Conn, addr string) (string, error) {
	seen := make(chan struct{})
	var once sync.Once
	sub, err := nc.Subscribe(tool.AnnounceSubject, func(m *nats.Msg) {
		var a toolfleetv1.WorkerAnnouncement
		if protojson.Unmarshal(m.Data, &a) == nil && a.GetAddress() == addr && a.GetHealth() == tool.HealthServing {
			once.Do(func() { close(seen) })
		}
	})
	if err != nil {
		return "", err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The worker may have announced before the subscription: ask again until it answers.
	probe := time.NewTicker(200 * time.Millisecond)
	defer probe.Stop()
	for waiting := true; waiting; {
		_ = nc.Publish(tool.DiscoverSubject, nil)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no SERVING announcement from %s: %w", addr, ctx.Err())
		case <-seen:
			waiting = false
		case <-probe.C:
		}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	c, err := contract.Fetch(ctx, conn)
	if err != nil {
		return "", err
	}
	var keys []string
	for _, sd := range c.Services {
		d, err := contract.Digest(sd)
		if err != nil {
			return "", err
		}
		tk := contract.ToolkitOf(sd)
		keys = append(keys, tk.Name+"@"+tk.Version+"="+d)
	}
	slices.Sort(keys)
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(devWorkerSettle):
	}
	return strings.Join(keys, " "), nil
}

// devWorkerJoinWait bounds how long a rebuilt worker with another contract
// waits for the gateway's verdict after it was ready (the gateway loads it
// from the same announcement, so the verdict is normally there already).
const devWorkerJoinWait = 5 * time.Second

// devWorkerJoined reports whether the gateway took the worker at addr beside
// the running one (a contract that only adds tools), asking admission until
// it joined or was refused, within devWorkerJoinWait.
func devWorkerJoined(ctx context.Context, admission func(string) (bool, bool), addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, devWorkerJoinWait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		joined, refused := admission(addr)
		if joined || refused {
			return joined
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// devWorkerDraining calls stop (SIGTERM to the worker at addr) and returns
// once the worker announced it is draining: the gateway, which reads the same
// announcement, then routes no new call to it and accepts a new contract of
// its toolkit version from the replacement.
func devWorkerDraining(ctx context.Context, nc *nats.Conn, addr string, stop func()) error {
	seen := make(chan struct{})
	var once sync.Once
	sub, err := nc.Subscribe(tool.AnnounceSubject, func(m *nats.Msg) {
		var a toolfleetv1.WorkerAnnouncement
		if protojson.Unmarshal(m.Data, &a) == nil && a.GetAddress() == addr && a.GetHealth() != tool.HealthServing {
			once.Do(func() { close(seen) })
		}
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The subscription is in place before the signal, so the announcement cannot be missed.
	if err := nc.Flush(); err != nil {
		return err
	}
	stop()
	select {
	case <-seen:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no DRAINING announcement from %s: %w", addr, ctx.Err())
	}
}

// checkDevWorkers refuses a --worker that is not a folder inside a Go module.
func checkDevWorkers(dirs []string) error {
	for _, d := range dirs {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return fmt.Errorf("--worker %s: not a folder", d)
		}
		if _, err := devworker.ModuleRoot(d); err != nil {
			return fmt.Errorf("--worker %s: %w", d, err)
		}
	}
	return nil
}

// natsEnv is creds as the TOOLFLEET_NATS_* variables every worker reads.
func natsEnv(o natsconn.Options) []string {
	var env []string
	for k, v := range map[string]string{natsconn.EnvCreds: o.CredsFile, natsconn.EnvNKey: o.NKeySeedFile, natsconn.EnvUser: o.User,
		natsconn.EnvPassword: o.Password, natsconn.EnvToken: o.Token, natsconn.EnvCA: o.CAFile, natsconn.EnvCert: o.CertFile, natsconn.EnvKey: o.KeyFile} {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}
