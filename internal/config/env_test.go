package config

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    int
		wantErr string
	}{
		{name: "default", want: 4222},
		{name: "env sets", env: map[string]string{"TF_NATS_PORT": "5000"}, want: 5000},
		{name: "flag wins over env", args: []string{"--nats-port=6000"}, env: map[string]string{"TF_NATS_PORT": "5000"}, want: 6000},
		{name: "bad env value", env: map[string]string{"TF_NATS_PORT": "many"}, wantErr: "TF_NATS_PORT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			port := fs.Int("nats-port", 4222, "NATS port")
			BindEnv(fs, "TF")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := ApplyEnv(fs, "TF")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want mention of %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *port != tt.want {
				t.Fatalf("port = %d, want %d", *port, tt.want)
			}
			if u := fs.Lookup("nats-port").Usage; !strings.Contains(u, "env TF_NATS_PORT") {
				t.Fatalf("usage %q does not name the variable", u)
			}
		})
	}
}

func TestApplyEnvDoesNotEchoValue(t *testing.T) {
	const secret = "hunter2-not-a-port"
	t.Setenv("TF_NATS_PORT", secret)
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.Int("nats-port", 4222, "NATS port")
	BindEnv(fs, "TF")
	err := ApplyEnv(fs, "TF")
	if err == nil || !strings.Contains(err.Error(), "TF_NATS_PORT") {
		t.Fatalf("err = %v, want mention of TF_NATS_PORT", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("error %q repeats the variable's value", err)
	}
}

func TestBindEnvNamesVariableOnce(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("nats-ca", "", "CA file (env TF_NATS_CA)")
	fs.Int("nats-port", 4222, "NATS port")
	BindEnv(fs, "TF")
	BindEnv(fs, "TF")
	for _, name := range []string{"nats-ca", "nats-port"} {
		if u := fs.Lookup(name).Usage; strings.Count(u, "(env ") != 1 {
			t.Errorf("--%s usage %q names its variable %d times, want once", name, u, strings.Count(u, "(env "))
		}
	}
}
