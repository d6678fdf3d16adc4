package idempotency

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

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
