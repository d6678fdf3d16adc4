// Command gateway is toolfleet's tool gateway as a production binary: it serves
// gRPC, Connect, gRPC-Web and OXP HTTP on one plaintext h2c port, in front of
// static workers (any gRPC service with server reflection) and/or workers that
// announce themselves on an external NATS. It never links an embedded NATS or
// Temporal server; `toolfleet dev` is the one binary that does.
//
//	gateway --listen 0.0.0.0:8080 --nats-url nats://nats:4222 \
//	    --workers calculator:9000,legacy-grpc.internal:50051 \
//	    --jwt-hs256-secret-file /var/run/secrets/toolfleet/jwt/hs256
//
// Every flag is also an environment variable (TOOLFLEET_ + the flag in upper snake
// case, e.g. TOOLFLEET_NATS_URL); a flag on the command line wins. The
// configuration is validated before anything starts. SIGTERM (or SIGINT) stops
// the gateway gracefully within --shutdown-timeout, which must stay shorter than
// the pod's terminationGracePeriodSeconds. See docs/operations.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}
