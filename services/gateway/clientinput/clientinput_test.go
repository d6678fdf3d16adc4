package clientinput

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
)

func TestSealOpen(t *testing.T) {
	t.Parallel()
	s, err := New(RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	b := Binding{Tool: "K.T@1.0.0", Principal: "alice", Input: [32]byte{1}}
	sealed := s.Seal(b, []byte("secret-state"), time.Minute)
	if bytes.Contains([]byte(sealed), []byte("secret")) {
		t.Fatalf("the state shows through: %s", sealed)
	}
	got, err := s.Open(b, sealed)
	if err != nil || string(got) != "secret-state" {
		t.Fatalf("Open: %q %v", got, err)
	}
	if again := s.Seal(b, []byte("secret-state"), time.Minute); again == sealed {
		t.Fatal("two seals of one state are equal: the nonce is not fresh")
	}
	other, _ := New(RandomKey())
	flipped := []byte(sealed)
	flipped[len(flipped)-3] ^= 1
	for name, tc := range map[string]struct {
		s      *Sealer
		b      Binding
		sealed string
	}{
		"other tool":      {s, Binding{Tool: "K.T@2.0.0", Principal: "alice", Input: b.Input}, sealed},
		"other principal": {s, Binding{Tool: b.Tool, Principal: "bob", Input: b.Input}, sealed},
		"other input":     {s, Binding{Tool: b.Tool, Principal: "alice", Input: [32]byte{2}}, sealed},
		"other key":       {other, b, sealed},
		"changed":         {s, b, string(flipped)},
		"appended":        {s, b, sealed + "-TAMPERED"},
		"truncated":       {s, b, sealed[:20]},
		"empty":           {s, b, ""},
	} {
		if _, err := tc.s.Open(tc.b, tc.sealed); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// Tool and principal are length-prefixed: moving a byte across them
	// is another binding.
	if _, err := s.Open(Binding{Tool: "K.T@1.0.0a", Principal: "lice", Input: b.Input}, sealed); !errors.Is(err, ErrInvalid) {
		t.Errorf("shifted binding opened: %v", err)
	}
	s.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if _, err := s.Open(b, sealed); !errors.Is(err, ErrInvalid) {
		t.Errorf("expired: %v, want ErrInvalid", err)
	}
}

func TestReadKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := RandomKey()
	for name, content := range map[string][]byte{
		"raw": key,
		"hex": []byte("  " + hexString(key) + "\n"),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadKeyFile(p)
		if err != nil || !bytes.Equal(got, key) {
			t.Errorf("%s: %x %v", name, got, err)
		}
	}
	p := filepath.Join(dir, "short")
	_ = os.WriteFile(p, []byte("too short"), 0o600)
	if _, err := ReadKeyFile(p); err == nil {
		t.Error("a short key was accepted")
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestSharedKey: replicas asking at once all get the one key the first made.
func TestSharedKey(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	kc := jetstream.KeyValueConfig{Bucket: DefaultBucket, History: 1}
	const replicas = 4
	keys := make([][]byte, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		nc, err := nats.Connect(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			k, err := SharedKey(ctx, js, kc)
			if err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for i := range keys {
		if len(keys[i]) != KeySize || !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("replica %d got %x, replica 0 %x", i, keys[i], keys[0])
		}
	}
}
