package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// A mounted service's gRPC calls are served by its own Connect handler (which
// speaks the gRPC protocol too), so a service is written once and nothing
// adapts it method by method. The splitter routes whole connections (see
// listener.go) and a client may call the gateway's own service and a mounted
// one on the same connection, so grpc-go receives mounted calls too: its
// unknown-service handler (serveMount) replays each such stream to the mount's
// handler as an HTTP/2 gRPC request — the messages as they arrived (grpc-go has
// already bounded their size and decompressed them), the caller's metadata as
// headers, the deadline in the context — and turns the handler's frames and
// trailers back into messages and a status. Auth, codes, details and streaming
// are the handler's own, exactly as over Connect or gRPC-Web.

// rawMessage is a message's encoded bytes, passed through the gateway's codec
// untouched (lenientCodec knows it).
type rawMessage []byte

// grpcService reports the fully-qualified gRPC service a mount serves: its
// pattern is "/pkg.Service/" and that service is in the protobuf registry.
// Other mounts (the console's pages) have none.
func (m Mount) grpcService() (string, bool) {
	name, ok := strings.CutPrefix(m.Pattern, "/")
	name, ok2 := strings.CutSuffix(name, "/")
	if !ok || !ok2 || name == "" || strings.Contains(name, "/") {
		return "", false
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return "", false
	}
	_, isService := d.(protoreflect.ServiceDescriptor)
	return name, isService
}

// mountFor returns the handler of the mounted gRPC service method belongs to.
func (g *Gateway) mountFor(method string) http.Handler {
	for _, m := range g.cfg.Mounts {
		if _, ok := m.grpcService(); ok && strings.HasPrefix(method, m.Pattern) {
			return m.Handler
		}
	}
	return nil
}

// serveMount is grpc-go's unknown-service handler: a mounted service's call
// goes to the mount's handler, anything else is Unimplemented as grpc-go
// would answer it.
func (g *Gateway) serveMount(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	h := g.mountFor(method)
	if h == nil {
		return status.Errorf(codes.Unimplemented, "unknown service or method %s", method)
	}
	ctx := ss.Context()
	body := &streamBody{ss: ss}
	req := (&http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Path: method},
		RequestURI:    method,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        requestHeader(ctx),
		Body:          body,
		ContentLength: -1,
	}).WithContext(ctx)
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(":authority")) > 0 {
		req.Host = md.Get(":authority")[0]
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		req.RemoteAddr = p.Addr.String()
	}
	w := &streamResponse{ss: ss, header: http.Header{}}
	h.ServeHTTP(w, req)
	if body.err != nil && !errors.Is(body.err, io.EOF) {
		return body.err // the request's own failure (too large, cancelled), as grpc-go reported it
	}
	return w.finish()
}

// requestHeader is the caller's metadata as the handler reads it over HTTP;
// binary values are base64 again, and the protocol's own keys are the bridge's.
func requestHeader(ctx context.Context) http.Header {
	h := http.Header{}
	md, _ := metadata.FromIncomingContext(ctx)
	for k, vs := range md {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "te" {
			continue
		}
		if strings.HasSuffix(k, "-bin") {
			enc := make([]string, len(vs))
			for i, v := range vs {
				enc[i] = connect.EncodeBinaryHeader([]byte(v))
			}
			vs = enc
		}
		h[http.CanonicalHeaderKey(k)] = slices.Clone(vs)
	}
	h.Set("Content-Type", "application/grpc+proto")
	h.Set("Te", "trailers")
	return h
}

// streamBody is the request body: the stream's messages, each in a gRPC
// envelope, read when the handler reads (no goroutine).
type streamBody struct {
	ss  grpc.ServerStream
	buf []byte
	err error
}

func (b *streamBody) Read(p []byte) (int, error) {
	for len(b.buf) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		var m rawMessage
		if err := b.ss.RecvMsg(&m); err != nil {
			b.err = err
			continue
		}
		b.buf = binary.BigEndian.AppendUint32(make([]byte, 1, 5+len(m)), uint32(len(m)))
		b.buf = append(b.buf, m...)
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

func (b *streamBody) Close() error { return nil }

// maxPlainAnswer bounds what is kept of a handler's non-gRPC answer (an error
// page) for the status message.
const maxPlainAnswer = 512

// streamResponse is the handler's ResponseWriter: its gRPC frames become the
// stream's messages, its headers and trailers the stream's metadata.
type streamResponse struct {
	ss     grpc.ServerStream
	header http.Header
	code   int  // the HTTP status, 0 until written
	grpc   bool // the answer is gRPC (200 with a gRPC content type)
	buf    []byte
	plain  []byte
	err    error // the first failure to send
}

func (w *streamResponse) Header() http.Header { return w.header }

func (w *streamResponse) WriteHeader(code int) {
	if w.code != 0 {
		return
	}
	w.code = code
	// The request was gRPC: a 200 is a gRPC answer, also one without a
	// content type (connect's ErrorWriter, e.g. a service not set yet).
	w.grpc = code == http.StatusOK
	if !w.grpc {
		return
	}
	if md := responseMetadata(w.header); len(md) > 0 {
		w.err = w.ss.SetHeader(md)
	}
}

func (w *streamResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.err != nil {
		return 0, w.err
	}
	if !w.grpc {
		w.plain = append(w.plain, p[:min(len(p), maxPlainAnswer-len(w.plain))]...)
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for len(w.buf) >= 5 {
		n := int(binary.BigEndian.Uint32(w.buf[1:5]))
		if len(w.buf) < 5+n {
			break
		}
		if w.buf[0] != 0 { // never asked for: the request offered no compression
			w.err = status.Error(codes.Internal, "a mounted service sent a compressed message")
			return 0, w.err
		}
		msg := rawMessage(slices.Clone(w.buf[5 : 5+n]))
		w.buf = w.buf[5+n:]
		if err := w.ss.SendMsg(msg); err != nil {
			w.err = err
			return 0, err
		}
	}
	if len(w.buf) == 0 {
		w.buf = nil // the next message starts a fresh buffer
	}
	return len(p), nil
}

// Flush sends the headers if nothing did yet (as net/http does).
func (w *streamResponse) Flush() { w.WriteHeader(http.StatusOK) }

// finish returns the call's status from the handler's trailers, or from its
// HTTP status when it did not answer in gRPC (e.g. 503 while starting).
func (w *streamResponse) finish() error {
	w.WriteHeader(http.StatusOK)
	if w.err != nil {
		return w.err
	}
	if !w.grpc {
		msg := strings.TrimSpace(string(w.plain))
		if msg == "" {
			msg = http.StatusText(w.code)
		}
		return status.Error(codeForHTTP(w.code), msg)
	}
	if len(w.buf) > 0 {
		return status.Error(codes.Internal, "a mounted service sent a truncated message")
	}
	st, err := trailerStatus(w.trailer())
	if err != nil {
		return err
	}
	trailer := w.trailer()
	trailer.Del("Grpc-Status")
	trailer.Del("Grpc-Message")
	trailer.Del("Grpc-Status-Details-Bin")
	if md := responseMetadata(trailer); len(md) > 0 {
		w.ss.SetTrailer(md)
	}
	return st.Err()
}

// trailer collects the trailers the handler set in any of net/http's ways:
// keys with http.TrailerPrefix (connect-go's handlers), keys declared in the
// Trailer header (connect's ErrorWriter), or a trailers-only status in the
// headers.
func (w *streamResponse) trailer() http.Header {
	t := http.Header{}
	for k, vs := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			for _, v := range vs {
				t.Add(name, v) // Add canonicalizes: user trailers may not be
			}
		}
	}
	for _, decl := range w.header.Values("Trailer") {
		for k := range strings.SplitSeq(decl, ",") {
			for _, v := range w.header.Values(strings.TrimSpace(k)) {
				t.Add(strings.TrimSpace(k), v)
			}
		}
	}
	if t.Get("Grpc-Status") == "" {
		for _, k := range []string{"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin"} {
			if v := w.header.Get(k); v != "" {
				t.Set(k, v)
			}
		}
	}
	return t
}

// trailerStatus reads grpc-status, grpc-message and grpc-status-details-bin.
func trailerStatus(t http.Header) (*status.Status, error) {
	raw := t.Get("Grpc-Status")
	code, err := strconv.ParseUint(raw, 10, 32)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "a mounted service answered without a valid grpc-status (%q)", raw)
	}
	if bin := t.Get("Grpc-Status-Details-Bin"); bin != "" {
		var sp spb.Status
		if b, err := connect.DecodeBinaryHeader(bin); err == nil && proto.Unmarshal(b, &sp) == nil && sp.GetCode() == int32(code) {
			return status.FromProto(&sp), nil
		}
	}
	msg := t.Get("Grpc-Message")
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return status.New(codes.Code(code), msg), nil
}

// responseMetadata is h's custom keys as gRPC metadata (binary values decoded);
// what the bridge itself speaks for (content type, compression, trailers) stays out.
func responseMetadata(h http.Header) metadata.MD {
	md := metadata.MD{}
	for k, vs := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(k, http.TrailerPrefix) || strings.HasPrefix(lk, "grpc-") || lk == "content-type" || lk == "date" || lk == "trailer" {
			continue
		}
		if strings.HasSuffix(lk, "-bin") {
			for _, v := range vs {
				if b, err := connect.DecodeBinaryHeader(v); err == nil {
					md.Append(lk, string(b))
				}
			}
			continue
		}
		md.Append(lk, vs...)
	}
	return md
}

// codeForHTTP maps an HTTP status to a gRPC code the way gRPC clients do for
// a non-gRPC answer.
func codeForHTTP(code int) codes.Code {
	switch code {
	case http.StatusBadRequest:
		return codes.Internal
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codes.Unavailable
	}
	return codes.Unknown
}

// reflected lists the gateway's grpc-go services and its mounted gRPC services
// for server reflection (their descriptors are in the protobuf registry).
type reflected struct {
	s      *grpc.Server
	mounts []Mount
}

func (r reflected) GetServiceInfo() map[string]grpc.ServiceInfo {
	info := r.s.GetServiceInfo()
	for _, m := range r.mounts {
		if name, ok := m.grpcService(); ok {
			info[name] = grpc.ServiceInfo{}
		}
	}
	return info
}

var _ reflection.ServiceInfoProvider = reflected{}
