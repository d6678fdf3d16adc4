// Package clientinput seals the request_state of a tool call that asked its
// caller for input (MCP's multi-round-trip requests).
//
// The caller holds the state between rounds and echoes it; it must neither
// read the worker's state (which may be private to it) nor change it, nor
// hand it to another caller, tool or input, nor use it forever. A sealed
// state is AES-256-GCM over the worker's state and an expiry, with the
// binding (tool id with version, principal, input digest) as additional
// data: any change to the token, and any use for another binding, fails to
// open with [ErrInvalid].
//
// Every gateway replica must seal with the same key, since any replica may
// answer any round: take it from a file ([ReadKeyFile]), or share one through
// a NATS KV bucket ([SharedKey]: the first replica creates it, the others read
// it), or, for a single gateway, make one per process ([RandomKey]).
package clientinput

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KeySize is the size of a sealing key (AES-256).
const KeySize = 32

// prefix names the format of a sealed state.
const prefix = "tfs1."

// ErrInvalid: the state was changed, is for another call or caller, was sealed
// with another key, or has expired.
var ErrInvalid = errors.New("clientinput: request_state is not valid for this call")

// Binding is what a sealed state is for.
type Binding struct {
	// Tool is the tool id with its version ("Toolkit.Tool@1.0.0").
	Tool string
	// Principal is the effective caller (its subject).
	Principal string
	// Input is the SHA-256 of the call's canonical input.
	Input [32]byte
}

func (b Binding) aad() []byte {
	h := sha256.New()
	for _, s := range []string{b.Tool, b.Principal} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	h.Write(b.Input[:])
	return h.Sum(nil)
}

// Sealer seals and opens states with one key. It is safe for concurrent use.
type Sealer struct {
	aead cipher.AEAD
	now  func() time.Time
}

// New returns a sealer for a [KeySize]-byte key.
func New(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("clientinput: the key is %d bytes; it must be %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("clientinput: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("clientinput: %w", err)
	}
	return &Sealer{aead: aead, now: time.Now}, nil
}

// Seal returns the opaque state for b holding state until now+ttl.
func (s *Sealer) Seal(b Binding, state []byte, ttl time.Duration) string {
	plain := make([]byte, 8, 8+len(state))
	binary.BigEndian.PutUint64(plain, uint64(s.now().Add(ttl).Unix()))
	plain = append(plain, state...)
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	_, _ = rand.Read(nonce)
	return prefix + base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, b.aad()))
}

// Open returns the worker's state sealed for b, or [ErrInvalid].
func (s *Sealer) Open(b Binding, sealed string) ([]byte, error) {
	raw, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return nil, ErrInvalid
	}
	ct, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || len(ct) < s.aead.NonceSize()+s.aead.Overhead()+8 {
		return nil, ErrInvalid
	}
	ns := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, ct[:ns], ct[ns:], b.aad())
	if err != nil {
		return nil, ErrInvalid
	}
	if exp := time.Unix(int64(binary.BigEndian.Uint64(plain[:8])), 0); !s.now().Before(exp) {
		return nil, fmt.Errorf("%w: it expired at %s; call again without input_responses", ErrInvalid, exp.UTC().Format(time.RFC3339))
	}
	return plain[8:], nil
}

// RandomKey returns a new random key.
func RandomKey() []byte {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k)
	return k
}

// ReadKeyFile reads a key file: exactly [KeySize] raw bytes, or their
// base64 or hex text (surrounding white space ignored).
func ReadKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("clientinput: key file: %w", err)
	}
	if len(b) == KeySize {
		return b, nil
	}
	text := strings.TrimSpace(string(b))
	for _, dec := range []func(string) ([]byte, error){base64.StdEncoding.DecodeString, base64.RawURLEncoding.DecodeString, hex.DecodeString} {
		if k, err := dec(text); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("clientinput: key file %s: want %d bytes (raw, base64 or hex)", path, KeySize)
}

// DefaultBucket is the KV bucket holding the shared key.
const DefaultBucket = "toolfleet_input_key"

// keyName is the key's entry in the bucket.
const keyName = "aes256gcm.v1"

// SharedKey returns the key every gateway replica shares through the KV
// bucket kc (created when missing): the first replica to ask creates it
// atomically, every other one reads it.
func SharedKey(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig) ([]byte, error) {
	kv, err := js.KeyValue(ctx, kc.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, kc)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, kc.Bucket) // another replica made it meanwhile
		}
	}
	if err != nil {
		return nil, fmt.Errorf("clientinput: bucket %s: %w", kc.Bucket, err)
	}
	if _, err := kv.Create(ctx, keyName, RandomKey()); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("clientinput: bucket %s: create the key: %w", kc.Bucket, err)
	}
	e, err := kv.Get(ctx, keyName)
	if err != nil {
		return nil, fmt.Errorf("clientinput: bucket %s: read the key: %w", kc.Bucket, err)
	}
	if len(e.Value()) != KeySize {
		return nil, fmt.Errorf("clientinput: bucket %s holds a key of %d bytes, not %d", kc.Bucket, len(e.Value()), KeySize)
	}
	return e.Value(), nil
}
