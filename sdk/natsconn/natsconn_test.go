package natsconn_test

import (
	"crypto/tls"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/spf13/pflag"

	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/internal/testcerts"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// startNATS runs an embedded NATS server configured by configure.
func startNATS(t *testing.T, configure func(*server.Options)) string {
	t.Helper()
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir(), Configure: configure})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv.URL()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// roundTrip connects with o and checks that a message goes through.
func roundTrip(url string, o natsconn.Options) error {
	nc, err := o.Connect(url, "natsconn-test", nats.Timeout(5*time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("ping")
	if err != nil {
		return err
	}
	if err := nc.Publish("ping", []byte("x")); err != nil {
		return err
	}
	_, err = sub.NextMsg(5 * time.Second)
	return err
}

// TestAuthMethods: every credential kind connects to a server that requires it,
// and the wrong or missing credential is refused.
func TestAuthMethods(t *testing.T) {
	t.Parallel()
	// User NKey.
	userKP, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	userPub, _ := userKP.PublicKey()
	userSeed, _ := userKP.Seed()
	otherKP, _ := nkeys.CreateUser()
	otherSeed, _ := otherKP.Seed()

	// Decentralized auth: operator → account → user JWT in a .creds file.
	opKP, _ := nkeys.CreateOperator()
	opPub, _ := opKP.PublicKey()
	opClaims := jwt.NewOperatorClaims(opPub)
	opJWT, err := opClaims.Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	opClaims, err = jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		t.Fatal(err)
	}
	accKP, _ := nkeys.CreateAccount()
	accPub, _ := accKP.PublicKey()
	accJWT, err := jwt.NewAccountClaims(accPub).Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	credUserKP, _ := nkeys.CreateUser()
	credUserPub, _ := credUserKP.PublicKey()
	uc := jwt.NewUserClaims(credUserPub)
	uc.IssuerAccount = accPub
	userJWT, err := uc.Encode(accKP)
	if err != nil {
		t.Fatal(err)
	}
	credSeed, _ := credUserKP.Seed()
	creds, err := jwt.FormatUserConfig(userJWT, credSeed)
	if err != nil {
		t.Fatal(err)
	}

	servers := map[string]string{
		"user": startNATS(t, func(o *server.Options) {
			o.Users = []*server.User{{Username: "gateway", Password: "s3cret"}}
		}),
		"token": startNATS(t, func(o *server.Options) { o.Authorization = "tok3n" }),
		"nkey": startNATS(t, func(o *server.Options) {
			o.Nkeys = []*server.NkeyUser{{Nkey: userPub}}
		}),
		"creds": startNATS(t, func(o *server.Options) {
			res := &server.MemAccResolver{}
			if err := res.Store(accPub, accJWT); err != nil {
				t.Fatal(err)
			}
			o.TrustedOperators = []*jwt.OperatorClaims{opClaims}
			o.AccountResolver = res
			o.JetStream = false
		}),
	}
	tests := []struct {
		name, server string
		opts         natsconn.Options
		ok           bool
	}{
		{"user and password", "user", natsconn.Options{User: "gateway", Password: "s3cret"}, true},
		{"wrong password", "user", natsconn.Options{User: "gateway", Password: "guess"}, false},
		{"no credentials", "user", natsconn.Options{}, false},
		{"token", "token", natsconn.Options{Token: "tok3n"}, true},
		{"wrong token", "token", natsconn.Options{Token: "guess"}, false},
		{"nkey seed", "nkey", natsconn.Options{NKeySeedFile: writeFile(t, "user.nk", string(userSeed))}, true},
		{"unknown nkey", "nkey", natsconn.Options{NKeySeedFile: writeFile(t, "other.nk", string(otherSeed))}, false},
		{"creds file", "creds", natsconn.Options{CredsFile: writeFile(t, "user.creds", string(creds))}, true},
		{"creds server without creds", "creds", natsconn.Options{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := roundTrip(servers[tt.server], tt.opts)
			t.Logf("round trip: %v", err)
			if (err == nil) != tt.ok {
				t.Fatalf("round trip: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// TestTLS: a server that requires TLS and client certificates (mTLS) takes a
// client that trusts its CA and shows a certificate from the client CA, and
// refuses the others.
func TestTLS(t *testing.T) {
	t.Parallel()
	serverCA := testcerts.NewCA(t, "nats-server-ca")
	clientCA := testcerts.NewCA(t, "nats-client-ca")
	strangerCA := testcerts.NewCA(t, "stranger-ca")
	srvCert := serverCA.Server(t, "nats")
	client := clientCA.Client(t, "gateway")
	stranger := strangerCA.Client(t, "stranger")
	url := startNATS(t, func(o *server.Options) {
		o.TLS, o.TLSVerify = true, true
		o.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{srvCert.TLS},
			ClientCAs:    clientCA.Pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS12,
		}
	})
	tests := []struct {
		name string
		opts natsconn.Options
		ok   bool
	}{
		{"mTLS", natsconn.Options{CAFile: serverCA.File, CertFile: client.CertFile, KeyFile: client.KeyFile}, true},
		{"no client certificate", natsconn.Options{CAFile: serverCA.File}, false},
		{"client certificate from another CA", natsconn.Options{CAFile: serverCA.File, CertFile: stranger.CertFile, KeyFile: stranger.KeyFile}, false},
		{"server CA not trusted", natsconn.Options{CertFile: client.CertFile, KeyFile: client.KeyFile}, false},
		{"plain text", natsconn.Options{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := roundTrip(url, tt.opts)
			t.Logf("round trip: %v", err)
			if (err == nil) != tt.ok {
				t.Fatalf("round trip: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts natsconn.Options
		ok   bool
	}{
		{"none", natsconn.Options{}, true},
		{"user", natsconn.Options{User: "u", Password: "p"}, true},
		{"two methods", natsconn.Options{User: "u", Token: "t"}, false},
		{"creds and nkey", natsconn.Options{CredsFile: "a", NKeySeedFile: "b"}, false},
		{"password alone", natsconn.Options{Password: "p"}, false},
		{"cert without key", natsconn.Options{CertFile: "c"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.opts.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, natsconn.ErrInvalid)) {
				t.Fatalf("Validate = %v, want ok=%v", err, tt.ok)
			}
		})
	}
	// Files are read up front: a missing one fails before any connection.
	for _, o := range []natsconn.Options{
		{CredsFile: "/nonexistent.creds"}, {NKeySeedFile: "/nonexistent.nk"}, {CAFile: "/nonexistent.pem"},
		{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent-key.pem"},
	} {
		if _, err := o.NATSOptions(); err == nil {
			t.Errorf("NATSOptions(%+v) accepted a missing file", o)
		}
	}
}

// TestAddFlags: the same flags work on the standard library's and pflag's flag
// sets, and default to the TOOLFLEET_NATS_* variables.
func TestAddFlags(t *testing.T) {
	t.Setenv(natsconn.EnvUser, "from-env")
	var a natsconn.Options
	std := flag.NewFlagSet("std", flag.ContinueOnError)
	a.AddFlags(std)
	if err := std.Parse([]string{"--nats-ca", "ca.pem"}); err != nil {
		t.Fatal(err)
	}
	var b natsconn.Options
	pf := pflag.NewFlagSet("pflag", pflag.ContinueOnError)
	b.AddFlags(pf)
	if err := pf.Parse([]string{"--nats-ca=ca.pem", "--nats-user=flag"}); err != nil {
		t.Fatal(err)
	}
	if a.CAFile != "ca.pem" || a.User != "from-env" || b.CAFile != "ca.pem" || b.User != "flag" {
		t.Fatalf("std %+v, pflag %+v", a, b)
	}
	if u := pf.Lookup("nats-password").Usage; !strings.Contains(u, natsconn.EnvPassword) {
		t.Fatalf("usage %q does not name %s", u, natsconn.EnvPassword)
	}
}
