package idempotency

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Key identifies one idempotent call: who called, which tool, which call_id.
type Key struct {
	// Principal is the effective caller's subject (one fixed principal when auth is off).
	Principal string
	// Tool is "Toolkit.Tool" without the version, so that a retry still finds the
	// result after a new version of the tool is deployed.
	Tool string
	// CallID is the caller's call_id.
	CallID string
}

// subject maps a key onto the KV key alphabet. The parts are length-prefixed so
// that no two keys share a hash input ("a|b" + "c" vs "a" + "b|c").
func (k Key) subject() string {
	h := sha256.New()
	for _, part := range []string{k.Principal, k.Tool, k.CallID} {
		_, _ = fmt.Fprintf(h, "%d:%s", len(part), part)
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// Digest is the SHA-256 of a call's canonical input.
type Digest [sha256.Size]byte

// DigestOf returns the digest of an input object: its deterministic protobuf
// encoding (map keys sorted), so key order and JSON spelling ("1" vs "1.0") do not
// matter while any change of a value does.
func DigestOf(in *structpb.Struct) (Digest, error) {
	if in == nil {
		in = &structpb.Struct{}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(in)
	if err != nil {
		return Digest{}, fmt.Errorf("idempotency: encode input: %w", err)
	}
	return sha256.Sum256(b), nil
}

// Record kinds: the first byte of every value.
const (
	kindLock     byte = 'L'
	kindResult   byte = 'R'
	kindTooLarge byte = 'T'
	// kindUnknown: the call may have run on a worker that never answered.
	kindUnknown byte = 'U'
)

// headerLen is the kind byte plus the digest.
const headerLen = 1 + sha256.Size

// record is one decoded bucket value.
type record struct {
	kind   byte
	digest Digest
	// hasDigest is false for a lock written by an older gateway (an empty value).
	hasDigest bool
	resp      *toolfleetv1.CallToolResponse
}

func encode(kind byte, d Digest, resp []byte) []byte {
	b := make([]byte, 0, headerLen+len(resp))
	b = append(append(append(b, kind), d[:]...), resp...)
	return b
}

var errBadRecord = errors.New("idempotency: unreadable record")

func decode(b []byte) (record, error) {
	if len(b) == 0 {
		return record{kind: kindLock}, nil // an older gateway's lock
	}
	if len(b) < headerLen {
		return record{}, errBadRecord
	}
	r := record{kind: b[0], hasDigest: true}
	copy(r.digest[:], b[1:headerLen])
	switch r.kind {
	case kindLock, kindTooLarge, kindUnknown:
		return r, nil
	case kindResult:
		r.resp = &toolfleetv1.CallToolResponse{}
		if err := proto.Unmarshal(b[headerLen:], r.resp); err != nil {
			return record{}, fmt.Errorf("%w: %w", errBadRecord, err)
		}
		return r, nil
	}
	return record{}, errBadRecord
}
