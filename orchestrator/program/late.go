package program

import (
	"net/http"
	"sync/atomic"

	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
)

// Late is the ProgramService for a server that starts before the
// orchestrator (the gateway): mount it up front (Connect, gRPC-Web and HTTP
// JSON), Set the service once it exists; until then calls are Unavailable.
type Late struct {
	s atomic.Pointer[Service]
}

// Set makes s answer calls.
func (l *Late) Set(s *Service) { l.s.Store(s) }

// Pattern is the path prefix of the ProgramService.
func (l *Late) Pattern() string { return "/" + toolfleetv1connect.ProgramServiceName + "/" }

// ServeHTTP serves the service once it is set.
func (l *Late) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := l.s.Load()
	if s == nil {
		http.Error(w, "the orchestrator is starting", http.StatusServiceUnavailable)
		return
	}
	_, h := s.Handler()
	h.ServeHTTP(w, r)
}
