package exchange

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// assertionTTL is how long a signed assertion is good for: one request.
const assertionTTL = 5 * time.Minute

// signer signs the gateway's JWT assertions (RFC 7523 §3) with the key the
// operator configured.
type signer struct {
	method jwt.SigningMethod
	key    any
	kid    string
}

// loadSigner reads a PEM private key: RSA (RS256) or EC P-256 (ES256), in
// PKCS #8, PKCS #1 or SEC 1 form.
func loadSigner(path, kid string) (*signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("assertion key: %w", err)
	}
	if k, err := jwt.ParseRSAPrivateKeyFromPEM(b); err == nil {
		if k.N.BitLen() < 2048 {
			return nil, errors.New("assertion key: an RSA key needs at least 2048 bits")
		}
		return &signer{method: jwt.SigningMethodRS256, key: k, kid: kid}, nil
	}
	if k, err := jwt.ParseECPrivateKeyFromPEM(b); err == nil {
		if k.Curve != elliptic.P256() {
			return nil, errors.New("assertion key: an EC key must be on P-256 (ES256)")
		}
		return &signer{method: jwt.SigningMethodES256, key: k, kid: kid}, nil
	}
	return nil, fmt.Errorf("assertion key %s: not a PEM RSA or EC P-256 private key", path)
}

// sign returns an assertion that iss asserts sub to the audiences aud, with
// the delegation chain act.
func (s *signer) sign(now time.Time, iss, sub string, aud []string, act *Actor) (string, error) {
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", err
	}
	claims := struct {
		jwt.RegisteredClaims
		Act *Actor `json:"act,omitempty"`
	}{jwt.RegisteredClaims{
		Issuer: iss, Subject: sub, Audience: aud, ID: hex.EncodeToString(jti),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(assertionTTL)),
		// No nbf: servers that require it strictly before "now" would refuse
		// an assertion signed in the same second.
	}, act}
	t := jwt.NewWithClaims(s.method, claims)
	if s.kid != "" {
		t.Header["kid"] = s.kid
	}
	return t.SignedString(s.key)
}

// publicKey is the key the authorization server verifies assertions with.
func (s *signer) publicKey() any {
	switch k := s.key.(type) {
	case *rsa.PrivateKey:
		return &k.PublicKey
	case *ecdsa.PrivateKey:
		return &k.PublicKey
	}
	return nil
}
