package connections

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// File is the operator's connections file (the gateway's --connections-file),
// JSON:
//
//	{
//	  "public_url": "https://tools.example.com",
//	  "key_ring_file": "/secrets/connections/keys",
//	  "providers": [
//	    {"name": "github", "authorization_url": "https://github.com/login/oauth/authorize",
//	     "token_url": "https://github.com/login/oauth/access_token", "auth_style": "post",
//	     "client_id": "Iv1.0123", "client_secret_file": "/secrets/github/secret"},
//	    {"name": "corp", "issuer": "https://login.example.com", "client_id": "toolfleet",
//	     "client_secret_file": "/secrets/corp/secret", "scopes": ["offline_access"]},
//	    {"name": "inventory", "issuer": "https://login.example.com", "client_id": "toolfleet-gateway",
//	     "client_secret_file": "/secrets/corp/secret", "exchange": "jwt-bearer",
//	     "assertion_key_file": "/secrets/corp/assertion.pem"}
//	  ]
//	}
//
// Relative file names are read relative to the file's folder.
type File struct {
	PublicURL       string     `json:"public_url"`
	KeyRingFile     string     `json:"key_ring_file"`
	Providers       []Provider `json:"providers"`
	MaxPerPrincipal int        `json:"max_per_principal,omitempty"`
	// RefreshBefore is a Go duration ("2m"); empty: [DefaultRefreshBefore].
	RefreshBefore string `json:"refresh_before,omitempty"`
}

// maxFile bounds a connections file.
const maxFile = 1 << 20

// LoadFile reads a connections file and its key ring into a Config (without
// its bucket, logger and clock, which the caller sets). Providers with an
// exchange mode go to Config.Exchanges (package exchange serves them); a
// file with only those needs no key ring.
func LoadFile(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if len(b) > maxFile {
		return Config{}, fmt.Errorf("%w: %s is over %d bytes", ErrConfig, path, maxFile)
	}
	var f File
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Config{}, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	dir := filepath.Dir(path)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	cfg := Config{PublicURL: f.PublicURL, MaxPerPrincipal: f.MaxPerPrincipal}
	if f.RefreshBefore != "" {
		d, err := time.ParseDuration(f.RefreshBefore)
		if err != nil || d <= 0 {
			return Config{}, fmt.Errorf("%w: %s: refresh_before %q is not a positive duration", ErrConfig, path, f.RefreshBefore)
		}
		cfg.RefreshBefore = d
	}
	for _, p := range f.Providers {
		p.ClientSecretFile = rel(p.ClientSecretFile)
		p.AssertionKeyFile = rel(p.AssertionKeyFile)
		if p.Exchange != "" {
			cfg.Exchanges = append(cfg.Exchanges, p)
			continue
		}
		cfg.Providers = append(cfg.Providers, p)
	}
	if len(cfg.Providers) == 0 && len(cfg.Exchanges) == 0 {
		return Config{}, fmt.Errorf("%w: %s: no providers", ErrConfig, path)
	}
	if len(cfg.Providers) > 0 || f.KeyRingFile != "" {
		// Only connections are stored: a file of exchange providers alone needs no key ring.
		if f.KeyRingFile == "" {
			return Config{}, fmt.Errorf("%w: %s: no key_ring_file", ErrConfig, path)
		}
		ring, err := LoadKeyRing(rel(f.KeyRingFile))
		if err != nil {
			return Config{}, err
		}
		cfg.KeyRing = ring
	}
	return cfg, nil
}
