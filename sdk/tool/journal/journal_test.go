package journal

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzDecode: a bucket value (which another version, or a corrupted store,
// may have written) decodes or fails with ErrBadRecord; a decoded record
// encodes back to the same value.
func FuzzDecode(f *testing.F) {
	dg := Digest{1, 2, 3}
	f.Add([]byte{})
	for _, k := range []Kind{KindLock, KindStarted, KindFinished, KindResult, KindTooLarge, KindUnknown} {
		f.Add(Encode(k, dg, []byte("payload")))
	}
	f.Add([]byte{'R'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("Decode: untyped error %v", err)
			}
			return
		}
		if !r.HasDigest {
			if len(b) != 0 {
				t.Fatalf("a non-empty value decoded without a digest: %q", b)
			}
			return
		}
		if again := Encode(r.Kind, r.Digest, r.Payload); !bytes.Equal(again, b) {
			t.Fatalf("round trip of %q: %q", b, again)
		}
	})
}

func TestDecode(t *testing.T) {
	dg := Digest{9}
	r, err := Decode(Encode(KindStarted, dg, []byte("worker-1")))
	if err != nil || r.Kind != KindStarted || r.Digest != dg || string(r.Payload) != "worker-1" || !r.HasDigest {
		t.Fatalf("Decode = %+v, %v", r, err)
	}
	if r, err := Decode(nil); err != nil || r.Kind != KindLock || r.HasDigest {
		t.Fatalf("an older gateway's empty lock: %+v %v", r, err)
	}
	for _, bad := range [][]byte{{'R'}, append([]byte{'?'}, make([]byte, 32)...)} {
		if _, err := Decode(bad); !errors.Is(err, ErrBadRecord) {
			t.Fatalf("Decode(%q) = %v, want ErrBadRecord", bad, err)
		}
	}
}

func TestClaimRoundTrip(t *testing.T) {
	c := Claim{Subject: "$KV.toolfleet_calls.KV.abc-_", Revision: 42, Digest: Digest{1, 2, 255}}
	got, err := ParseClaim(c.String())
	if err != nil || got != c {
		t.Fatalf("ParseClaim(%q) = %+v, %v", c.String(), got, err)
	}
	for _, bad := range []string{"", "x 1 00", "$KV.b.k 0 " + strings.Repeat("00", 32), "$KV.b.k 1 zz",
		"$KV.b.> 1 " + strings.Repeat("00", 32), "$KV.b.k 1 " + strings.Repeat("00", 31), "$KV.b.k  1 " + strings.Repeat("00", 32)} {
		if _, err := ParseClaim(bad); !errors.Is(err, ErrBadClaim) {
			t.Errorf("ParseClaim(%q) = %v, want ErrBadClaim", bad, err)
		}
	}
}

func TestParseAck(t *testing.T) {
	for ack, want := range map[string]error{
		`{"stream":"KV_toolfleet_calls","seq":7}`:                                                                              nil,
		`{"stream":"KV_toolfleet_calls","domain":"hub","seq":7}`:                                                               nil,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"KV_toolfleet_calls","seq":0}`: ErrMoved,
		`{"error":{"code":503,"err_code":10077,"description":"maximum bytes exceeded"}}`:                                       ErrFull,
		`{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`:                         ErrTooLarge,
	} {
		seq, err := ParseAck([]byte(ack))
		if want == nil && (err != nil || seq != 7) || want != nil && !errors.Is(err, want) {
			t.Errorf("ParseAck(%s) = %d, %v; want %v", ack, seq, err, want)
		}
	}
	for _, bad := range []string{``, `not json`, `{"stream":"x"}`, `{"error":{"code":503}}`} {
		if _, err := ParseAck([]byte(bad)); err == nil {
			t.Errorf("ParseAck(%s) accepted", bad)
		}
	}
}
