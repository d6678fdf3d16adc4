package connections_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/services/gateway/connections"
)

func ring(t *testing.T, lines ...string) *connections.KeyRing {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("# connection keys\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := connections.LoadKeyRing(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A record sealed before a rotation opens after it; one whose key left the
// ring, or that moved to another key (aad), does not.
func TestKeyRingRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := connections.NewKeyLine("k1"), connections.NewKeyLine("k2")
	before := ring(t, k1)
	sealed := before.Seal([]byte("refresh-token"), []byte("conn.alice.github"))
	if bytes.Contains(sealed, []byte("refresh-token")) {
		t.Fatal("sealed record shows the plaintext")
	}
	after := ring(t, k2, k1)
	if after.ActiveID() != "k2" {
		t.Fatalf("active key %s, want the first listed (k2)", after.ActiveID())
	}
	got, err := after.Open(sealed, []byte("conn.alice.github"))
	if err != nil || string(got) != "refresh-token" {
		t.Fatalf("after rotation: %q, %v", got, err)
	}
	if resealed := after.Seal(got, []byte("conn.alice.github")); !bytes.HasPrefix(resealed, []byte("k2\x00")) {
		t.Fatalf("new records must use the active key; got prefix %q", resealed[:3])
	}
	if _, err := after.Open(sealed, []byte("conn.mallory.github")); !errors.Is(err, connections.ErrSealed) {
		t.Fatalf("record under another key: %v, want ErrSealed", err)
	}
	if _, err := ring(t, k2).Open(sealed, []byte("conn.alice.github")); !errors.Is(err, connections.ErrSealed) {
		t.Fatalf("key dropped from the ring: %v, want ErrSealed", err)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	if _, err := after.Open(tampered, []byte("conn.alice.github")); !errors.Is(err, connections.ErrSealed) {
		t.Fatalf("altered record: %v, want ErrSealed", err)
	}
}

func TestKeyRingRefused(t *testing.T) {
	t.Parallel()
	k := connections.NewKeyLine("k")
	secret := strings.SplitN(k, ":", 2)[1]
	for name, contents := range map[string]string{
		"empty":      "# nothing\n",
		"no id":      secret + "\n",
		"short key":  "k:" + secret[:20] + "\n",
		"bad id":     "k y:" + secret + "\n",
		"twice":      k + "\n" + k + "\n",
		"not base64": "k:!!!!\n",
	} {
		_, err := connections.ParseKeyRing([]byte(contents))
		if !errors.Is(err, connections.ErrKeyRing) {
			t.Errorf("%s: %v, want ErrKeyRing", name, err)
		}
		if err != nil && strings.Contains(err.Error(), secret[:8]) {
			t.Errorf("%s: the error shows the key: %v", name, err)
		}
	}
}
