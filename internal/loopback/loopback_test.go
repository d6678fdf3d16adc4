package loopback

import "testing"

func TestHost(t *testing.T) {
	for s, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:8080": true, "127.1.2.3": true, "::1": true, "[::1]": true, "[::1]:3000": true,
		"localhost": true, "LOCALHOST:80": true,
		"": false, ":8080": false, "0.0.0.0:8080": false, "10.0.0.1": false, "evil.example": false,
		"localhost.evil.example": false, "127.0.0.1.nip.io:80": false, "[::]:80": false,
	} {
		if got := Host(s); got != want {
			t.Errorf("Host(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestListen(t *testing.T) {
	for s, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:0": true, "[::1]:1": true,
		"127.0.0.1": false, ":8080": false, "0.0.0.0:80": false, "example.com:80": false,
	} {
		if got := Listen(s); got != want {
			t.Errorf("Listen(%q) = %v, want %v", s, got, want)
		}
	}
}
