package main

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// agentMount serves the AgentService at the gateway's address. The gateway
// starts before the orchestrator (which calls tools through it), so the
// handler is set once the orchestrator is up; until then calls get 503.
type agentMount struct {
	h atomic.Pointer[http.Handler]
}

func (a *agentMount) mount() gateway.Mount {
	return gateway.Mount{Pattern: "/" + toolfleetv1connect.AgentServiceName + "/", Handler: a}
}

func (a *agentMount) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := a.h.Load()
	if h == nil {
		http.Error(w, "the orchestrator is starting", http.StatusServiceUnavailable)
		return
	}
	(*h).ServeHTTP(w, r)
}

// serve mounts o's AgentService, authenticating callers like the gateway does.
func (a *agentMount) serve(o *runner.Orchestrator, g *gateway.Gateway) {
	svc := o.AgentService(func(ctx context.Context, h http.Header) (agentapi.Caller, error) {
		p, err := g.Authenticate(ctx, h.Get("Authorization"))
		if err != nil {
			return agentapi.Caller{}, err
		}
		return agentapi.Caller{Subject: p.Subject, Scopes: p.Scopes, Anonymous: p.Anonymous}, nil
	})
	_, h := svc.Handler()
	a.h.Store(&h)
}
