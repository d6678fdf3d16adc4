package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"

	"github.com/toolfleet/toolfleet/internal/config"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/programapi"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
)

// The in-process orchestrator's identity at the gateway of `toolfleet dev
// --gateway-jwt-secret`: the scopes docs/operations.md gives the
// orchestrator's token in a cluster.
const (
	devOrchestratorSubject = "toolfleet-dev-orchestrator"
	devTokenTTL            = time.Hour
)

var devOrchestratorScopes = []string{auth.ScopeCall, auth.ScopeDelegate, auth.ScopeApprove}

// devTokenSource mints the in-process orchestrator's own HS256 token with
// secret, valid for devTokenTTL, and a new one once less than a quarter of
// that is left, so a long `toolfleet dev` session never sends an expired
// token. The token never leaves the process.
func devTokenSource(secret []byte) client.TokenSource {
	var (
		mu    sync.Mutex
		tok   string
		until time.Time
	)
	return func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if tok != "" && now.Add(devTokenTTL/4).Before(until) {
			return tok, nil
		}
		exp := now.Add(devTokenTTL)
		s, err := mintDevToken(secret, devOrchestratorSubject, devOrchestratorScopes, now, exp)
		if err != nil {
			return "", fmt.Errorf("mint the orchestrator's token: %w", err)
		}
		tok, until = s, exp
		return tok, nil
	}
}

// mintDevToken signs an HS256 token for sub with scopes (the "scope" claim,
// space-separated), valid from now until exp: what a gateway started with
// --gateway-jwt-secret secret accepts.
func mintDevToken(secret []byte, sub string, scopes []string, now, exp time.Time) (string, error) {
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub,
		"scope": strings.Join(scopes, " "), "iat": now.Unix(), "exp": exp.Unix()}).SignedString(secret)
}

// devUserScopes are the scopes `toolfleet dev token` gives by default: those
// the console's dev sign-in ticks, everything a person uses the CLI for on
// their own runs and programs.
var devUserScopes = []string{agentapi.ScopeStart, agentapi.ScopeRead, agentapi.ScopeApprove, agentapi.ScopeCancel,
	programapi.ScopeRun, programapi.ScopeRead, programapi.ScopeApprove, auth.ScopeCall}

// newDevTokenCommand is `toolfleet dev token`: a bearer token for the gateway
// of a `toolfleet dev --gateway-jwt-secret`, signed with that secret.
func newDevTokenCommand() *cobra.Command {
	var (
		secret, sub, scopes string
		ttl                 time.Duration
		out                 output
	)
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Mint a bearer token for the gateway of toolfleet dev --gateway-jwt-secret",
		Long: `token prints a bearer token signed with the secret toolfleet dev was started
with (--gateway-jwt-secret, or $TOOLFLEET_GATEWAY_JWT_SECRET for both), for
--sub with --scopes. The other commands read it from --token or $TOOLFLEET_TOKEN:

  export TOOLFLEET_GATEWAY_JWT_SECRET=$(openssl rand -hex 32)
  toolfleet dev &
  export TOOLFLEET_TOKEN=$(toolfleet dev token --sub alice --scopes 'tools:call tools:approve')
  toolfleet tools call Calculator.Add '{"a": 2, "b": 3}'

It prints the token alone (-o text, the default even when piped, so $(…)
captures it), or -o json|yaml: the token with its subject, scopes and expiry.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.ApplyEnv(cmd.Flags(), "TOOLFLEET"); err != nil {
				return err
			}
			return out.validate()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if secret == "" {
				return errNoDevSecret()
			}
			if sub == "" {
				return fmt.Errorf("--sub is empty: name who the token is for, e.g. --sub alice")
			}
			list := strings.FieldsFunc(scopes, func(r rune) bool { return r == ' ' || r == ',' })
			if len(list) == 0 {
				return fmt.Errorf("--scopes is empty: give at least one, e.g. --scopes '%s'", strings.Join(devUserScopes, " "))
			}
			if ttl <= 0 {
				return fmt.Errorf("--ttl %s: want a positive duration, e.g. --ttl 8h", ttl)
			}
			now := time.Now()
			tok, err := mintDevToken([]byte(secret), sub, list, now, now.Add(ttl))
			if err != nil {
				return err
			}
			if out.chosen() {
				return out.value(cmd.OutOrStdout(), struct {
					Token     string    `json:"token"`
					Subject   string    `json:"sub"`
					Scopes    []string  `json:"scopes"`
					ExpiresAt time.Time `json:"expiresAt"`
				}{tok, sub, list, now.Add(ttl).UTC().Truncate(time.Second)})
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			fmt.Fprintf(cmd.ErrOrStderr(), "token for %s with %s, valid until %s: pass it with --token or $TOOLFLEET_TOKEN\n",
				sub, strings.Join(list, " "), now.Add(ttl).Local().Format(time.DateTime))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&secret, "gateway-jwt-secret", "", "the HS256 secret toolfleet dev was started with")
	f.StringVar(&sub, "sub", "dev", "the token's subject: who the gateway and the orchestrator see calling")
	f.StringVar(&scopes, "scopes", strings.Join(devUserScopes, " "), "scopes, space- or comma-separated (docs/gateway.md, docs/agents.md, docs/programs.md)")
	f.DurationVar(&ttl, "ttl", 12*time.Hour, "how long the token is valid")
	f.StringVarP(&out.mode, "output", "o", "text", "output: text (the token alone), json or yaml (the token, subject, scopes and expiry)")
	config.BindEnv(f, "TOOLFLEET")
	return cmd
}

// errNoDevSecret says why `dev token` has no secret and what to pass: the dev
// file holds none, on purpose (it is read by every command in the folder).
func errNoDevSecret() error {
	if a, ok := runningDev(); ok && !a.Auth {
		return fmt.Errorf("the toolfleet dev running in this folder (gateway %s) has auth off and needs no token; "+
			"to use tokens, restart it with --gateway-jwt-secret S (or $TOOLFLEET_GATEWAY_JWT_SECRET) and pass the same S here", a.Gateway)
	}
	return fmt.Errorf("dev token needs the secret toolfleet dev was started with: pass --gateway-jwt-secret S " +
		"or set $TOOLFLEET_GATEWAY_JWT_SECRET (" + defaultDevFile + " holds no secret)")
}
