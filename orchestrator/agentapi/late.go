package agentapi

import (
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
)

// Late is the AgentService for a server that starts before the orchestrator
// (the gateway, which the orchestrator calls tools through): mount it up
// front at Pattern (its handler serves Connect, gRPC, gRPC-Web and HTTP JSON),
// Set the service once it exists; until then calls are Unavailable.
type Late struct {
	apibase.Late[Service, *Service]
}

// Pattern is the path prefix of the AgentService.
func (l *Late) Pattern() string { return "/" + toolfleetv1connect.AgentServiceName + "/" }
