// Package procmem is about the memory of a whole process: its peak resident
// memory (Linux VmHWM), for the tests that bound what an attack can make a
// process hold, and the default ceiling of what the tenants' work may take
// of it (Ceiling).
package procmem

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrNoPeak: the status file has no VmHWM line (not Linux, or a kernel
// without it).
var ErrNoPeak = errors.New("procmem: no VmHWM in the process status")

// Peak returns the peak resident memory of process pid (0: this process),
// in bytes.
func Peak(pid int) (int64, error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("procmem: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("procmem: VmHWM %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, ErrNoPeak
}
