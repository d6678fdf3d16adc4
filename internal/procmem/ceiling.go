package procmem

import (
	"math"
	"runtime/debug"
)

// Ceiling is the default of a process-wide memory ceiling for the work
// tenants send (the orchestrator's script memory, the jq worker's query
// memory): three quarters of GOMEMLIMIT when it is set, else fallback. The
// other quarter is the process itself, its clients and the garbage
// collector's headroom.
func Ceiling(fallback int64) int64 {
	if lim := debug.SetMemoryLimit(-1); lim > 0 && lim < math.MaxInt64 {
		return lim / 4 * 3
	}
	return fallback
}
