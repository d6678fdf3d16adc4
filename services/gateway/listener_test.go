package gateway

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestSniffGRPC: the routing decision for the first bytes of a connection.
func TestSniffGRPC(t *testing.T) {
	t.Parallel()
	headers := func(contentType string) []byte {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/x"}, {":authority", "a"}, {"content-type", contentType}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		var out bytes.Buffer
		out.WriteString(http2.ClientPreface)
		fr := http2.NewFramer(&out, nil)
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
		return out.Bytes()
	}
	settingsOnly := func() []byte {
		var out bytes.Buffer
		out.WriteString(http2.ClientPreface)
		_ = http2.NewFramer(&out, nil).WriteSettings()
		return out.Bytes()
	}
	for _, tc := range []struct {
		name  string
		bytes []byte
		grpc  bool
	}{
		{"short HTTP/1.1 request", []byte("PUT / HTTP/1.1\r\n\r\n"), false},
		{"HTTP/1.1 request", []byte("POST /tools/call HTTP/1.1\r\nHost: a\r\n\r\n"), false},
		{"h2c gRPC", headers("application/grpc"), true},
		{"h2c gRPC with codec", headers("application/grpc+proto"), true},
		{"h2c gRPC-Web", headers("application/grpc-web+proto"), false},
		{"h2c Connect", headers("application/json"), false},
		{"h2c client waiting for the server's SETTINGS", settingsOnly(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client, server := net.Pipe()
			defer client.Close()
			defer server.Close()
			go func() { _, _ = client.Write(tc.bytes) }() // then stays open and silent
			var seen bytes.Buffer
			done := make(chan bool, 1)
			go func() { done <- sniffGRPC(server, &seen) }()
			select {
			case got := <-done:
				if got != tc.grpc {
					t.Fatalf("grpc = %v, want %v", got, tc.grpc)
				}
			case <-time.After(sniffTimeout / 2):
				t.Fatal("sniffing waited for bytes the client never sends")
			}
			// Everything read is replayed to whichever server gets the connection.
			if !bytes.HasPrefix(tc.bytes, seen.Bytes()) {
				t.Fatalf("recorded %q, not a prefix of what the client sent", seen.Bytes())
			}
		})
	}
}
