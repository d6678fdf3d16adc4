package connections

import (
	"context"
	"time"

	"golang.org/x/oauth2"
)

// Seed imports a connection (see [Service.Import]): the tests of this
// package have no authorization server (e2e/oauth runs the flow on Ory Hydra).
func (s *Service) Seed(ctx context.Context, subject, provider string, scopes []string, access, refresh string, expiry time.Time) error {
	_, err := s.Import(ctx, subject, provider, scopes, &oauth2.Token{AccessToken: access, RefreshToken: refresh, Expiry: expiry, TokenType: "Bearer"})
	return err
}

// Raw returns the bytes stored for subject's connection to provider.
func (s *Service) Raw(ctx context.Context, subject, provider string) ([]byte, error) {
	kv, err := s.st.bucket(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, connKey(subject, provider))
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// Copy stores the raw record of one principal's connection under another's key.
func (s *Service) Copy(ctx context.Context, from, to, provider string) error {
	b, err := s.Raw(ctx, from, provider)
	if err != nil {
		return err
	}
	kv, err := s.st.bucket(ctx)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, connKey(to, provider), b)
	return err
}
