package portowner_test

import (
	"errors"
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/toolfleet/toolfleet/internal/portowner"
)

func TestListener(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		p, err := portowner.Listener(1)
		if !errors.Is(err, portowner.ErrUnknown) {
			t.Fatalf("Listener on %s: %v %v, want ErrUnknown", runtime.GOOS, p, err)
		}
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	p, err := portowner.Listener(port)
	if err != nil || p.PID != os.Getpid() || p.Name == "" {
		t.Fatalf("Listener(%d) = %+v, %v; want this process (pid %d)", port, p, err, os.Getpid())
	}
	self, _ := os.ReadFile("/proc/self/comm")
	if p.Name+"\n" != string(self) {
		t.Errorf("name %q, want %q", p.Name, self)
	}
	// Once closed, this process no longer holds it (another may bind it meanwhile).
	_ = ln.Close()
	if p, err := portowner.Listener(port); err == nil && p.PID == os.Getpid() {
		t.Errorf("Listener(%d) after close = %+v; this process no longer listens there", port, p)
	}
}
