package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Connection routing on the one port. grpc-go's own server transport is about
// 1.5x faster per call than serving gRPC through net/http (grpc.Server.ServeHTTP),
// so connections that carry the gRPC protocol go to it, and everything else
// (HTTP/1.1, Connect and gRPC-Web over h2c) to net/http. The choice is made on
// what the client sends, never on how long it stays silent:
//
//   - not an HTTP/2 preface → net/http;
//   - an HTTP/2 preface: the splitter answers with an empty SETTINGS frame (gRPC
//     clients wait for the server's SETTINGS before their first request), reads
//     up to the first request's HEADERS and the client's ACK of that SETTINGS,
//     then routes by content-type: application/grpc[+codec] → grpc-go, anything
//     else → net/http. The ACK is not replayed (the real server never sent that
//     SETTINGS frame); an empty SETTINGS changes no setting, so the client's
//     state matches what the real server then negotiates.
//
// sniffTimeout bounds the whole exchange: a client that sends too little in
// time is closed, not routed.
const sniffTimeout = 10 * time.Second

// maxSniffBytes bounds what the splitter holds for replay while it sniffs.
const maxSniffBytes = 2 * maxHeaderBytes

// connListener is a net.Listener fed with routed connections.
type connListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

func (l *connListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.closed:
		_ = c.Close()
	}
}

// replayConn replays the bytes read while sniffing before the rest of the stream.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// splitter accepts connections and routes each to the gRPC or the HTTP listener.
type splitter struct {
	ln         net.Listener
	grpc, http *connListener
	wg         sync.WaitGroup
}

func newSplitter(ln net.Listener) *splitter {
	return &splitter{ln: ln, grpc: newConnListener(ln.Addr()), http: newConnListener(ln.Addr())}
}

// serve accepts until the listener closes, then closes both routed listeners.
func (s *splitter) serve() {
	defer func() {
		s.wg.Wait()
		_ = s.grpc.Close()
		_ = s.http.Close()
	}()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		s.wg.Go(func() { s.route(c) })
	}
}

func (s *splitter) close() { _ = s.ln.Close() }

func (s *splitter) route(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(sniffTimeout))
	seen, isGRPC, err := sniff(c)
	_ = c.SetDeadline(time.Time{})
	if err != nil {
		_ = c.Close() // too slow, or not HTTP/2 after a valid preface
		return
	}
	rc := &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(seen), c)}
	if isGRPC {
		s.grpc.deliver(rc)
	} else {
		s.http.deliver(rc)
	}
}

// sniff reads as much of the stream as it needs to tell whether the connection
// carries the gRPC protocol; it returns the bytes to replay to the chosen server.
func sniff(c net.Conn) (replay []byte, isGRPC bool, err error) {
	var seen bytes.Buffer
	r := io.TeeReader(c, &seen)
	// Byte by byte, so that a short HTTP/1.x request is never waited on.
	var b [1]byte
	for i := range len(http2.ClientPreface) {
		if _, err := io.ReadFull(r, b[:]); err != nil || b[0] != http2.ClientPreface[i] {
			return seen.Bytes(), false, nil // HTTP/1.x (net/http answers whatever it is)
		}
	}
	if err := http2.NewFramer(c, nil).WriteSettings(); err != nil {
		return nil, false, fmt.Errorf("write SETTINGS: %w", err)
	}
	fr := http2.NewFramer(io.Discard, r) // reads exactly one frame at a time, no read-ahead
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = maxHeaderBytes
	acked, decided := false, false
	for !acked || !decided {
		start := seen.Len()
		if start > maxSniffBytes {
			return nil, false, errors.New("no request HEADERS within the sniffing bound")
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, false, fmt.Errorf("read HTTP/2 frame: %w", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() && !acked {
				acked = true
				seen.Truncate(start) // the ACK of our SETTINGS: not the real server's business
			}
		case *http2.MetaHeadersFrame:
			if !decided {
				decided = true
				isGRPC = isGRPCContentType(contentType(f))
			}
		}
	}
	return seen.Bytes(), isGRPC, nil
}

func contentType(f *http2.MetaHeadersFrame) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == "content-type" {
			return hf.Value
		}
	}
	return ""
}

func isGRPCContentType(ct string) bool {
	return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+")
}
