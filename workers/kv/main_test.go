package main

import (
	"errors"
	"testing"
)

func TestNATSURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		env  string
		want string
	}{
		{args: nil, env: "", want: ""},
		{args: nil, env: "nats://env:4222", want: "nats://env:4222"},
		{args: []string{"--nats", "nats://flag:4222"}, env: "nats://env:4222", want: "nats://flag:4222"},
		{args: []string{"-nats=nats://flag:4222"}, want: "nats://flag:4222"},
		{args: []string{"--listen", "127.0.0.1:1", "--nats=nats://flag:4222", "--log-level", "debug"}, want: "nats://flag:4222"},
		{args: []string{"--listen", "127.0.0.1:1"}, env: "nats://env:4222", want: "nats://env:4222"},
		{args: []string{"--", "--nats", "nats://ignored:4222"}, env: "", want: ""},
	}
	for _, tt := range tests {
		if got := natsURL(tt.args, tt.env); got != tt.want {
			t.Errorf("natsURL(%q, %q) = %q, want %q", tt.args, tt.env, got, tt.want)
		}
	}
}

func TestRegisterRefusesWithoutNATS(t *testing.T) {
	t.Parallel()
	noEnv := func(string) string { return "" }
	if err := register(nil, noEnv)(nil); !errors.Is(err, errNoNATS) {
		t.Fatalf("register without NATS = %v, want %v", err, errNoNATS)
	}
}

func TestBucketConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env     map[string]string
		wantErr bool
		name    string
		history uint8
	}{
		{env: map[string]string{}, name: "", history: 0},
		{env: map[string]string{EnvBucket: "team_notes", EnvHistory: "20"}, name: "team_notes", history: 20},
		{env: map[string]string{EnvBucket: "bad.name"}, wantErr: true},
		{env: map[string]string{EnvHistory: "65"}, wantErr: true},
		{env: map[string]string{EnvHistory: "ten"}, wantErr: true},
	}
	for _, tt := range tests {
		cfg, err := bucketConfig(func(k string) string { return tt.env[k] })
		if (err != nil) != tt.wantErr {
			t.Errorf("bucketConfig(%v) err = %v, want error %v", tt.env, err, tt.wantErr)
			continue
		}
		if err == nil && (cfg.Name != tt.name || cfg.History != tt.history) {
			t.Errorf("bucketConfig(%v) = %+v", tt.env, cfg)
		}
	}
}
