package main

import (
	"fmt"
	"testing"
	"time"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    string // fmt of the relevant fields
		wantErr bool
	}{
		{name: "defaults", env: map[string]string{}, want: "false [] [] 0s 0 0"},
		{
			name: "everything",
			env: map[string]string{
				EnvAllowPrivate: "true", EnvAllowCIDRs: "10.20.0.0/16, 127.0.0.1,,fd00::/8", EnvAllowHosts: "wiki.internal ,localhost:8080",
				EnvTimeout: "5s", EnvMaxBodyBytes: "1000", EnvMaxRedirects: "2",
			},
			want: "true [10.20.0.0/16 127.0.0.1/32 fd00::/8] [wiki.internal localhost:8080] 5s 1000 2",
		},
		{name: "bad bool", env: map[string]string{EnvAllowPrivate: "yes please"}, wantErr: true},
		{name: "bad CIDR", env: map[string]string{EnvAllowCIDRs: "10.0.0.0/33"}, wantErr: true},
		{name: "bad timeout", env: map[string]string{EnvTimeout: "soon"}, wantErr: true},
		{name: "zero body cap", env: map[string]string{EnvMaxBodyBytes: "0"}, wantErr: true},
		{name: "too many redirects", env: map[string]string{EnvMaxRedirects: "100"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := configFromEnv(func(k string) string { return tt.env[k] })
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			got := fmt.Sprint(cfg.Policy.AllowPrivate, " ", cfg.Policy.AllowCIDRs, " ", fmt.Sprint(cfg.Policy.AllowHosts), " ",
				cfg.Timeout.Round(time.Millisecond), " ", cfg.MaxBodyBytes, " ", cfg.MaxRedirects)
			if got != tt.want {
				t.Errorf("config = %s, want %s", got, tt.want)
			}
		})
	}
}
