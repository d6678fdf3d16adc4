package registry

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// The one exception to the trust rule (trust.go), when [Registry.AcceptAdditive]
// turned it on: a replica whose contract of a Toolkit@version only adds tools
// to the registered one joins beside it. Every tool the registered replica
// serves must be served by the new one with the same definition and the same
// gRPC method, down to every message and enum the method reads or writes
// (field numbers, names, types, options), so that a call routed to either
// replica means the same thing. New tools are routed to the replicas that
// serve them only. This is what a rebuild that adds a tool looks like
// (`toolfleet add tool` under `toolfleet dev --worker`): the new process
// serves beside the old one, which then drains, with no moment without a
// replica. A change to an existing tool, or a removed tool, still needs a new
// version.

// extends reports whether w serves every tool of the Toolkit@version key that
// o serves, each unchanged (see above).
func extends(w, o *Replica, key string) bool {
	mine := make(map[string]*toolfleetv1.ToolDefinition, len(w.defs))
	for _, d := range w.defs {
		mine[d.GetId()] = d
	}
	for _, od := range o.defs {
		if od.GetToolkit()+"@"+od.GetVersion() != key {
			continue
		}
		wd, ok := mine[od.GetId()]
		if !ok || !proto.Equal(od, wd) {
			return false
		}
		om, ok1 := o.contracts.Method(od.GetGrpcMethod())
		wm, ok2 := w.contracts.Method(wd.GetGrpcMethod())
		if !ok1 || !ok2 || !sameMethod(om, wm) {
			return false
		}
	}
	return true
}

// sameMethod compares two methods and every message and enum they reach.
func sameMethod(a, b protoreflect.MethodDescriptor) bool {
	if a.FullName() != b.FullName() || !proto.Equal(protodesc.ToMethodDescriptorProto(a), protodesc.ToMethodDescriptorProto(b)) {
		return false
	}
	seen := map[protoreflect.FullName]bool{}
	return sameMessage(a.Input(), b.Input(), seen) && sameMessage(a.Output(), b.Output(), seen)
}

// sameMessage compares a and b as declared (which covers their nested
// declarations) and, recursively, the messages and enums their fields refer to.
func sameMessage(a, b protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if a.FullName() != b.FullName() {
		return false
	}
	if seen[a.FullName()] {
		return true
	}
	seen[a.FullName()] = true
	if a.ParentFile().Syntax() != b.ParentFile().Syntax() ||
		!proto.Equal(protodesc.ToDescriptorProto(a), protodesc.ToDescriptorProto(b)) {
		return false
	}
	af, bf := a.Fields(), b.Fields()
	for i := range af.Len() {
		fa, fb := af.Get(i), bf.Get(i) // same declaration: same order
		switch {
		case fa.Message() != nil:
			if fb.Message() == nil || !sameMessage(fa.Message(), fb.Message(), seen) {
				return false
			}
		case fa.Enum() != nil:
			if fb.Enum() == nil || fa.Enum().FullName() != fb.Enum().FullName() ||
				!proto.Equal(protodesc.ToEnumDescriptorProto(fa.Enum()), protodesc.ToEnumDescriptorProto(fb.Enum())) {
				return false
			}
		}
	}
	return true
}

// AcceptAdditive turns on (or off) the exception above for replicas loaded
// from now on. Off by default: anyone allowed to announce could otherwise add
// tools under a served toolkit's name.
func (r *Registry) AcceptAdditive(on bool) { r.additive.Store(on) }

// Admission says what the registry made of the worker at addr: Joined once
// its contracts are loaded and it takes calls, Refused while it is remembered
// as refused for a contract conflict, neither while it is unknown, loading or
// leaving. `toolfleet dev --worker` asks it whether a rebuilt worker with a
// changed contract could join beside the running one.
func (r *Registry) Admission(addr string) (joined, refused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.workers[addr]; ok && !w.draining.Load() {
		return true, false
	}
	_, refused = r.rejected[addr]
	return false, refused
}
