package connections

import (
	"context"
	"time"
)

// Seed stores a connection as a finished code exchange would: the tests of
// this package have no authorization server (e2e/oauth runs the flow on Ory
// Hydra), so they put the record the callback would have stored.
func (s *Service) Seed(ctx context.Context, subject, provider string, scopes []string, access, refresh string, expiry time.Time) error {
	r := record{ID: randomString(), Subject: subject, Provider: provider, Scopes: scopes, Created: s.cfg.Now(),
		Access: token{Value: access, Type: "Bearer", Expiry: expiry}, Refresh: refresh}
	return s.st.overwrite(ctx, connKey(subject, provider), r)
}

// Raw returns the bytes stored for subject's connection to provider.
func (s *Service) Raw(ctx context.Context, subject, provider string) ([]byte, error) {
	e, err := s.st.kv.Get(ctx, connKey(subject, provider))
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
	_, err = s.st.kv.Put(ctx, connKey(to, provider), b)
	return err
}
