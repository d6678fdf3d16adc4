package console

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// devScope is a scope the dev sign-in offers.
type devScope struct {
	Name, About string
	Default     bool
}

// devScopes are the scopes of the AgentService, the ProgramService and the
// tool gateway (docs/agents.md, docs/programs.md, docs/gateway.md).
var devScopes = []devScope{
	{"runs:start", "start agent runs", true},
	{"runs:read", "see your runs", true},
	{"runs:approve", "approve or deny your runs' calls", true},
	{"runs:cancel", "cancel your runs", true},
	{"runs:admin", "see and steer every principal's runs", false},
	{"programs:run", "run programs", true},
	{"programs:read", "see your programs", true},
	{"programs:approve", "approve or deny your programs' calls", true},
	{"programs:admin", "see and steer every principal's programs", false},
	{"tools:call", "call every tool", true},
}

// subjectPattern is what a dev subject may be.
var subjectPattern = regexp.MustCompile(`^[A-Za-z0-9._@:-]{1,128}$`)

func (s *Server) signinPage(w http.ResponseWriter, r *http.Request) {
	if s.cfg.AuthOff {
		http.Redirect(w, r, Prefix+"runs", http.StatusSeeOther)
		return
	}
	ss, err := s.sessions.get(r)
	if err != nil {
		s.failStore(w, r, err)
		return
	}
	if ss == nil || ss.signedIn {
		// A fresh, signed-out session carries the sign-in form's CSRF token.
		ss = s.sessions.signedOut(w, r)
	}
	s.renderSignin(w, r, ss, http.StatusOK, "", "")
}

func (s *Server) renderSignin(w http.ResponseWriter, r *http.Request, ss *session, status int, subject, problem string) {
	if subject == "" {
		subject = "dev"
	}
	w.WriteHeader(status)
	s.render(w, r, ss, "signin", status, map[string]any{
		"Dev": s.cfg.DevSecret != nil, "Scopes": devScopes, "Subject": subject, "Problem": problem, "OIDC": s.oidcIssuer(),
	})
}

// signin signs the session in: with the dev secret, as a chosen subject and
// scopes; without it, with a bearer token the visitor pastes (one the
// gateway accepts). Either way the old session id is dropped.
func (s *Server) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	ss, err := s.sessions.get(r)
	if err != nil {
		s.failStore(w, r, err)
		return
	}
	if !validCSRF(r, ss) {
		s.fail(w, r, nil, http.StatusForbidden, "This sign-in form has expired or did not come from the console: open the sign-in page again.")
		return
	}
	subject := strings.TrimSpace(r.PostFormValue("subject"))
	var token string
	var scopes []string
	if s.cfg.DevSecret != nil {
		if !subjectPattern.MatchString(subject) {
			s.renderSignin(w, r, ss, http.StatusBadRequest, subject, "A subject is 1 to 128 letters, digits or . _ @ : -")
			return
		}
		for _, sc := range r.PostForm["scope"] {
			if slices.ContainsFunc(devScopes, func(d devScope) bool { return d.Name == sc }) && !slices.Contains(scopes, sc) {
				scopes = append(scopes, sc)
			}
		}
		now := s.cfg.Now()
		var err error
		token, err = jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": subject,
			"scope": strings.Join(scopes, " "), "iat": now.Unix(), "exp": now.Add(s.cfg.SessionTTL).Unix()}).SignedString(s.cfg.DevSecret)
		if err != nil {
			s.fail(w, r, nil, http.StatusInternalServerError, fmt.Sprintf("could not mint the dev token: %v", err))
			return
		}
	} else {
		token = strings.TrimSpace(strings.TrimPrefix(r.PostFormValue("token"), "Bearer "))
		if token == "" {
			s.renderSignin(w, r, ss, http.StatusBadRequest, "", "Paste a bearer token the gateway accepts.")
			return
		}
		subject, scopes = claims(token)
	}
	s.sessions.end(w, r)
	if _, err := s.sessions.start(w, r, func(n *session) { n.subject, n.scopes, n.token = subject, scopes, token }); err != nil {
		s.failStore(w, r, err)
		return
	}
	http.Redirect(w, r, Prefix+"runs", http.StatusSeeOther)
}

// claims reads a pasted token's subject and scopes for display only (the
// gateway verifies the token on every call).
func claims(token string) (string, []string) {
	var c jwt.MapClaims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &c); err != nil {
		return "(token)", nil
	}
	sub, _ := c["sub"].(string)
	sc, _ := c["scope"].(string)
	return sub, strings.Fields(sc)
}

func (s *Server) signout(w http.ResponseWriter, r *http.Request, ss *session, _ *apis) {
	s.oidcSignOut(r.Context(), ss)
	s.sessions.end(w, r)
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}
