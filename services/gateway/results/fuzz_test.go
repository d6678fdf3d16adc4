package results

import (
	"encoding/hex"
	"testing"
)

// FuzzValidID: an id ValidID accepts is exactly 16 bytes in lowercase hex, the
// form NewID makes (so a malformed id is refused before the store is asked).
func FuzzValidID(f *testing.F) {
	f.Add(NewID())
	f.Add("3F2A9C0E5B7D41E68A0C2F9D1B3E5A7C")
	f.Add("../../toolfleet_calls/x")
	f.Add("")
	f.Fuzz(func(t *testing.T, id string) {
		if !ValidID(id) {
			return
		}
		b, err := hex.DecodeString(id)
		if err != nil || len(b) != 16 || hex.EncodeToString(b) != id {
			t.Fatalf("ValidID accepted %q", id)
		}
	})
}
