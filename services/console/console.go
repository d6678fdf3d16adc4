package console

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
)

// Prefix is the path the console is served under on the gateway.
const Prefix = "/console/"

// Config configures a [Server].
type Config struct {
	// DevSecret is the gateway's HS256 dev secret (`toolfleet dev
	// --gateway-jwt-secret`): with it the sign-in page mints a token for
	// a chosen subject and scopes. Nil: no dev sign-in.
	DevSecret []byte
	// OIDC, when set, signs people in with the operator's OpenID Connect
	// provider (oidc.go); it can stand beside the dev sign-in.
	OIDC *OIDCConfig
	// AuthOff is a gateway without auth: every visitor is the anonymous
	// principal and no sign-in is needed.
	AuthOff bool
	// HTTPClient calls the gateway's APIs. Default: a client without a
	// timeout (the run page's stream lasts as long as the page is open).
	HTTPClient *http.Client
	// Sessions, when set, keeps sessions in a KV bucket all gateway
	// replicas share (sessionkv.go). Nil: in this process's memory, and
	// behind a load balancer a browser needs affinity.
	Sessions *SharedSessions
	// SessionTTL bounds a session and a minted token. Default 8h.
	SessionTTL time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// TemporalUI is the Temporal Web UI's base URL (http://host:port): a
	// run's page links to its workflow there. Empty: no link.
	TemporalUI string
	// Namespace is the Temporal namespace of the runs (for that link).
	Namespace string
}

// Server serves the console. It implements http.Handler for [Prefix].
type Server struct {
	cfg      Config
	sessions *sessions
	pages    *pages
	mux      *http.ServeMux
	api      atomic.Pointer[apis]
	counts   *countCache
	live     liveLimits
	handler  http.Handler
	oidc     *oidcSignin // nil without OIDC sign-in
}

// apis are the gateway's services the console calls as the principal.
type apis struct {
	runs     toolfleetv1connect.AgentServiceClient
	programs toolfleetv1connect.ProgramServiceClient
	tools    toolfleetv1connect.ToolGatewayServiceClient
	// connections is the gateway's ConnectionService (Unimplemented when
	// it has no --connections-file).
	connections toolfleetv1connect.ConnectionServiceClient
}

// ErrNotConnected is what pages answer (503) before [Server.Connect].
var ErrNotConnected = errors.New("the console is starting: the gateway's address is not known yet; reload in a moment")

// New returns a console; it answers 503 until [Server.Connect] names the gateway.
func New(cfg Config) (*Server, error) {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 8 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	var store sessionStore = newMemSessions(cfg.Now)
	var key []byte
	if cfg.Sessions != nil {
		kv, err := newKVSessions(*cfg.Sessions)
		if err != nil {
			return nil, err
		}
		store, key = kv, cfg.Sessions.Key
	}
	s := &Server{cfg: cfg, sessions: newSessions(store, cfg.SessionTTL, cfg.Now), pages: p, mux: http.NewServeMux(),
		counts: &countCache{m: map[string]cachedCount{}}}
	if cfg.OIDC != nil {
		if s.oidc, err = newOIDCSignin(*cfg.OIDC, key); err != nil {
			return nil, err
		}
	}
	s.handler = secure(s.mux)
	s.routes()
	return s, nil
}

// Connect makes the console call the APIs at the gateway at baseURL
// (http://host:port), e.g. once the gateway listens.
func (s *Server) Connect(baseURL string) {
	s.api.Store(&apis{
		runs:        toolfleetv1connect.NewAgentServiceClient(s.cfg.HTTPClient, baseURL),
		programs:    toolfleetv1connect.NewProgramServiceClient(s.cfg.HTTPClient, baseURL),
		tools:       toolfleetv1connect.NewToolGatewayServiceClient(s.cfg.HTTPClient, baseURL),
		connections: toolfleetv1connect.NewConnectionServiceClient(s.cfg.HTTPClient, baseURL),
	})
}

// Pattern is the path pattern to mount the console at (a gateway.Mount's).
func (s *Server) Pattern() string { return Prefix }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) routes() {
	m := s.mux
	m.Handle("GET "+Prefix+"assets/", assetHandler())
	m.HandleFunc("GET "+Prefix+"{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"runs", http.StatusSeeOther)
	})
	m.HandleFunc("GET "+Prefix+"signin", s.signinPage)
	m.HandleFunc("POST "+Prefix+"signin", s.signin)
	m.HandleFunc("POST "+Prefix+"signout", s.post(s.signout))
	if s.oidc != nil {
		m.HandleFunc("GET "+Prefix+"oidc/start", s.oidcStart)
		m.HandleFunc("GET "+Prefix+"oidc/callback", s.oidcCallback)
	}
	m.HandleFunc("GET "+Prefix+"runs", s.page(s.runsPage))
	m.HandleFunc("POST "+Prefix+"runs", s.post(s.startRun))
	m.HandleFunc("GET "+Prefix+"runs/{id}", s.page(s.runPage))
	m.HandleFunc("GET "+Prefix+"runs/{id}/events", s.page(s.runEvents))
	m.HandleFunc("POST "+Prefix+"runs/{id}/cancel", s.post(s.cancelRun))
	m.HandleFunc("POST "+Prefix+"runs/{id}/message", s.post(s.sendMessage))
	m.HandleFunc("POST "+Prefix+"runs/{id}/decide", s.post(s.decideRun))
	m.HandleFunc("POST "+Prefix+"runs/{id}/answer", s.post(s.answerRun))
	m.HandleFunc("GET "+Prefix+"inbox", s.page(s.inboxPage))
	m.HandleFunc("GET "+Prefix+"inbox/events", s.page(s.inboxEvents))
	m.HandleFunc("GET "+Prefix+"tools", s.page(s.toolsPage))
	m.HandleFunc("GET "+Prefix+"tools/{id}", s.page(s.toolPage))
	m.HandleFunc("POST "+Prefix+"tools/{id}", s.post(s.tryTool))
	m.HandleFunc("GET "+Prefix+"programs", s.page(s.programsPage))
	m.HandleFunc("GET "+Prefix+"programs/{id}", s.page(s.programPage))
	m.HandleFunc("GET "+Prefix+"programs/{id}/events", s.page(s.programEvents))
	m.HandleFunc("POST "+Prefix+"programs/{id}/decide", s.post(s.decideProgram))
	m.HandleFunc("POST "+Prefix+"programs/{id}/answer", s.post(s.answerProgram))
	m.HandleFunc("GET "+Prefix+"connections", s.page(s.connectionsPage))
	m.HandleFunc("POST "+Prefix+"connections/connect", s.post(s.connectProvider))
	m.HandleFunc("POST "+Prefix+"connections/revoke", s.post(s.revokeConnection))
	m.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, nil, http.StatusNotFound, "There is no such page in the console.")
	})
}

// handler is a page handler with its session and the APIs.
type handler func(w http.ResponseWriter, r *http.Request, ss *session, a *apis)

// page wraps a GET handler: a session that signed in (or one made at once
// with auth off), and the APIs.
func (s *Server) page(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss, err := s.sessions.get(r)
		if err != nil {
			s.failStore(w, r, err)
			return
		}
		if ss != nil && ss.signedIn && s.oidc != nil {
			ss = s.renew(r.Context(), ss) // nil: the provider's token ended
		}
		if (ss == nil || !ss.signedIn) && s.cfg.AuthOff {
			// Everyone is the anonymous principal: nothing to store (so
			// cookieless visitors cannot fill the store either).
			if ss == nil {
				ss = s.sessions.signedOut(w, r)
			}
			ss.signedIn, ss.subject = true, "anonymous"
		}
		if ss == nil || !ss.signedIn {
			http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
			return
		}
		a := s.api.Load()
		if a == nil {
			s.fail(w, r, ss, http.StatusServiceUnavailable, ErrNotConnected.Error())
			return
		}
		h(w, r, ss, a)
	}
}

// post wraps a state-changing handler: a signed-in session and its CSRF
// token in the form, else 403 and nothing changes.
func (s *Server) post(h handler) http.HandlerFunc {
	return s.page(func(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if !validCSRF(r, ss) {
			s.fail(w, r, ss, http.StatusForbidden, "This form has expired or did not come from the console (its CSRF token is missing or wrong): reload the page and try again.")
			return
		}
		h(w, r, ss, a)
	})
}

// maxForm bounds a posted form.
const maxForm = 1 << 20

// as makes req carry ss's token.
func as[T any](ss *session, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if ss.token != "" {
		req.Header().Set("Authorization", "Bearer "+ss.token)
	}
	return req
}

// apiTimeout bounds one API call of a page.
const apiTimeout = 15 * time.Second

func callCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), apiTimeout)
}

// fail renders the error page with status and message.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, ss *session, status int, message string) {
	w.WriteHeader(status)
	s.render(w, r, ss, "error", status, map[string]any{"Status": status, "Title": http.StatusText(status), "Message": message})
}

// failStore renders a session store that cannot serve the request.
func (s *Server) failStore(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errFull) {
		s.fail(w, r, nil, http.StatusServiceUnavailable, "The console holds too many sessions: try again later.")
		return
	}
	s.fail(w, r, nil, http.StatusServiceUnavailable, "The console's sessions are not reachable (NATS is not answering): try again in a moment.")
}

// failAPI renders an API error in the caller's terms: a run the principal
// may not see is not found, exactly like one that does not exist.
func (s *Server) failAPI(w http.ResponseWriter, r *http.Request, ss *session, what string, err error) {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound, connect.CodePermissionDenied:
		s.fail(w, r, ss, http.StatusNotFound, what+" was not found, or is not yours to see.")
	case connect.CodeUnauthenticated:
		s.sessions.end(w, r)
		s.fail(w, r, nil, http.StatusUnauthorized, "Your sign-in is no longer accepted by the gateway: sign in again.")
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		s.fail(w, r, ss, http.StatusBadRequest, what+": "+messageOf(err))
	case connect.CodeUnavailable:
		s.fail(w, r, ss, http.StatusServiceUnavailable, "The orchestrator is not answering ("+messageOf(err)+"): try again in a moment.")
	default:
		s.fail(w, r, ss, http.StatusBadGateway, what+": "+messageOf(err))
	}
}

func asConnect(err error, ce **connect.Error) bool { return errors.As(err, ce) }

func messageOf(err error) string {
	var ce *connect.Error
	if asConnect(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}
