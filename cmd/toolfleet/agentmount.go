package main

import (
	"context"
	"net/http"

	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// agentMount serves the AgentService at the gateway's address. The gateway
// starts before the orchestrator (which calls tools through it), so the
// service is set once the orchestrator is up; until then calls are Unavailable.
type agentMount struct {
	late agentapi.Late
}

func (a *agentMount) mount() gateway.Mount {
	return gateway.Mount{Pattern: a.late.Pattern(), Handler: &a.late, RegisterGRPC: a.late.RegisterGRPC}
}

// serve sets o's AgentService, authenticating callers like the gateway does.
func (a *agentMount) serve(o *runner.Orchestrator, g *gateway.Gateway) {
	a.late.Set(o.AgentService(func(ctx context.Context, h http.Header) (agentapi.Caller, error) {
		p, err := g.Authenticate(ctx, h.Get("Authorization"))
		if err != nil {
			return agentapi.Caller{}, err
		}
		return agentapi.Caller{Subject: p.Subject, Scopes: p.Scopes, Anonymous: p.Anonymous}, nil
	}))
}
