package registry

import (
	"maps"
	"slices"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// The trust rule: the first replica to register a Toolkit@version fixes its
// contract (its digest, contract.Digest). A later replica that serves the same
// Toolkit@version with another contract is refused and the registered replicas
// keep serving, so a stale or forged worker cannot change a tool's contract
// without a new version. With [Registry.AcceptAdditive], a replica that only
// adds tools joins (additive.go).

// contractConflict names a Toolkit@version that a new replica serves with another
// contract than the replicas already registered for it.
type contractConflict struct {
	toolkit   string
	got, want string
	by        string // address of a registered replica
}

// conflictLocked reports the first toolkit version w serves with a contract that
// differs from the one registered for it. The registered contract is the one the
// replicas already serving that version have (the first to join set it); a
// replica at the same address is being replaced and does not count, nor does a
// draining one (it is leaving: a new contract of its version may take over once
// no serving replica holds the old one, as after it was gone), nor does a
// registered contract that w only adds tools to ([extends]) when additive
// contracts are accepted.
func (r *Registry) conflictLocked(w *Replica) *contractConflict {
	keys := slices.Sorted(maps.Keys(w.digests))
	for _, k := range keys {
		for _, o := range r.workers {
			if o.addr == w.addr || o.draining.Load() {
				continue
			}
			if d, ok := o.digests[k]; ok && d != w.digests[k] && !(r.additive.Load() && extends(w, o, k)) {
				return &contractConflict{toolkit: k, got: w.digests[k], want: d, by: o.addr}
			}
		}
	}
	return nil
}

// conflicts reports whether a and b serve a Toolkit@version with different contracts.
func conflicts(a, b *Replica) bool {
	for k, d := range a.digests {
		if e, ok := b.digests[k]; ok && e != d {
			return true
		}
	}
	return false
}

// mcpClashLocked fails when a tool of w would be shown to MCP clients under
// the name of another tool the registered replicas serve (an explicit mcp_name
// equal to another tool's MCP or model name, up to case): the first to
// register keeps the name, and w is refused rather than shadowing it. A
// replica at the same address is being replaced and does not count, nor does
// a draining one.
func (r *Registry) mcpClashLocked(w *Replica) error {
	var served []*toolfleetv1.ToolDefinition
	for _, addr := range slices.Sorted(maps.Keys(r.workers)) {
		o := r.workers[addr]
		if o.addr == w.addr || o.draining.Load() {
			continue
		}
		served = append(served, o.defs...)
	}
	return contract.CheckMCPCollisions(served, w.defs)
}
