package jsonsize

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzValues: Values never undercounts a valid JSON document (it is the bound
// servers trust before decoding) and stops early past the limit.
func FuzzValues(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2,3]`, `{"a":[{"b":"c,d[{"}]}`, `"\"[,{"`, `[[[[[]]]]]`, `{"a":1,"b":[true,null]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n := Values(b, 0)
		if n < 1 {
			t.Fatalf("Values = %d, want at least 1", n)
		}
		if limit := n - 1; limit > 0 {
			if got := Values(b, limit); got != limit+1 {
				t.Fatalf("Values(limit %d) = %d, want an early stop at %d", limit, got, limit+1)
			}
		}
		if !json.Valid(b) {
			return
		}
		if exact := count(t, b); exact > n {
			t.Fatalf("Values = %d, but %q holds %d values", n, b, exact)
		}
	})
}

// count counts b's values with encoding/json: every container, array
// element and object member once.
func count(t *testing.T, b []byte) int {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("valid JSON %q does not decode: %v", b, err)
	}
	return walk(v)
}

func walk(v any) int {
	n := 1
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			n += walk(e)
		}
	case map[string]any:
		for _, e := range v {
			n += walk(e)
		}
	}
	return n
}
