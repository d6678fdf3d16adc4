package llm

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

func FuzzDecodeArguments(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `"{\"a\":1}"`, `""`, ``, `null`, `[1]`, `"{\"a\":"`, `{"a":{"b":[true,null,"x"]}}`, `{"a":1e400}`, `{"id":9007199254740993,"n":[-18446744073709551615,1e20,0.1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := DecodeArguments("F (c1)", raw)
		if err != nil {
			var ae *ArgumentsError
			if !errors.As(err, &ae) || ae.Call != "F (c1)" {
				t.Fatalf("error does not name the call: %v", err)
			}
			return
		}
		again, err := DecodeArguments("F (c1)", canon.EncodeArguments(args))
		if err != nil {
			t.Fatalf("re-decode of %s: %v", canon.EncodeArguments(args), err)
		}
		if !proto.Equal(args, again) {
			t.Fatalf("re-decode differs: %v vs %v", args, again)
		}
	})
}
