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

// sealer seals what the console hands out or stores (AES-256-GCM): the OIDC
// flow cookie, and the sessions in a shared bucket (sessionkv.go). Its key
// is the replicas' shared session key, or one made at start: then a value
// sealed by another process or before a restart does not open. purpose
// binds sealed values to their use.
type sealer struct {
	aead    cipher.AEAD
	purpose []byte
}

// maxSealed bounds a sealed value a request presents.
const maxSealed = 4 << 10

// flowPurpose binds the flow cookie to its use.
const flowPurpose = "toolfleet console oidc flow v1"

// newSealer is a sealer with a key of its own, for the flow cookie.
func newSealer() (*sealer, error) { return newKeySealer(SessionKey(nil), flowPurpose) }

func newKeySealer(key []byte, purpose string) (*sealer, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("console: sealing key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("console: sealing key: %w", err)
	}
	return &sealer{aead: aead, purpose: []byte(purpose)}, nil
}

// seal returns v as JSON, sealed and base64url-encoded.
func (s *sealer) seal(v any) (string, error) {
	b, err := s.sealBytes(v, nil)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// sealBytes returns v as JSON, sealed and bound to ad.
func (s *sealer) sealBytes(v any, ad []byte) ([]byte, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, plain, s.additional(ad)), nil
}

func (s *sealer) additional(ad []byte) []byte {
	return append(append(append([]byte{}, s.purpose...), 0), ad...)
}

// errUnsealed is a value that was not sealed here (or was changed).
var errUnsealed = errors.New("console: the sealed value does not open")

// open unseals value into v.
func (s *sealer) open(value string, v any) error {
	if len(value) > maxSealed {
		return errUnsealed
	}
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil {
		return errUnsealed
	}
	return s.openBytes(raw, nil, v)
}

// openBytes unseals raw, sealed bound to ad, into v.
func (s *sealer) openBytes(raw, ad []byte, v any) error {
	n := s.aead.NonceSize()
	if len(raw) < n {
		return errUnsealed
	}
	plain, err := s.aead.Open(nil, raw[:n], raw[n:], s.additional(ad))
	if err != nil {
		return errUnsealed
	}
	if err := json.Unmarshal(plain, v); err != nil {
		return errUnsealed
	}
	return nil
}
