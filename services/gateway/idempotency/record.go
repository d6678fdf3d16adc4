package idempotency

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/sdk/tool/journal"
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

// Entry is the key's entry in the bucket ("<Toolkit>.<hash>"), for tools that
// read the journal (the reliability tests do).
func (k Key) Entry() string { return k.subject() }

// subject maps a key onto the KV key alphabet: "<Toolkit>.<hash>", so that a
// worker's NATS permissions can name its own toolkits ("$KV.toolfleet_calls.KV.>").
// The hashed parts are length-prefixed so that no two keys share a hash input
// ("a|b" + "c" vs "a" + "b|c").
func (k Key) subject() string {
	h := sha256.New()
	for _, part := range []string{k.Principal, k.Tool, k.CallID} {
		_, _ = fmt.Fprintf(h, "%d:%s", len(part), part)
	}
	sum := base64.RawURLEncoding.EncodeToString(h.Sum(nil))
	toolkit, _, _ := strings.Cut(k.Tool, ".")
	if toolkit == "" || strings.ContainsFunc(toolkit, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) {
		toolkit = "_"
	}
	return toolkit + "." + sum
}

// Digest is the SHA-256 of a call's canonical input.
type Digest = journal.Digest

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
