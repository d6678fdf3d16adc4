//go:build !linux

package portowner

// Listener returns ErrUnknown: only Linux is asked.
func Listener(port int) (Process, error) { return Process{}, ErrUnknown }
