// Package console is the run console: server-rendered pages at /console/ on
// the gateway's port for the people agent runs and programs serve (issue 34).
//
// It shows a principal's runs (list and a live run page), an inbox of the
// calls waiting for its approval across runs and programs, and lets it
// cancel a run, send it a message and approve or deny a call. It holds no
// data of its own: every page calls the AgentService and ProgramService at
// the gateway as the signed-in principal, with that principal's token, so
// it shows exactly what the API lets that principal see.
//
// The package reads as a pipeline: [Server] (console.go) routes a request
// through the security headers (headers.go) and the session and its CSRF
// token (session.go; stored in one process's memory or, with
// [SharedSessions], sealed in a NATS KV bucket every gateway replica reads:
// oidcsession.go, sessionkv.go) to a page handler (signin.go, runs.go,
// programs.go, inbox.go, connections.go), which renders an embedded
// html/template (templates.go); the run and program pages' live parts are
// Server-Sent Events streams of server-rendered fragments (sse.go,
// programlive.go) read by a small embedded script (assets.go).
//
// Sign-in is the dev sign-in of `toolfleet dev` (a token minted with the
// gateway's HS256 dev secret for a chosen subject and scopes), and/or
// OpenID Connect with the operator's provider (oidc.go: authorization code
// with PKCE; the session calls the APIs with the provider's access token);
// with auth off every visitor is the anonymous principal. See
// docs/console.md.
package console
