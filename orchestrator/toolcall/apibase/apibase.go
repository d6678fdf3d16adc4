// Package apibase is the small base the orchestrator's Connect/gRPC services
// (AgentService in agentapi, ProgramService in programapi) share: who the caller
// is and what it may do ([Caller], [Authenticator], [Authorize], [Sees]), a
// panic that becomes Internal for one caller ([Recover]), and a service
// mounted before it exists ([Late]). A service is its connect-go handler
// alone: that handler speaks Connect, gRPC, gRPC-Web and HTTP JSON, and the
// gateway hands it the gRPC calls its own grpc-go server receives.
package apibase

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"sync/atomic"

	"connectrpc.com/connect"
)

// Caller is the authenticated caller of one request.
type Caller struct {
	Subject string
	Scopes  []string
	// Anonymous is true when auth is off (dev on loopback): every scope.
	Anonymous bool
}

// Has reports whether c holds scope (an anonymous caller holds every scope).
func (c Caller) Has(scope string) bool {
	return c.Anonymous || slices.Contains(c.Scopes, scope)
}

// Sees reports whether c may read or steer what owner started: its starter,
// a holder of admin, or anyone with auth off.
func (c Caller) Sees(owner, admin string) bool {
	return c.Anonymous || c.Has(admin) || (owner != "" && owner == c.Subject)
}

// Authenticator authenticates a request from its headers (Authorization).
type Authenticator func(ctx context.Context, h http.Header) (Caller, error)

// Authorize authenticates a request with auth and checks that the caller
// holds scope: Unauthenticated or PermissionDenied otherwise.
func Authorize(ctx context.Context, auth Authenticator, h http.Header, scope string) (Caller, error) {
	if auth == nil {
		return Caller{}, connect.NewError(connect.CodeUnauthenticated, errors.New("no authenticator is configured"))
	}
	c, err := auth(ctx, h)
	if err != nil {
		return Caller{}, connect.NewError(connect.CodeUnauthenticated, err)
	}
	if !c.Has(scope) {
		return Caller{}, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("this call needs the %s scope", scope))
	}
	return c, nil
}

// Recover is the Connect option every mounted orchestrator service uses: a
// panic in a handler becomes Internal ("internal error") for that caller alone,
// and log gets the procedure, the panic and its stack. Nil log: slog.Default().
func Recover(log *slog.Logger) connect.HandlerOption {
	if log == nil {
		log = slog.Default()
	}
	return connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, v any) error {
		log.ErrorContext(ctx, "recovered a panic in a handler", "procedure", spec.Procedure,
			"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	})
}

// Handlerer is a Connect service that makes its own HTTP handler (the path
// prefix and the handler to mount).
type Handlerer interface {
	Handler() (string, http.Handler)
}

// Late is a service S for a server that starts before the orchestrator (the
// gateway, which the orchestrator calls tools through): mount it up front, Set
// the service once it exists; until then calls are Unavailable. P is *S,
// which makes its handler.
type Late[S any, P interface {
	*S
	Handlerer
}] struct {
	s atomic.Pointer[S]
	h atomic.Pointer[http.Handler]
}

// Set makes s answer calls (over HTTP, with the handler s makes).
func (l *Late[S, P]) Set(s *S) {
	_, h := P(s).Handler()
	l.h.Store(&h)
	l.s.Store(s)
}

// Get returns the service, nil until Set.
func (l *Late[S, P]) Get() *S { return l.s.Load() }

// ServeHTTP serves Connect, gRPC, gRPC-Web and HTTP JSON requests once set;
// until then each is Unavailable in its own protocol.
func (l *Late[S, P]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := l.h.Load()
	if h == nil {
		_ = errorWriter.Write(w, r, Starting())
		return
	}
	(*h).ServeHTTP(w, r)
}

// errorWriter answers an RPC in the protocol it came in (a plain request gets
// Connect's JSON error).
var errorWriter = connect.NewErrorWriter()

// Starting is the error of a call to a service that is not set yet
// (Unavailable: the caller may retry).
func Starting() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("the orchestrator is starting"))
}
