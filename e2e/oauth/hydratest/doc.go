// Package hydratest runs a real OAuth 2.0 and OpenID Connect server, Ory
// Hydra, for tests: no mock stands in for the authorization server.
//
// [Start] builds Hydra once (the version pinned as a Go tool in the
// ../hydra module, `go build -tags sqlite,...`, cached in the user cache
// folder; $TOOLFLEET_HYDRA names a binary instead) and runs `hydra serve
// all --dev` on free loopback ports with an in-memory SQLite database and a
// fresh system secret; it stops Hydra when the test ends. A [Provider] is
// Hydra's login and consent app: it signs in the subject the test chooses
// (the request's login_hint, or [Provider.SetSubject]) and grants the
// requested scopes and audiences, so the authorization code flow with PKCE
// runs through real HTTP redirects with a Go http.Client and a cookie jar
// ([NewBrowser], [Authorize]). The admin API registers clients
// ([Server.PublicClient], [Server.ConfidentialClient],
// [Server.MachineClient]) and introspects tokens ([Server.Introspect]);
// [Server.Resource] wraps a test resource API that accepts only tokens
// Hydra introspects as active for its audience and scopes.
//
// Access tokens are JWTs by default (iss = [Server.Issuer], aud = the
// granted audiences, scp = the granted scopes, signed with a key in
// [Server.JWKSURL]), so a gateway can verify them offline; set
// [Options.OpaqueAccessTokens] for Hydra's opaque ones.
//
// Token hook: Hydra's oauth2.token_hook works with this version. With
// [Options.TokenHookURL] set to [ServeTokenHook]'s URL, Hydra calls the
// hook on every token request (authorization code, refresh,
// client_credentials, jwt-bearer) and adds the claims it answers to the
// access token: under "ext" in introspection and in the JWT, and at the
// JWT's top level for the names in [Options.TopLevelClaims] (e.g. "act" for
// a delegation chain). TestTokenHook shows it. Hydra does not implement
// RFC 8693 token exchange; it implements RFC 7523's jwt-bearer grant, whose
// trust relationships [Server.TrustJWTBearer] registers (the hook receives
// the verified assertion in [TokenRequest.Payload]).
//
// A cold build of Hydra takes minutes (see the e2e/oauth README); later
// starts take about a second.
package hydratest
