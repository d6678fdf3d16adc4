package natsx_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// TestRequireAuth: an embedded server made with RequireAuth(o) takes clients
// with o and refuses clients without it.
func TestRequireAuth(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts natsconn.Options
	}{
		{"user", natsconn.Options{User: "dev", Password: "pw"}},
		{"token", natsconn.Options{Token: "t0k"}},
		{"nkey", natsconn.Options{NKeySeedFile: seedFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			configure, err := natsx.RequireAuth(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir(), Configure: configure})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Shutdown)
			nc, err := tt.opts.Connect(srv.URL(), "with", nats.Timeout(5*time.Second))
			if err != nil {
				t.Fatalf("with the credential: %v", err)
			}
			nc.Close()
			if nc, err := nats.Connect(srv.URL(), nats.Timeout(5*time.Second)); err == nil {
				nc.Close()
				t.Fatal("a client without the credential connected")
			}
		})
	}
	if f, err := natsx.RequireAuth(natsconn.Options{}); f != nil || err != nil {
		t.Errorf("no credential: %v, %v; want nothing required", f != nil, err)
	}
	for _, o := range []natsconn.Options{{CredsFile: "x.creds"}, {CAFile: "ca.pem"}} {
		if _, err := natsx.RequireAuth(o); !errors.Is(err, natsx.ErrAuthNotSupported) {
			t.Errorf("RequireAuth(%+v) = %v, want ErrAuthNotSupported", o, err)
		}
	}
}
