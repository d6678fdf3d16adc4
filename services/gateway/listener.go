package gateway

import (
	"bytes"
	"errors"
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
// (HTTP/1.1, Connect and gRPC-Web over h2c) to net/http:
//
//   - not an HTTP/2 preface → net/http;
//   - an HTTP/2 preface, then a first request whose content-type is
//     application/grpc[+codec] → grpc-go; any other content-type → net/http;
//   - an HTTP/2 preface and then silence: the client waits for the server's
//     SETTINGS before its first request, which gRPC stacks (grpc-go, grpc-java,
//     grpcurl) do and HTTP clients do not → grpc-go.
const (
	// quietAfterSettings is how long a silent HTTP/2 client is given before it is
	// taken for a gRPC client waiting for the server preface (once per connection).
	quietAfterSettings = 25 * time.Millisecond
	// sniffTimeout bounds the wait for a client's first bytes.
	sniffTimeout = 10 * time.Second
)

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
	var seen bytes.Buffer
	isGRPC := sniffGRPC(c, &seen)
	_ = c.SetReadDeadline(time.Time{})
	rc := &replayConn{Conn: c, r: io.MultiReader(&seen, c)}
	if isGRPC {
		s.grpc.deliver(rc)
	} else {
		s.http.deliver(rc)
	}
}

// sniffGRPC reads (and records in seen) as much of the stream as it needs to tell
// whether the connection carries the gRPC protocol.
func sniffGRPC(c net.Conn, seen *bytes.Buffer) bool {
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	r := io.TeeReader(c, seen)
	// Byte by byte, so that a short HTTP/1.x request is never waited on.
	var b [1]byte
	for i := range len(http2.ClientPreface) {
		if _, err := io.ReadFull(r, b[:]); err != nil || b[0] != http2.ClientPreface[i] {
			return false // HTTP/1.x or nothing
		}
	}
	fr := http2.NewFramer(io.Discard, r)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			var ne net.Error
			// Silence after the client's SETTINGS: a gRPC client awaiting ours.
			return errors.As(err, &ne) && ne.Timeout() && seen.Len() > len(http2.ClientPreface)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.SetReadDeadline(time.Now().Add(quietAfterSettings))
			}
		case *http2.MetaHeadersFrame:
			ct := f.PseudoValue("content-type")
			if ct == "" {
				for _, hf := range f.RegularFields() {
					if hf.Name == "content-type" {
						ct = hf.Value
					}
				}
			}
			return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+")
		}
	}
}
