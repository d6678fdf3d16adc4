package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

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
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": devOrchestratorSubject,
			"scope": strings.Join(devOrchestratorScopes, " "), "iat": now.Unix(), "exp": exp.Unix()}).SignedString(secret)
		if err != nil {
			return "", fmt.Errorf("mint the orchestrator's token: %w", err)
		}
		tok, until = s, exp
		return tok, nil
	}
}
