package main

import (
	"context"
	"errors"
	"log/slog"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// startRetrying starts the orchestrator, retrying with backoff while NATS or
// Temporal is not there yet (cluster DNS does not answer for the Service, the
// port refuses, a JetStream cluster has no leader yet), until ctx ends. In
// Kubernetes the pods of a fleet start in any order: without this the
// orchestrator exited and the kubelet restarted it until NATS and Temporal
// were up. Refused credentials, bad TLS files and JetStream limits fail at once.
func startRetrying(ctx context.Context, cfg runner.Config, log *slog.Logger) (*runner.Orchestrator, error) {
	return natsconn.Retry(ctx, natsconn.RetryPolicy{What: "start the orchestrator", Log: log, Temporary: temporaryStart},
		func(ctx context.Context) (*runner.Orchestrator, error) { return runner.Start(ctx, cfg) })
}

// temporaryStart says whether a start error may pass by waiting: a temporary
// NATS error (natsconn.Temporary), or Temporal unreachable.
func temporaryStart(err error) bool {
	if natsconn.Temporary(err) {
		return true
	}
	var unavailable *serviceerror.Unavailable
	if errors.As(err, &unavailable) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}
