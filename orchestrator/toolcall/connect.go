package toolcall

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// A connection a call waits for.
//
// A tool that acts with its caller's own account at a provider (its
// contract declares a credential) is refused by the gateway with a
// ConnectionRequired detail while the caller has not connected that
// provider. Inside a run or a program that is not a failure but pending
// input, kept on the same [Desk] as a tool's questions: [Classify] turns the
// refusal into a round of one [MethodConnect] request, the person connects
// (toolfleet connections connect PROVIDER, or the console's inbox) and the
// item is answered with accept — by the gateway once it stored the
// connection (connections.Resumer), or by the person — and the call is made
// again under the same call id. Still not connected: the gateway refuses again and the call waits
// again ([MaxInputRounds] bounds the rounds). A decline ends the call with
// an error saying the person declined to connect the provider.
//
// Only the provider and the scopes are kept: the gateway's authorization
// URL carries single-use state (the PKCE flow's) and belongs to the person
// who opens it, never to history, events or transcripts. Whoever answers
// starts a fresh connect flow of their own.

// MethodConnect is the method of a pending item that waits for the
// principal to connect an account ([Question.Provider]).
const MethodConnect = "toolfleet/connect"

// ConnectKey is the key of the one item of a connection round.
const ConnectKey = "connect"

// Bounds of what a connection round keeps in history.
const (
	maxProviderBytes = 128
	maxConnectScopes = 32
	maxScopeBytes    = 256
)

// connectParams is the ParamsJSON of a [MethodConnect] request.
type connectParams struct {
	Provider string   `json:"provider"`
	Scopes   []string `json:"scopes,omitempty"`
}

// connectAsked is the round a ConnectionRequired answer becomes: provider
// and scopes only (the authorization URL is left out, see above), bounded.
func connectAsked(cr *toolfleetv1.ConnectionRequired) *Asked {
	p := connectParams{Provider: truncate(cr.GetProvider(), maxProviderBytes)}
	for _, s := range cr.GetScopes() {
		if len(p.Scopes) == maxConnectScopes {
			break
		}
		p.Scopes = append(p.Scopes, truncate(s, maxScopeBytes))
	}
	b, _ := json.Marshal(p) // strings only: cannot fail
	return &Asked{Requests: []AskedRequest{{Key: ConnectKey, Method: MethodConnect, ParamsJSON: string(b)}}}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// Connect returns the provider a round waits for the principal to connect,
// or "" for a round of a tool's questions.
func (a *Asked) Connect() string {
	if a == nil || len(a.Requests) != 1 || a.Requests[0].Method != MethodConnect {
		return ""
	}
	var p connectParams
	if json.Unmarshal([]byte(a.Requests[0].ParamsJSON), &p) != nil {
		return ""
	}
	return p.Provider
}

// connectQuestion is the pending item of a connection round.
func connectQuestion(q Question, r AskedRequest) (Question, error) {
	var p connectParams
	if err := json.Unmarshal([]byte(r.ParamsJSON), &p); err != nil || p.Provider == "" {
		return q, fmt.Errorf("toolcall: connection request without a provider")
	}
	q.Provider, q.Scopes = p.Provider, slices.Clone(p.Scopes)
	q.Message = ConnectMessage(p.Provider, p.Scopes)
	return q, nil
}

// ConnectMessage is what a pending connection says to the person.
func ConnectMessage(provider string, scopes []string) string {
	cmd := "toolfleet connections connect " + provider
	if len(scopes) > 0 {
		cmd += " --scope " + strings.Join(scopes, ",")
	}
	return "connect your " + provider + " account: run `" + cmd + "` (or use the console's inbox) and the call goes on; decline to go on without it"
}

// DeclinedConnect is why a call ends when its person declines to connect.
func DeclinedConnect(provider string) string {
	return "the user declined to connect " + provider
}

// checkConnectReply checks a reply to a connection: accept, decline or
// cancel, without content (connecting happens at the gateway, not here).
func checkConnectReply(r Reply) error {
	switch r.Action {
	case ActionAccept, ActionDecline, ActionCancel:
	default:
		return fmt.Errorf("action %q: want accept (connected), decline or cancel", r.Action)
	}
	if c := strings.TrimSpace(r.ContentJSON); c != "" && c != "{}" {
		return fmt.Errorf("an answer to a connection carries no content: connect with `toolfleet connections connect` first")
	}
	return nil
}
