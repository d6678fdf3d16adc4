package gateway

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Only a failed dial proves a call reached no worker; any other transport error
// may have come after the worker got the request.
func TestNeverConnected(t *testing.T) {
	for msg, want := range map[string]bool{
		`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`: true,
		`error reading from server: EOF`:                   false,
		`connection closed before server preface received`: false,
	} {
		if got := neverConnected(status.Error(codes.Unavailable, msg)); got != want {
			t.Errorf("neverConnected(%q) = %v, want %v", msg, got, want)
		}
	}
}
