// Package hydralogin is a login and consent app for an Ory Hydra run next to
// `toolfleet dev` (`toolfleet dev hydra-login`).
//
// Hydra is an OAuth 2.0 / OpenID Connect server without a user interface of
// its own: it sends the browser to a login URL and a consent URL with a
// challenge, and the app there tells Hydra's admin API who signed in and what
// they granted. This app asks for a name (any name: it checks no password) and
// which of the requested scopes to grant. It is for trying connections and the
// console's sign-in on a laptop, so it serves only loopback addresses and
// refuses requests whose Host is not a loopback name (a DNS-rebinding page
// cannot drive it). Every form carries a CSRF token bound to a SameSite=Strict
// cookie.
//
// [Admin] is the small client of Hydra's login, consent and logout admin API
// the app uses; the tests' login and consent provider (e2e/oauth/hydratest)
// uses it too. [Admin.EnsureClient] registers an OAuth client under a fixed
// id, again and again without harm (`hydra-login --clients`, for the kind
// overlay whose gateways name that id).
package hydralogin
