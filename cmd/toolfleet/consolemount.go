package main

import (
	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/services/console"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// devConsole is the console of `toolfleet dev`: with --gateway-jwt-secret
// its dev sign-in mints tokens with that secret; with auth off every
// visitor is the anonymous principal; with --console-oidc-issuer people
// also sign in with that OpenID Connect provider (devoidc.go). A run's
// page links to its workflow in the stack's Temporal UI, when it has one.
func devConsole(cfg devConfig, stack *devstack.Stack) (*console.Server, error) {
	c := console.Config{AuthOff: cfg.JWTSecret == "", TemporalUI: stack.UIAddress(), Namespace: stack.Namespace()}
	if cfg.JWTSecret != "" {
		c.DevSecret = []byte(cfg.JWTSecret)
	}
	oidc, err := cfg.OIDC.console()
	if err != nil {
		return nil, err
	}
	c.OIDC = oidc
	return console.New(c)
}

// consoleMount serves the console at /console/ on the gateway's port. It
// calls the AgentService and ProgramService at the gateway's own address
// as each signed-in principal (set with Connect once the gateway listens).
func consoleMount(c *console.Server) gateway.Mount {
	return gateway.Mount{Pattern: c.Pattern(), Handler: c}
}
