package idempotency

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// Only a plain success ack skips kv.Create; every other reply goes through it.
func TestIsPlainPubAck(t *testing.T) {
	for ack, want := range map[string]bool{
		`{"stream":"KV_toolfleet_calls","seq":7}`:                                                                              true,
		`{"stream":"KV_toolfleet_calls","domain":"hub","seq":7}`:                                                               true,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"KV_toolfleet_calls","seq":0}`: false,
		`{"stream":"KV_x","error":{"code":503}}`:                                                                               false,
		``:                                                                                                                     false,
		`not json`:                                                                                                             false,
	} {
		if got := isPlainPubAck([]byte(ack)); got != want {
			t.Errorf("isPlainPubAck(%s) = %v, want %v", ack, got, want)
		}
	}
}

// Keys of different principals, tools or ids never share a subject, even when
// their parts concatenate to the same text.
func TestKeySubject(t *testing.T) {
	keys := []Key{
		{"ana", "KV.Delete", "run/1/0"},
		{"bo", "KV.Delete", "run/1/0"},
		{"ana", "KV.Put", "run/1/0"},
		{"ana", "KV.Delete", "run/1/1"},
		{"anaKV.Delete", "", "run/1/0"},
		{"ana", "KV.Deleterun/1/0", ""},
	}
	seen := map[string]Key{}
	for _, k := range keys {
		s := k.subject()
		if other, dup := seen[s]; dup {
			t.Fatalf("%+v and %+v share subject %s", k, other, s)
		}
		seen[s] = k
	}
}

// The digest ignores key order and number spelling, and sees every value.
func TestDigestOf(t *testing.T) {
	in := func(js string) *structpb.Struct {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	d := func(js string) Digest {
		dg, err := DigestOf(in(js))
		if err != nil {
			t.Fatal(err)
		}
		return dg
	}
	if d(`{"a": 1, "b": 2}`) != d(`{"b": 2.0, "a": 1}`) {
		t.Error("same input, other order or spelling: digests differ")
	}
	if d(`{"a": 1, "b": 2}`) == d(`{"a": 50, "b": 50}`) {
		t.Error("other input: same digest")
	}
	if empty, err := DigestOf(nil); err != nil || empty != d(`{}`) {
		t.Error("nil input should digest as {}")
	}
}

func TestRecordRoundTrip(t *testing.T) {
	dg := Digest{1, 2, 3}
	resp := []byte{0x0a, 0x01, 'x'} // call_id "x"
	for _, tc := range []struct {
		value []byte
		kind  byte
	}{
		{encode(kindLock, dg, nil), kindLock},
		{encode(kindTooLarge, dg, nil), kindTooLarge},
		{encode(kindUnknown, dg, nil), kindUnknown},
		{encode(kindResult, dg, resp), kindResult},
	} {
		r, err := decode(tc.value)
		if err != nil || r.kind != tc.kind || r.digest != dg || !r.hasDigest {
			t.Fatalf("decode(%q) = %+v, %v", tc.value, r, err)
		}
		if tc.kind == kindResult && r.resp.GetCallId() != "x" {
			t.Fatalf("response %v", r.resp)
		}
	}
	if r, err := decode(nil); err != nil || r.kind != kindLock || r.hasDigest {
		t.Fatalf("an older gateway's empty lock: %+v %v", r, err)
	}
	for _, bad := range [][]byte{{'R'}, append([]byte{'?'}, make([]byte, 32)...), append(encode(kindResult, dg, nil), 0xff)} {
		if _, err := decode(bad); err == nil {
			t.Fatalf("decode(%q) accepted", bad)
		}
	}
}
