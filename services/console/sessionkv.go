package console

import (
	"context"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// SharedSessions keeps the console's sessions in a JetStream KV bucket that
// every gateway replica reads, so a browser needs no affinity: it signs in
// on one replica and goes on on any other; signing out ends the session on
// all of them. Each value is sealed (AES-256-GCM with Key, bound to its
// key in the bucket): the bucket never holds a token in plaintext, and the
// key in the bucket is a hash of the cookie's id, so reading the bucket
// gives no cookie either.
type SharedSessions struct {
	// JetStream is the connection the bucket is reached through.
	JetStream jetstream.JetStream
	// Bucket is the bucket's configuration ([SessionBucket]).
	Bucket jetstream.KeyValueConfig
	// Key seals the sessions and the OIDC sign-in's flow cookie: 32 bytes,
	// the same on every replica ([SessionKey]).
	Key []byte
}

// SessionKeySize is the size of [SharedSessions.Key].
const SessionKeySize = 32

// SessionKey derives the sealing key from a secret the replicas share (a key
// file's content, the OIDC client secret, the dev JWT secret). Nil secret:
// a random key, which only this process can open (sessions then need
// affinity again).
func SessionKey(secret []byte) []byte {
	if len(secret) == 0 {
		key := make([]byte, SessionKeySize)
		_, _ = rand.Read(key) // never fails (crypto/rand)
		return key
	}
	key, err := hkdf.Key(sha256.New, secret, nil, "toolfleet console sessions v1", SessionKeySize)
	if err != nil { // only for an impossible length
		panic(err)
	}
	return key
}

// SessionBucket is the KV bucket of the console's sessions
// (jsassets.ConsoleSessions) sized by assets. Its max age bounds a value's
// life: a session is written at sign-in and at each token renewal and
// lasts at most the session lifetime.
func SessionBucket(assets jsassets.Config) jetstream.KeyValueConfig {
	return assets.Settings(jsassets.ConsoleSessions).KeyValue(jetstream.KeyValueConfig{
		Bucket:       jsassets.ConsoleSessions.Name,
		Description:  "toolfleet console: signed-in sessions (sealed)",
		History:      1,
		MaxValueSize: maxSessionValue,
	})
}

// maxSessionValue bounds one sealed session (tokens included).
const maxSessionValue = 16 << 10

// sessionRecord is what the bucket holds of a session, sealed.
type sessionRecord struct {
	Expires     time.Time `json:"exp"`
	Subject     string    `json:"sub"`
	Scopes      []string  `json:"scp,omitempty"`
	Token       string    `json:"tok,omitempty"`
	OIDC        bool      `json:"oidc,omitempty"`
	Refresh     string    `json:"ref,omitempty"`
	TokenExpiry time.Time `json:"tex,omitzero"`
	Renewing    time.Time `json:"ren,omitzero"`
}

// kvSessions is the shared store. The bucket is made on first use, so the
// console starts while NATS is away (its pages then answer 503).
type kvSessions struct {
	js   jetstream.JetStream
	kc   jetstream.KeyValueConfig
	seal *sealer

	mu sync.Mutex
	kv jetstream.KeyValue
}

func newKVSessions(c SharedSessions) (*kvSessions, error) {
	if c.JetStream == nil || c.Bucket.Bucket == "" {
		return nil, errors.New("console: shared sessions need JetStream and a bucket")
	}
	if len(c.Key) != SessionKeySize {
		return nil, fmt.Errorf("console: the session key is %d bytes, not %d", len(c.Key), SessionKeySize)
	}
	seal, err := newKeySealer(c.Key, "toolfleet console session v1")
	if err != nil {
		return nil, err
	}
	if c.Bucket.MaxValueSize <= 0 || c.Bucket.MaxValueSize > maxSessionValue {
		c.Bucket.MaxValueSize = maxSessionValue
	}
	return &kvSessions{js: c.JetStream, kc: c.Bucket, seal: seal}, nil
}

func (k *kvSessions) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kv != nil {
		return k.kv, nil
	}
	kv, err := jsassets.EnsureKeyValue(ctx, k.js, k.kc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errStore, err)
	}
	k.kv = kv
	return kv, nil
}

// keyOf is the bucket key of session id.
func keyOf(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

func (k *kvSessions) load(ctx context.Context, id string) (*session, error) {
	kv, err := k.bucket(ctx)
	if err != nil {
		return nil, err
	}
	key := keyOf(id)
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errStore, err)
	}
	var rec sessionRecord
	if err := k.seal.openBytes(e.Value(), []byte(key), &rec); err != nil {
		return nil, errNoSession // sealed with another key: not a session here
	}
	return &session{id: id, csrf: csrfFor(id), expires: rec.Expires, signedIn: true, subject: rec.Subject,
		scopes: rec.Scopes, token: rec.Token, oidc: rec.OIDC, refresh: rec.Refresh, tokenExpiry: rec.TokenExpiry,
		renewing: rec.Renewing, rev: e.Revision()}, nil
}

func (k *kvSessions) value(ss *session) ([]byte, error) {
	b, err := k.seal.sealBytes(sessionRecord{Expires: ss.expires, Subject: ss.subject, Scopes: ss.scopes, Token: ss.token,
		OIDC: ss.oidc, Refresh: ss.refresh, TokenExpiry: ss.tokenExpiry, Renewing: ss.renewing}, []byte(keyOf(ss.id)))
	if err != nil {
		return nil, err
	}
	if len(b) > int(k.kc.MaxValueSize) {
		return nil, fmt.Errorf("%w: a session of %d bytes (its tokens are too large)", errFull, len(b))
	}
	return b, nil
}

func (k *kvSessions) create(ctx context.Context, ss *session) error {
	kv, err := k.bucket(ctx)
	if err != nil {
		return err
	}
	b, err := k.value(ss)
	if err != nil {
		return err
	}
	rev, err := kv.Create(ctx, keyOf(ss.id), b)
	if err != nil {
		return storeErr(err)
	}
	ss.rev = rev
	return nil
}

func (k *kvSessions) swap(ctx context.Context, ss *session) error {
	kv, err := k.bucket(ctx)
	if err != nil {
		return err
	}
	b, err := k.value(ss)
	if err != nil {
		return err
	}
	rev, err := kv.Update(ctx, keyOf(ss.id), b, ss.rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return errConflict
	}
	if err != nil {
		return storeErr(err)
	}
	ss.rev = rev
	return nil
}

func (k *kvSessions) remove(ctx context.Context, id string) error {
	kv, err := k.bucket(ctx)
	if err != nil {
		return err
	}
	if err := kv.Purge(ctx, keyOf(id)); err != nil {
		return fmt.Errorf("%w: %w", errStore, err)
	}
	return nil
}

// storeErr tells a full bucket from one that does not answer. NATS says
// "full" only in its refusal's text (err_code 10077 covers more).
func storeErr(err error) error {
	if strings.Contains(err.Error(), "maximum bytes exceeded") || strings.Contains(err.Error(), "maximum messages exceeded") {
		return fmt.Errorf("%w: %w", errFull, err)
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%w: %w", errConflict, err)
	}
	return fmt.Errorf("%w: %w", errStore, err)
}
