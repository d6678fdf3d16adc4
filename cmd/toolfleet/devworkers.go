package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/toolfleet/toolfleet/internal/devworker"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// startDevWorkers runs each `toolfleet dev --worker DIR` from source
// (internal/devworker: built, restarted on change, backed off on crashes),
// listening on a free loopback port and announcing on the dev NATS with the
// dev NATS credentials (passed in the environment, never as arguments).
// stop stops them all and returns once their processes are gone.
func startDevWorkers(dirs []string, natsURL string, creds natsconn.Options, stderr io.Writer, logger *slog.Logger) (stop func(), err error) {
	if err := checkDevWorkers(dirs); err != nil {
		return nil, err
	}
	env := natsEnv(creds)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, d := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := devworker.Run(ctx, devworker.Config{Dir: d, Args: []string{"--listen", "127.0.0.1:0", "--nats", natsURL},
				Env: env, Stdout: stderr, Stderr: stderr, Logger: logger})
			if err != nil {
				logger.Error("worker from source stopped", "worker", d, "error", err)
			}
		}()
	}
	return func() { cancel(); wg.Wait() }, nil
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
