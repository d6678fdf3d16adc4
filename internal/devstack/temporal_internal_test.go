package devstack

import (
	"errors"
	"net"
	"testing"
)

// TestTemporalPortTaken: a port taken before the server binds it is an
// error StartTemporal can retry on (errPortTaken), not a panic that ends the
// process.
func TestTemporalPortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	tmp, err := StartTemporal(t.Context(), TemporalConfig{Port: taken})
	if tmp != nil {
		tmp.Stop()
	}
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("StartTemporal on a taken port = %v, want errPortTaken", err)
	}
}

// TestTemporalHTTPPortTaken: the frontend's HTTP API port taken before the
// server binds it is errPortTaken too (it fails as an error, not a panic), so
// a start that lost that race is tried again on other ports.
func TestTemporalHTTPPortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tmp, err := StartTemporal(t.Context(), TemporalConfig{HTTPPort: l.Addr().(*net.TCPAddr).Port})
	if tmp != nil {
		tmp.Stop()
	}
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("StartTemporal with its HTTP port taken = %v, want errPortTaken", err)
	}
}
