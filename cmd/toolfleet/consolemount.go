package main

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/services/console"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// devConsole is the console of `toolfleet dev`: with --gateway-jwt-secret
// its dev sign-in mints tokens with that secret; with auth off every
// visitor is the anonymous principal; with --console-oidc-issuer people
// also sign in with that OpenID Connect provider (devoidc.go). A run's
// page links to its workflow in the stack's Temporal UI, when it has one.
// Its sessions live in the stack's NATS (a KV bucket, as behind a load
// balancer), on a connection of its own that closeFn ends.
func devConsole(cfg devConfig, stack *devstack.Stack) (_ *console.Server, closeFn func(), _ error) {
	c := console.Config{AuthOff: cfg.JWTSecret == "", TemporalUI: stack.UIAddress(), Namespace: stack.Namespace()}
	if cfg.JWTSecret != "" {
		c.DevSecret = []byte(cfg.JWTSecret)
	}
	oidc, err := cfg.OIDC.console()
	if err != nil {
		return nil, nil, err
	}
	c.OIDC = oidc
	nc, err := cfg.NATS.Connect(stack.NATS.URL(), "toolfleet dev console", nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("console: NATS: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("console: JetStream: %w", err)
	}
	// One process: a key of its own serves, unless a secret is at hand.
	var secret []byte
	if oidc != nil && oidc.ClientSecret != "" {
		secret = []byte(oidc.ClientSecret)
	} else if cfg.JWTSecret != "" {
		secret = []byte(cfg.JWTSecret)
	}
	c.Sessions = &console.SharedSessions{JetStream: js, Bucket: console.SessionBucket(cfg.Assets), Key: console.SessionKey(secret)}
	s, err := console.New(c)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return s, nc.Close, nil
}

// consoleMount serves the console at /console/ on the gateway's port. It
// calls the AgentService and ProgramService at the gateway's own address
// as each signed-in principal (set with Connect once the gateway listens).
func consoleMount(c *console.Server) gateway.Mount {
	return gateway.Mount{Pattern: c.Pattern(), Handler: c}
}
