package connections

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// KeySize is the size of one key of a [KeyRing]: AES-256.
const KeySize = 32

// maxKeys bounds a key ring file: rotations keep old keys, not hundreds.
const maxKeys = 64

var keyIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Errors of the key ring; match them with errors.Is.
var (
	// ErrKeyRing: the key ring file cannot be used (its message says why and
	// never shows a key).
	ErrKeyRing = errors.New("connections: invalid key ring")
	// ErrSealed: a sealed record does not open: its key is no longer in the
	// ring, or it was altered or moved to another principal's key.
	ErrSealed = errors.New("connections: sealed record does not open")
)

// KeyRing seals and opens records with AES-256-GCM. It holds every key an
// operator still lists, so records sealed before a rotation stay readable;
// new records are sealed with the active key. Each sealed record names the
// id of its key.
type KeyRing struct {
	active string
	aeads  map[string]cipher.AEAD
}

// LoadKeyRing reads a key ring file: one key a line as "ID:BASE64" (standard
// base64 of 32 random bytes, e.g. `openssl rand -base64 32`), the active key
// first; blank lines and lines starting with # are skipped. To rotate, add a
// new key on top and keep the old ones below until no record uses them.
func LoadKeyRing(path string) (*KeyRing, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyRing, err)
	}
	return ParseKeyRing(b)
}

// ParseKeyRing parses the contents of a key ring file (see [LoadKeyRing]).
func ParseKeyRing(b []byte) (*KeyRing, error) {
	r := &KeyRing{aeads: map[string]cipher.AEAD{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		id, enc, ok := strings.Cut(text, ":")
		if !ok || !keyIDRe.MatchString(id) {
			return nil, fmt.Errorf("%w: line %d: want ID:BASE64 with an id of [A-Za-z0-9_-]{1,32}", ErrKeyRing, line)
		}
		key, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || len(key) != KeySize {
			return nil, fmt.Errorf("%w: line %d (key %s): want the base64 of %d bytes", ErrKeyRing, line, id, KeySize)
		}
		if _, dup := r.aeads[id]; dup {
			return nil, fmt.Errorf("%w: line %d: key id %s listed twice", ErrKeyRing, line, id)
		}
		if len(r.aeads) == maxKeys {
			return nil, fmt.Errorf("%w: more than %d keys", ErrKeyRing, maxKeys)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("%w: key %s: %w", ErrKeyRing, id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: key %s: %w", ErrKeyRing, id, err)
		}
		if r.active == "" {
			r.active = id
		}
		r.aeads[id] = aead
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyRing, err)
	}
	if r.active == "" {
		return nil, fmt.Errorf("%w: no key", ErrKeyRing)
	}
	return r, nil
}

// NewKeyLine returns a fresh key ring line "id:BASE64" (for tests and the
// documented setup).
func NewKeyLine(id string) string {
	key := make([]byte, KeySize)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return id + ":" + base64.StdEncoding.EncodeToString(key)
}

// ActiveID is the id of the key new records are sealed with.
func (r *KeyRing) ActiveID() string { return r.active }

// Seal encrypts plaintext with the active key, binding it to aad (the
// record's key in the bucket: a sealed record copied under another
// principal's key does not open). The result is "id" 0x00 nonce ciphertext.
func (r *KeyRing) Seal(plaintext, aad []byte) []byte {
	aead := r.aeads[r.active]
	out := make([]byte, 0, len(r.active)+1+aead.NonceSize()+len(plaintext)+aead.Overhead())
	out = append(out, r.active...)
	out = append(out, 0)
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	out = append(out, nonce...)
	return aead.Seal(out, nonce, plaintext, aad)
}

// Open decrypts a record sealed by [KeyRing.Seal] with any key of the ring.
// It fails with [ErrSealed] when the key is gone or the record or aad differ.
func (r *KeyRing) Open(sealed, aad []byte) ([]byte, error) {
	id, rest, ok := bytes.Cut(sealed, []byte{0})
	if !ok {
		return nil, fmt.Errorf("%w: no key id", ErrSealed)
	}
	aead, ok := r.aeads[string(id)]
	if !ok {
		return nil, fmt.Errorf("%w: key %q is not in the key ring (keep old keys listed after a rotation)", ErrSealed, id)
	}
	if len(rest) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: too short", ErrSealed)
	}
	pt, err := aead.Open(nil, rest[:aead.NonceSize()], rest[aead.NonceSize():], aad)
	if err != nil {
		return nil, fmt.Errorf("%w: key %s: %w", ErrSealed, id, err)
	}
	return pt, nil
}
