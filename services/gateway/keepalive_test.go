package gateway_test

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/toolfleet/toolfleet/services/gateway"
)

// TestKeepaliveEnforced: a gRPC client that floods pings is told to calm down
// (GOAWAY ENHANCE_YOUR_CALM) and disconnected, instead of costing the server
// a write per ping forever.
func TestKeepaliveEnforced(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gateway.Config{Auth: gateway.AuthConfig{Disabled: true}})
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The splitter's SETTINGS comes first; ACK it, then open a gRPC stream so the
	// connection is routed to grpc-go.
	if f, err := fr.ReadFrame(); err != nil || f.Header().Type != http2.FrameSettings {
		t.Fatalf("first frame: %v %v", f, err)
	}
	if err := fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Check"},
		{":authority", g.Addr()}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}); err != nil { // an empty HealthCheckRequest
		t.Fatal(err)
	}
	for i := range 10 { // far more often than the 10 s the server permits
		if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			break // the server may already have closed the connection
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended without GOAWAY ENHANCE_YOUR_CALM: %v", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", ga.ErrCode)
			}
			return
		}
	}
}
