// Package portowner names the process that listens on a TCP port, when the
// operating system says (Linux: the listening socket's inode in
// /proc/net/tcp and tcp6, then the process whose /proc/PID/fd holds it), so
// that "port 8080 is taken" can say by what. It is best effort: processes of
// other users are usually unreadable, and other systems are not asked. It
// runs no external command and its scan is bounded in processes,
// descriptors and time.
package portowner

import "errors"

// ErrUnknown is returned when the holder cannot be found.
var ErrUnknown = errors.New("portowner: the process holding the port is not known")

// Process is a process holding a port.
type Process struct {
	PID  int
	Name string // its command name (/proc/PID/comm), e.g. "nginx"
}
