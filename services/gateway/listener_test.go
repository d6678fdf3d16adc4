package gateway

import (
	"bytes"
	"net"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestSniff: the routing decision is made on what the client sends (its
// preface and first request's content-type), whatever the order of its frames,
// and the bytes replayed to the chosen server are the client's minus its ACK of
// the splitter's SETTINGS.
func TestSniff(t *testing.T) {
	t.Parallel()
	frames := func(write func(fr *http2.Framer)) []byte {
		var out bytes.Buffer
		write(http2.NewFramer(&out, nil))
		return out.Bytes()
	}
	headers := func(contentType string) []byte {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/x"}, {":authority", "a"}, {"content-type", contentType}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return frames(func(fr *http2.Framer) {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
		})
	}
	opening := slices.Concat([]byte(http2.ClientPreface), frames(func(fr *http2.Framer) { _ = fr.WriteSettings() }))
	ack := frames(func(fr *http2.Framer) { _ = fr.WriteSettingsAck() })
	for _, tc := range []struct {
		name string
		// before is sent at once; after, once the server's SETTINGS arrived
		// (nil: the client never reads, as an HTTP/1 client).
		before, after []byte
		grpc          bool
		fails         bool
	}{
		{name: "short HTTP/1.1 request", before: []byte("PUT / HTTP/1.1\r\n\r\n")},
		{name: "HTTP/1.1 request", before: []byte("POST /tools/call HTTP/1.1\r\nHost: a\r\n\r\n")},
		{name: "gRPC client waiting for the server's SETTINGS", before: opening, after: slices.Concat(ack, headers("application/grpc")), grpc: true},
		{name: "gRPC with codec", before: opening, after: slices.Concat(ack, headers("application/grpc+proto")), grpc: true},
		{name: "h2c Connect sending at once", before: slices.Concat(opening, headers("application/json")), after: ack},
		{name: "h2c gRPC-Web", before: opening, after: slices.Concat(ack, headers("application/grpc-web+proto"))},
		{name: "HTTP/2 client silent after its SETTINGS", before: opening, after: []byte{}, fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Loopback TCP, whose buffers let both sides write as real peers do.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			go func() {
				_, _ = client.Write(tc.before)
				if tc.after == nil {
					return
				}
				fr := http2.NewFramer(nil, client)
				if f, err := fr.ReadFrame(); err != nil || f.Header().Type != http2.FrameSettings {
					return
				}
				_, _ = client.Write(tc.after)
			}()
			// The caller's deadline bounds the exchange (route uses sniffTimeout).
			_ = server.SetDeadline(time.Now().Add(2 * time.Second))
			replay, grpc, err := sniff(server)
			if tc.fails {
				if err == nil {
					t.Fatalf("routed a silent HTTP/2 connection (grpc=%v)", grpc)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if grpc != tc.grpc {
				t.Fatalf("grpc = %v, want %v", grpc, tc.grpc)
			}
			sent := append(append([]byte{}, tc.before...), tc.after...)
			if want := bytes.Replace(sent, ack, nil, 1); !bytes.Equal(replay, want) && !bytes.HasPrefix(want, replay) {
				t.Fatalf("replay %q, want %q (or a prefix, for HTTP/1)", replay, want)
			}
		})
	}
}
