package idempotency

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
)

// FuzzDecodeRecord: a bucket value (which another gateway version, or a
// corrupted store, may have written) decodes or fails with errBadRecord; a
// decoded record encodes back to a value that decodes to the same record.
func FuzzDecodeRecord(f *testing.F) {
	dg := Digest{1, 2, 3}
	f.Add([]byte{})
	f.Add(encode(kindLock, dg, nil))
	f.Add(encode(kindTooLarge, dg, nil))
	f.Add(encode(kindUnknown, dg, nil))
	f.Add(encode(kindResult, dg, []byte{0x0a, 0x01, 'x'}))
	f.Add(append(encode(kindResult, dg, nil), 0xff))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decode(b)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("decode: untyped error %v", err)
			}
			return
		}
		if !r.hasDigest {
			return // an older gateway's empty lock
		}
		var resp []byte
		if r.kind == kindResult {
			opts := proto.MarshalOptions{Deterministic: true}
			if resp, err = opts.Marshal(r.resp); err != nil {
				t.Fatalf("a decoded response does not encode: %v", err)
			}
		}
		again, err := decode(encode(r.kind, r.digest, resp))
		if err != nil || again.kind != r.kind || again.digest != r.digest || !proto.Equal(again.resp, r.resp) {
			t.Fatalf("round trip of %+v: %+v, %v", r, again, err)
		}
	})
}
