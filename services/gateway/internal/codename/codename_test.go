package codename_test

import (
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/toolfleet/toolfleet/services/gateway/internal/codename"
)

// TestOf: every code gRPC defines has a name that grpc-go reads back as the
// same code (as sdk/client does with CallFailure.code); others have none.
func TestOf(t *testing.T) {
	t.Parallel()
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		name := codename.Of(c)
		var back codes.Code
		if err := back.UnmarshalJSON([]byte(strconv.Quote(name))); err != nil || back != c {
			t.Errorf("Of(%v) = %q, read back as %v (%v)", c, name, back, err)
		}
	}
	if n := codename.Of(codes.Unauthenticated + 1); n != "" {
		t.Errorf("Of(17) = %q, want \"\"", n)
	}
}
