// Command kv serves the KV toolkit: a durable key-value memory for agents in a NATS
// JetStream KV bucket. It needs NATS and refuses to start without it.
//
//	go run ./workers/kv --listen 127.0.0.1:19104 --nats nats://127.0.0.1:4222
//
// Besides the flags and environment of every worker (see sdk/tool.Main):
//
//	TOOLFLEET_KV_BUCKET   bucket name (default agent_memory), created when missing
//	TOOLFLEET_KV_HISTORY  revisions kept per key for a new bucket, 1-64 (default 10)
//	TOOLFLEET_KV_START_TIMEOUT  how long to wait at start for NATS and the bucket
//	                      (default 3m): started before NATS answers, it waits
//
// The bucket's replicas, storage, byte bound and max age come from
// --js-replicas, --js-storage, --js-profile and --js-overrides (asset
// agent_memory; docs/operations.md, "JetStream assets").
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/kv/kv"
)

// Environment variables of this worker.
const (
	EnvBucket       = "TOOLFLEET_KV_BUCKET"
	EnvHistory      = "TOOLFLEET_KV_HISTORY"
	EnvStartTimeout = "TOOLFLEET_KV_START_TIMEOUT"
)

// connectTimeout bounds one attempt at connecting to NATS or opening the
// bucket; defaultStartTimeout bounds all the attempts at start.
const (
	connectTimeout      = 15 * time.Second
	defaultStartTimeout = 3 * time.Minute
)

// errNoNATS is returned when neither --nats nor TOOLFLEET_NATS_URL is set.
var errNoNATS = errors.New("kv needs NATS for its bucket: pass --nats nats://HOST:4222 or set " + tool.EnvNATSURL)

func main() {
	tool.Main("kv", register(os.Getenv))
}

// register connects to the worker's NATS (--nats or TOOLFLEET_NATS_URL, with the
// credentials and TLS of --nats-creds, --nats-ca and so on), opens (or
// creates) the bucket and registers the service.
func register(getenv func(string) string) func(w *tool.Worker) error {
	return func(w *tool.Worker) error {
		url := w.NATSURL()
		if url == "" {
			return errNoNATS
		}
		cfg, err := bucketConfig(getenv)
		if err != nil {
			return err
		}
		cfg.Assets = w.Assets()
		startTimeout := defaultStartTimeout
		if v := getenv(EnvStartTimeout); v != "" {
			if startTimeout, err = time.ParseDuration(v); err != nil || startTimeout <= 0 {
				return fmt.Errorf("kv: %s=%q: want a positive duration such as 3m", EnvStartTimeout, v)
			}
		}
		// Started in any order (in Kubernetes, often before cluster DNS answers
		// for the NATS Service or before a JetStream cluster has a leader): wait
		// for NATS and the bucket up to startTimeout instead of exiting.
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		retry := natsconn.RetryPolicy{What: "kv: connect to NATS at " + url, Log: w.Logger()}
		nc, err := natsconn.Retry(ctx, retry, func(context.Context) (*nats.Conn, error) {
			return w.ConnectNATS("toolfleet-kv", nats.Timeout(connectTimeout), nats.MaxReconnects(-1))
		})
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return fmt.Errorf("kv: JetStream: %w", err)
		}
		retry.What = "kv: open bucket"
		bucket, err := natsconn.Retry(ctx, retry, func(ctx context.Context) (jetstream.KeyValue, error) {
			octx, ocancel := context.WithTimeout(ctx, connectTimeout)
			defer ocancel()
			return kv.OpenBucket(octx, js, cfg)
		})
		if err != nil {
			nc.Close()
			return err
		}
		// Drain lets in-flight KV writes finish after the last call was served.
		w.OnStop(func() { _ = nc.Drain() })
		kvv1.RegisterKVServiceServer(w, kv.New(bucket))
		return nil
	}
}

var bucketNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// bucketConfig reads the bucket settings from the environment.
func bucketConfig(getenv func(string) string) (kv.BucketConfig, error) {
	cfg := kv.BucketConfig{Name: getenv(EnvBucket)}
	if cfg.Name != "" && !bucketNameRE.MatchString(cfg.Name) {
		return cfg, fmt.Errorf("kv: %s=%q: a bucket name has only letters, digits, - and _", EnvBucket, cfg.Name)
	}
	if h := getenv(EnvHistory); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 || n > 64 {
			return cfg, fmt.Errorf("kv: %s=%q: want a number of revisions from 1 to 64", EnvHistory, h)
		}
		cfg.History = uint8(n)
	}
	return cfg, nil
}
