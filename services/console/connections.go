package console

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// The connections page (docs/credentials.md): the principal's delegated
// credentials as the gateway's ConnectionService lists them (never a
// token), a Connect button per configured provider that starts the
// gateway's connect flow (StartConnection, then a redirect to the page the
// gateway answers, which sends the browser on to the provider), and Revoke
// behind a confirmation. Every call is made with the session's token, so
// it acts on the principal's own connections only.

// connectionRow is one connection in the list.
type connectionRow struct {
	Provider, ID, Scopes, Created, Expires, Refreshed string
	Refreshable, Unreadable                           bool
}

// maxFormScopes bounds the scopes a connect form may ask for.
const maxFormScopes = 32

// maxProviderName bounds a provider named in a form.
const maxProviderName = 128

func (s *Server) connectionsPage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	s.renderConnections(w, r, ss, a, http.StatusOK, "", "")
}

// renderConnections renders the list; notice says what the last action
// did, problem what went wrong.
func (s *Server) renderConnections(w http.ResponseWriter, r *http.Request, ss *session, a *apis, status int, notice, problem string) {
	ctx, cancel := callCtx(r)
	defer cancel()
	data := map[string]any{"Notice": notice, "Problem": problem, "CSRF": ss.csrf}
	res, err := a.connections.ListConnections(ctx, as(ss, &toolfleetv1.ListConnectionsRequest{}))
	switch connect.CodeOf(err) {
	case connect.CodeUnimplemented, connect.CodeNotFound:
		data["Off"] = true // the gateway has no --connections-file
	case connect.CodeUnauthenticated, connect.CodePermissionDenied:
		s.failAPI(w, r, ss, "Your connections", err)
		return
	default:
		if err != nil {
			data["Problem"] = "Your connections could not be read: " + messageOf(err)
			break
		}
		var rows []connectionRow
		connected := map[string]bool{}
		for _, c := range res.Msg.GetConnections() {
			connected[c.GetProvider()] = true
			rows = append(rows, connectionRow{Provider: c.GetProvider(), ID: c.GetId(), Scopes: strings.Join(c.GetScopes(), " "),
				Created: when(c.GetCreated()), Expires: when(c.GetExpires()), Refreshed: when(c.GetRefreshed()),
				Refreshable: c.GetRefreshable(), Unreadable: c.GetUnreadable()})
		}
		providers := slices.Clone(res.Msg.GetProviders())
		slices.Sort(providers)
		data["Connections"], data["Providers"], data["Connected"] = rows, providers, connected
	}
	if status != http.StatusOK {
		w.WriteHeader(status)
	}
	s.render(w, r, ss, "connections", status, data)
}

func formProvider(r *http.Request) string {
	p := strings.TrimSpace(r.PostFormValue("provider"))
	if len(p) > maxProviderName {
		return ""
	}
	return p
}

// connectProvider starts the gateway's connect flow for the principal and
// sends the browser to the page it answers (which goes on to the provider).
func (s *Server) connectProvider(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	provider := formProvider(r)
	if provider == "" {
		s.renderConnections(w, r, ss, a, http.StatusBadRequest, "", "Choose a provider to connect.")
		return
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	// A call waiting for this connection names the scopes its tool needs
	// (the inbox's Connect button sends them); the gateway checks and bounds them.
	scopes := r.PostForm["scope"]
	if len(scopes) > maxFormScopes {
		s.renderConnections(w, r, ss, a, http.StatusBadRequest, "", "Too many scopes in the form.")
		return
	}
	res, err := a.connections.StartConnection(ctx, as(ss, &toolfleetv1.StartConnectionRequest{Provider: provider, Scopes: scopes}))
	switch connect.CodeOf(err) {
	case connect.CodeNotFound, connect.CodeResourceExhausted, connect.CodeInvalidArgument:
		s.renderConnections(w, r, ss, a, http.StatusBadRequest, "", "Connecting "+provider+": "+messageOf(err))
		return
	}
	if err != nil {
		s.failAPI(w, r, ss, "Connecting "+provider, err)
		return
	}
	// Only a web address leaves the console: never javascript: or the like.
	u, perr := url.Parse(res.Msg.GetAuthorizationUrl())
	if perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		s.fail(w, r, ss, http.StatusBadGateway, "The gateway answered the connect with an address the console does not follow.")
		return
	}
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// revokeConnection asks to confirm, then revokes the principal's connection.
func (s *Server) revokeConnection(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	provider := formProvider(r)
	if provider == "" {
		s.renderConnections(w, r, ss, a, http.StatusBadRequest, "", "Choose a connection to revoke.")
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		s.render(w, r, ss, "connections", http.StatusOK, map[string]any{"Confirm": provider, "CSRF": ss.csrf})
		return
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	res, err := a.connections.RevokeConnection(ctx, as(ss, &toolfleetv1.RevokeConnectionRequest{Provider: provider}))
	if err != nil {
		switch connect.CodeOf(err) {
		case connect.CodeUnauthenticated, connect.CodePermissionDenied:
			s.failAPI(w, r, ss, "Revoking "+provider, err)
		default:
			s.renderConnections(w, r, ss, a, http.StatusBadGateway, "", "Revoking "+provider+": "+messageOf(err))
		}
		return
	}
	notice := "You had no " + provider + " connection."
	if res.Msg.GetRevoked() {
		notice = "Revoked your " + provider + " connection."
		if wn := res.Msg.GetProviderWarning(); wn != "" {
			notice += " " + wn
		}
	}
	s.renderConnections(w, r, ss, a, http.StatusOK, notice, "")
}
