package main

import (
	"context"
	"net/http"

	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/metrics"
	"github.com/toolfleet/toolfleet/orchestrator/programapi"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/connections"
	"github.com/toolfleet/toolfleet/services/gateway/mcp/orchestration"
)

// agentMount serves the AgentService at the gateway's address. The gateway
// starts before the orchestrator (which calls tools through it), so the
// service is set once the orchestrator is up; until then calls are Unavailable.
type agentMount struct {
	late agentapi.Late
}

func (a *agentMount) mount() gateway.Mount {
	return gateway.Mount{Pattern: a.late.Pattern(), Handler: &a.late}
}

// serve sets o's AgentService, authenticating callers like the gateway does.
func (a *agentMount) serve(o *runner.Orchestrator, g *gateway.Gateway) {
	a.late.Set(o.AgentService(gatewayAuth(g)))
}

// service is the AgentService MCP tasks call in process: no HTTP between,
// UNAVAILABLE until serve.
func (a *agentMount) service() (orchestration.Agents, error) {
	if s := a.late.Get(); s != nil {
		return s, nil
	}
	return nil, apibase.Starting()
}

// programMount serves the ProgramService at the gateway's address the same
// way (gRPC, Connect, gRPC-Web and HTTP JSON).
type programMount struct {
	late programapi.Late
}

func (m *programMount) mount() gateway.Mount {
	return gateway.Mount{Pattern: m.late.Pattern(), Handler: &m.late}
}

// serve sets o's ProgramService, authenticating callers like the gateway does.
func (m *programMount) serve(o *runner.Orchestrator, g *gateway.Gateway) {
	m.late.Set(o.ProgramService(gatewayAuth(g)))
}

// service is the ProgramService MCP tasks call in process, UNAVAILABLE until serve.
func (m *programMount) service() (orchestration.Programs, error) {
	if s := m.late.Get(); s != nil {
		return s, nil
	}
	return nil, apibase.Starting()
}

// mcpTasks runs /mcp's tasks on the two services, in process; conns (nil:
// none) makes the links of connect items.
func mcpTasks(agents *agentMount, programs *programMount, conns *connections.API) *orchestration.Tasks {
	s := orchestration.Services{Programs: programs.service, Agents: agents.service}
	if conns != nil {
		s.Connections = conns
	}
	return orchestration.New(s)
}

// gatewayAuth authenticates a request's Authorization header with the gateway.
func gatewayAuth(g *gateway.Gateway) agentapi.Authenticator {
	return func(ctx context.Context, h http.Header) (agentapi.Caller, error) {
		p, err := g.Authenticate(ctx, h.Get("Authorization"))
		if err != nil {
			return agentapi.Caller{}, err
		}
		return agentapi.Caller{Subject: p.Subject, Scopes: p.Scopes, Anonymous: p.Anonymous}, nil
	}
}

// OrchestratorMetricsPath is where the gateway of `toolfleet dev` serves the
// in-process orchestrator's metrics (the gateway's own are at /metrics; the
// production orchestrator serves its own on --metrics-listen).
const OrchestratorMetricsPath = "/metrics/orchestrator"

// metricsMount serves m at the gateway's address, unauthenticated like the
// gateway's /metrics.
func metricsMount(m *metrics.Metrics) gateway.Mount {
	return gateway.Mount{Pattern: "GET " + OrchestratorMetricsPath, Handler: m.Handler()}
}
