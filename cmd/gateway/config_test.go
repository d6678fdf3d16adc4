package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	// Not parallel: subtests set environment variables (t.Setenv).
	dir := t.TempDir()
	secret := filepath.Join(dir, "hs256")
	if err := os.WriteFile(secret, []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("tiny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	limits := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(limits, []byte("rules:\n  - name: per-caller\n    rate: 5\n    concurrent: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badLimits := filepath.Join(dir, "bad-limits.yaml")
	if err := os.WriteFile(badLimits, []byte("rules:\n  - name: nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // substring; "" = valid
		check   func(t *testing.T, c Config)
	}{
		{name: "static workers with auth off on loopback", args: []string{"--auth-disabled", "--workers", "a:1,b.ns.svc:9000"},
			check: func(t *testing.T, c Config) {
				if len(c.Workers) != 2 || c.Workers[1] != "b.ns.svc:9000" || c.Listen != "127.0.0.1:8080" {
					t.Errorf("config %+v", c)
				}
			}},
		{name: "env fills what flags do not give", args: []string{"--listen", "0.0.0.0:9999"},
			env: map[string]string{"TOOLFLEET_LISTEN": "0.0.0.0:1", "TOOLFLEET_NATS_URL": "nats://nats:4222",
				"TOOLFLEET_JWT_HS256_SECRET_FILE": secret, "TOOLFLEET_SHUTDOWN_TIMEOUT": "5s"},
			check: func(t *testing.T, c Config) {
				if c.Listen != "0.0.0.0:9999" || c.NATSURL != "nats://nats:4222" || c.ShutdownTimeout != 5*time.Second {
					t.Errorf("config %+v", c)
				}
			}},
		{name: "no workers at all", args: []string{"--auth-disabled"}, wantErr: "no workers"},
		{name: "auth neither off nor keyed", args: []string{"--workers", "a:1"}, wantErr: "exactly one of"},
		{name: "two key sources", args: []string{"--workers", "a:1", "--jwt-hs256-secret-file", secret, "--jwt-jwks-file", secret}, wantErr: "exactly one of"},
		{name: "auth off and a key", args: []string{"--workers", "a:1", "--auth-disabled", "--jwt-jwks-file", secret}, wantErr: "pick one"},
		{name: "auth off off loopback", args: []string{"--workers", "a:1", "--auth-disabled", "--listen", "0.0.0.0:8080"}, wantErr: "only listen on loopback"},
		{name: "jwks over http", args: []string{"--workers", "a:1", "--jwt-jwks-url", "http://idp/keys"}, wantErr: "https only"},
		{name: "worker without port", args: []string{"--auth-disabled", "--workers", "calculator"}, wantErr: "not host:port"},
		{name: "nats url without scheme", args: []string{"--auth-disabled", "--nats-url", "nats:4222"}, wantErr: "--nats-url"},
		{name: "zero shutdown bound", args: []string{"--auth-disabled", "--workers", "a:1", "--shutdown-timeout", "0s"}, wantErr: "--shutdown-timeout"},
		{name: "bad log level", args: []string{"--auth-disabled", "--workers", "a:1", "--log-level", "loud"}, wantErr: "--log-level"},
		{name: "console", args: []string{"--auth-disabled", "--workers", "a:1", "--console"},
			check: func(t *testing.T, c Config) {
				if !c.Console.Enabled || c.Console.OIDC.Enabled() {
					t.Errorf("console %+v", c.Console)
				}
			}},
		{name: "console sign-in without --console", args: []string{"--auth-disabled", "--workers", "a:1", "--console-oidc-issuer", "https://idp.example", "--console-oidc-client-id", "c"}, wantErr: "needs --console"},
		{name: "console sign-in with a secret the provider cannot sign", args: []string{"--workers", "a:1", "--jwt-hs256-secret-file", secret, "--console",
			"--console-oidc-issuer", "https://idp.example", "--console-oidc-client-id", "c"}, wantErr: "--jwt-jwks-url"},
		{name: "console sign-in off loopback without a callback", args: []string{"--workers", "a:1", "--listen", "0.0.0.0:8080", "--jwt-jwks-url", "https://idp.example/keys", "--console",
			"--console-oidc-issuer", "https://idp.example", "--console-oidc-client-id", "c"}, wantErr: "--console-oidc-redirect-url"},
		{name: "console sign-in", args: []string{"--workers", "a:1", "--listen", "0.0.0.0:8080", "--jwt-jwks-url", "https://idp.example/keys", "--console",
			"--console-oidc-issuer", "https://idp.example", "--console-oidc-client-id", "c", "--console-oidc-redirect-url", "https://tools.example/console/oidc/callback"},
			env: map[string]string{"TOOLFLEET_CONSOLE_OIDC_AUDIENCE": "toolfleet"},
			check: func(t *testing.T, c Config) {
				if !c.Console.OIDC.Enabled() || c.Console.OIDC.Audience != "toolfleet" {
					t.Errorf("console %+v", c.Console)
				}
			}},
		{name: "malformed env value", args: []string{"--auth-disabled", "--workers", "a:1"},
			env: map[string]string{"TOOLFLEET_DEFAULT_TIMEOUT": "soon"}, wantErr: "TOOLFLEET_DEFAULT_TIMEOUT"},
		{name: "stray argument", args: []string{"--auth-disabled", "serve"}, wantErr: "unexpected arguments"},
		{name: "JetStream assets from env and flags", args: []string{"--auth-disabled", "--workers", "a:1", "--js-replicas", "3"},
			env: map[string]string{"TOOLFLEET_JS_OVERRIDES": "toolfleet_calls.max-bytes=1GiB", "TOOLFLEET_JS_PROFILE": "dev"},
			check: func(t *testing.T, c Config) {
				g, err := c.gatewayConfig(nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if ic := g.IdempotencyConfig(); ic.Replicas != 3 || ic.MaxBytes != 1<<30 || ic.MemoryStorage || ic.TTL != 24*time.Hour {
					t.Errorf("idempotency config %+v: want R3, 1 GiB, file, 24h", ic)
				}
				if es := g.EventStreamConfig(); es.Replicas != 3 || es.MaxBytes != 64<<20 {
					t.Errorf("event stream %+v: want R3 and the dev profile's 64 MiB", es)
				}
			}},
		{name: "limits file from env", args: []string{"--auth-disabled", "--workers", "a:1"},
			env: map[string]string{"TOOLFLEET_LIMITS_FILE": limits, "TOOLFLEET_LIMITS_WHEN_NATS_DOWN": "closed"},
			check: func(t *testing.T, c Config) {
				g, err := c.gatewayConfig(nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if r := g.Limits.Rules; len(r) != 1 || r[0].Name != "per-caller" || r[0].Rate != 5 || r[0].Concurrent != 2 || g.Limits.WhenNATSDown != "closed" {
					t.Errorf("limits %+v", g.Limits)
				}
			}},
		{name: "a rule that limits nothing", args: []string{"--auth-disabled", "--workers", "a:1", "--limits-file", badLimits}, wantErr: "sets no limit"},
		{name: "a missing limits file", args: []string{"--auth-disabled", "--workers", "a:1", "--limits-file", filepath.Join(dir, "none")}, wantErr: "--limits-file"},
		{name: "an unknown NATS-down policy", args: []string{"--auth-disabled", "--workers", "a:1", "--limits-when-nats-down", "maybe"}, wantErr: "--limits-when-nats-down"},
		{name: "a malformed asset override", args: []string{"--auth-disabled", "--workers", "a:1", "--js-overrides", "toolfleet_calls.storage=ssd"}, wantErr: "--js-overrides"},
		{name: "too many replicas", args: []string{"--auth-disabled", "--workers", "a:1"}, env: map[string]string{"TOOLFLEET_JS_REPLICAS": "9"}, wantErr: "--js-replicas"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := parse(tt.args)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("parse: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("parse: got %v, want an error with %q", err, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}

	t.Run("secret file", func(t *testing.T) {
		c := Config{HS256SecretFile: secret}
		g, err := c.gatewayConfig(nil, nil)
		if err != nil || string(g.Auth.HS256Secret) != strings.Repeat("s", 40) {
			t.Fatalf("secret %q, %v (want the file without its newline)", g.Auth.HS256Secret, err)
		}
		if _, err := (Config{HS256SecretFile: short}).gatewayConfig(nil, nil); err == nil || !strings.Contains(err.Error(), "at least 32") {
			t.Fatalf("a 4-byte secret: %v", err)
		}
		if _, err := (Config{HS256SecretFile: filepath.Join(dir, "missing")}).gatewayConfig(nil, nil); err == nil {
			t.Fatal("a missing secret file was accepted")
		}
	})
}
