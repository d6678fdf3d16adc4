package gateway

import (
	"context"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc/tap"

	"github.com/toolfleet/toolfleet/services/gateway/auth"
	"github.com/toolfleet/toolfleet/services/gateway/oxp"
)

// An Authorization header over auth.MaxAuthorizationBytes is refused as soon
// as the request's headers are in, before any handler reads its body: on the
// HTTP surfaces (OXP, MCP, Connect, gRPC-Web, gRPC through ServeHTTP) by
// boundAuthorization, on grpc-go's own transport by tapAuthorization, which
// runs before the stream exists (the message is never read). Without it a
// caller could make the gateway read (and, on OXP, buffer) a body up to
// MaxRequestBytes per request, and verify a 1 MiB token, before being told
// its token is no good.

// authorizationBytes is the size of every Authorization value of a request.
func authorizationBytes(values []string) int {
	n := 0
	for _, v := range values {
		n += len(v)
	}
	return n
}

var rpcErrors = connect.NewErrorWriter()

// boundAuthorization refuses a request whose Authorization is over the bound
// with UNAUTHENTICATED in its surface's form: a Connect, gRPC or gRPC-Web
// error for RPCs, 401 with a bearer challenge for /mcp, an OXP failure (401)
// for the rest. It reports whether it refused.
func (g *Gateway) boundAuthorization(w http.ResponseWriter, r *http.Request) bool {
	n := authorizationBytes(r.Header.Values("Authorization"))
	if n <= auth.MaxAuthorizationBytes {
		return false
	}
	ce := authError(auth.TooLong(n))
	if r.ProtoMajor < 2 {
		// The body is left unread: do not keep the connection for another
		// request (net/http would otherwise try to drain the body first).
		w.Header().Set("Connection", "close")
	}
	switch {
	case isGRPC(r) || isRPCPath(r.URL.Path):
		_ = rpcErrors.Write(w, r, ce.ConnectError())
	case r.URL.Path == "/mcp":
		w.Header().Set("WWW-Authenticate", g.bearerChallenge(r, "/mcp"))
		http.Error(w, ce.Error(), http.StatusUnauthorized)
	default:
		oxp.WriteFailure(w, ce.Failure())
	}
	return true
}

// isRPCPath reports a path of an RPC, /<proto service>/<method>: its first
// segment is a full service name (toolfleet.v1.ToolGatewayService).
func isRPCPath(p string) bool {
	seg, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	return strings.IndexByte(seg, '.') > 0
}

// tapAuthorization is grpc-go's in-tap handle: it refuses a stream whose
// Authorization metadata is over the bound when its headers arrive, before
// the stream's message is read.
func tapAuthorization(ctx context.Context, info *tap.Info) (context.Context, error) {
	if n := authorizationBytes(info.Header.Get("authorization")); n > auth.MaxAuthorizationBytes {
		return ctx, authError(auth.TooLong(n)).GRPCStatus().Err()
	}
	return ctx, nil
}
