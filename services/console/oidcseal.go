package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// sealer seals what a cookie carries (AES-256-GCM, a key made at start):
// the browser can neither read nor change it, and a cookie sealed by
// another process or before a restart does not open.
type sealer struct{ aead cipher.AEAD }

// maxSealed bounds a sealed value a request presents.
const maxSealed = 4 << 10

// sealContext binds sealed values to their use.
var sealContext = []byte("toolfleet console oidc flow v1")

func newSealer() (*sealer, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("console: sealing key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("console: sealing key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("console: sealing key: %w", err)
	}
	return &sealer{aead: aead}, nil
}

// seal returns v as JSON, sealed and base64url-encoded.
func (s *sealer) seal(v any) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, sealContext)), nil
}

// errUnsealed is a value that was not sealed here (or was changed).
var errUnsealed = errors.New("console: the sealed value does not open")

// open unseals value into v.
func (s *sealer) open(value string, v any) error {
	if len(value) > maxSealed {
		return errUnsealed
	}
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) < s.aead.NonceSize() {
		return errUnsealed
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, raw[:n], raw[n:], sealContext)
	if err != nil {
		return errUnsealed
	}
	if err := json.Unmarshal(plain, v); err != nil {
		return errUnsealed
	}
	return nil
}
