package gateway

import (
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/services/gateway/oxp"
)

// connectCompressMinBytes keeps connect-go from gzipping small responses: for a
// typical tool result compression costs more CPU than the bytes it saves.
const connectCompressMinBytes = 8 << 10

// Handler returns the gateway's single HTTP handler (serve it with h2c):
//
//   - gRPC (HTTP/2, content-type application/grpc*) → grpc-go, with
//     grpc.health.v1 and server reflection;
//   - Connect and gRPC-Web → connect-go, with server reflection;
//   - GET /health, GET /tools, POST /tools/call, GET /results/{id} → the OXP HTTP JSON surface
//     (package oxp, served by oxpsurface.go);
//   - GET /metrics → Prometheus;
//   - /mcp → the Model Context Protocol, streamable HTTP (mcpsurface.go; its tasks are Config.MCPTasks);
//   - GET /.well-known/oauth-protected-resource[/mcp] → RFC 9728 metadata
//     (resource_metadata.go).
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	connectOpts := []connect.HandlerOption{
		connect.WithCompressMinBytes(connectCompressMinBytes),
		// Checked against Content-Length and while reading, before decoding;
		// also bounds a decompressed body.
		connect.WithReadMaxBytes(int(g.cfg.MaxRequestBytes)),
		g.connectRecover(),
	}
	connectOpts = append(connectOpts, g.connectJSONCodecs()...)
	mux.Handle(toolfleetv1connect.NewToolGatewayServiceHandler(connectService{g: g}, connectOpts...))
	reflector := grpcreflect.NewStaticReflector(toolfleetv1connect.ToolGatewayServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, connectOpts...))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, connectOpts...))
	oxp.New(oxpBackend{g}, oxp.Options{MaxRequestBytes: g.cfg.MaxRequestBytes, MaxInputValues: g.cfg.MaxInputValues}).Register(mux)
	mux.Handle("GET /metrics", g.metrics.handler())
	mux.Handle("/mcp", g.mcpHandler())
	mux.HandleFunc("GET "+wellKnownResource, g.resourceMetadata)
	mux.HandleFunc("GET "+wellKnownResource+"/", g.resourceMetadata)
	for _, m := range g.cfg.Mounts {
		mux.Handle(m.Pattern, m.Handler)
	}
	web := g.traceHTTP(g.browserSafe(g.recoverHTTP(mux)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.boundAuthorization(w, r) { // authbound.go: before any body is read
			return
		}
		if isGRPC(r) && !g.mounted(r.URL.Path) {
			g.grpc.ServeHTTP(w, r)
			return
		}
		web.ServeHTTP(w, r)
	})
}

// isGRPC reports a request of the gRPC protocol proper (not gRPC-Web).
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return r.ProtoMajor == 2 && strings.HasPrefix(ct, "application/grpc") && !strings.HasPrefix(ct, "application/grpc-web")
}
