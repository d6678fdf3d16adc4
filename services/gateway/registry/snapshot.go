package registry

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/reflect/protoreflect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
	"github.com/toolfleet/toolfleet/services/gateway/search"
)

// Route is one served tool version and the replicas that serve it.
type Route struct {
	def      *toolfleetv1.ToolDefinition
	method   protoreflect.MethodDescriptor
	replicas []*Replica
	next     atomic.Uint64
}

// Def is the tool's definition (shared: do not modify it).
func (rt *Route) Def() *toolfleetv1.ToolDefinition { return rt.def }

// Method is the tool's gRPC method, for building its input and output messages.
func (rt *Route) Method() protoreflect.MethodDescriptor { return rt.method }

// Replicas counts the replicas of the tool version, draining ones included.
func (rt *Route) Replicas() int { return len(rt.replicas) }

// Journaled reports whether every replica of the tool version keeps the call
// journal (a call may go to any of them).
func (rt *Route) Journaled() bool {
	for _, w := range rt.replicas {
		if !w.journal {
			return false
		}
	}
	return len(rt.replicas) > 0
}

// Pick returns the replicas in round-robin order, ready ones first, so that a
// caller can fall back to the next one. Draining replicas are left out: when
// every replica is draining, Pick returns none and the call is Unavailable
// (retryable) while the tool stays known.
func (rt *Route) Pick() []*Replica {
	n := len(rt.replicas)
	start := int(rt.next.Add(1) % uint64(n))
	out := make([]*Replica, 0, n)
	var down []*Replica
	for i := range n {
		w := rt.replicas[(start+i)%n]
		if w.draining.Load() {
			continue
		}
		switch w.conn.GetState() {
		case connectivity.TransientFailure, connectivity.Shutdown:
			down = append(down, w)
		default:
			out = append(out, w)
		}
	}
	return append(out, down...)
}

// Snapshot is an immutable view of the registry, rebuilt on every change. Only
// its resolution cache grows, bounded by the tools it serves.
type Snapshot struct {
	routes map[string]*Route // by id "Toolkit.Tool@x.y.z"
	defs   []*toolfleetv1.ToolDefinition
	// byName holds every version of "Toolkit.Tool".
	byName map[string][]*toolfleetv1.ToolDefinition
	index  *search.Index
	// resolved caches resolutions by canonical reference (contract.ToolRef.String → *Route).
	resolved sync.Map
	// warm is the registry's live view of what it does not know yet, shared by
	// every snapshot: a miss asks it whether the tool may only not be loaded yet.
	warm *warmth
}

func buildSnapshot(ws []*Replica, warm *warmth) *Snapshot {
	s := &Snapshot{routes: map[string]*Route{}, byName: map[string][]*toolfleetv1.ToolDefinition{}, warm: warm}
	for _, w := range ws {
		for _, d := range w.defs {
			rt, ok := s.routes[d.GetId()]
			if !ok {
				md, found := w.contracts.Method(d.GetGrpcMethod())
				if !found {
					continue
				}
				rt = &Route{def: d, method: md}
				s.routes[d.GetId()] = rt
				s.defs = append(s.defs, d)
				name := d.GetToolkit() + "." + d.GetName()
				s.byName[name] = append(s.byName[name], d)
			}
			rt.replicas = append(rt.replicas, w)
		}
	}
	slices.SortFunc(s.defs, func(a, b *toolfleetv1.ToolDefinition) int { return cmp.Compare(a.GetId(), b.GetId()) })
	s.index = search.New(s.defs)
	return s
}

// Defs lists every served tool version, ordered by id (shared: do not modify).
func (s *Snapshot) Defs() []*toolfleetv1.ToolDefinition { return s.defs }

// Route returns the route of an exact tool id "Toolkit.Tool@x.y.z", or nil.
func (s *Snapshot) Route(id string) *Route { return s.routes[id] }

// Search ranks the served tool versions that keep accepts for a query.
func (s *Snapshot) Search(query string, keep func(*toolfleetv1.ToolDefinition) bool) []search.Hit {
	return s.index.Search(query, keep)
}

// IsLatest reports whether d is the newest served version of its tool.
func (s *Snapshot) IsLatest(d *toolfleetv1.ToolDefinition) bool {
	vs := s.byName[d.GetToolkit()+"."+d.GetName()]
	if len(vs) == 0 {
		return false
	}
	latest, err := contract.Resolve(contract.ToolRef{Toolkit: vs[0].GetToolkit(), Tool: vs[0].GetName()}, vs)
	return err == nil && latest.GetId() == d.GetId()
}
