package jsonq

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/itchyny/gojq"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
)

// TestGuardedLibraryAgreesWithGojq: the worker defines the regex family
// (and pick) again over its guarded builtins (guards.go); every answer must
// be gojq's own, for ordinary inputs and the corner cases (no match, empty
// matches, captures, flags, a replacement with several outputs).
func TestGuardedLibraryAgreesWithGojq(t *testing.T) {
	t.Parallel()
	svc := New(Config{})
	for _, q := range []string{
		`"a,b,,c" | [splits(",")]`,
		`"a1b22c333" | [splits("[0-9]+")]`,
		`"abc" | [splits("")]`,
		`"" | [splits(",")]`,
		`"AbAB" | [splits("b"; "i")]`,
		`"foo bar foo" | [match("foo"; "g") | .offset]`,
		`"foo bar" | [match(["(?<w>o+)", "g"]) | .captures[0].string]`,
		`"foo" | test("O"; "i"), test("x"), test(["f", null])`,
		`"xyz-123" | capture("(?<l>[a-z]+)-(?<n>[0-9]+)")`,
		`"a1b2" | [capture("(?<d>[0-9])"; "g")]`,
		`"test 123 abc 456" | [scan("[0-9]+")]`,
		`"a1b2" | [scan("([a-z])([0-9])")]`,
		`"aXbXc" | [scan("x"; "i")]`,
		`"aaa" | sub("a"; "b")`,
		`"aaa" | gsub("a"; "b")`,
		`"abc" | gsub(""; "-")`,
		`"abc" | sub("(?<x>b)"; "[\(.x)]")`,
		`"abab" | [gsub("(?<x>a)"; "1", "2")]`,
		`"abab" | [sub("a"; "1", "2")]`,
		`"no match" | gsub("z"; "y")`,
		`"AaA" | gsub("a"; "-"; "i")`,
		`"a,b" | split(","; null)`,
		`{"a": {"b": 1, "c": 2}, "d": 3} | pick(.a.b)`,
		`[1, [2, 3]] | pick(.[1][0])`,
	} {
		t.Run(q, func(t *testing.T) {
			t.Parallel()
			want := plainGojq(t, q)
			resp, err := svc.Query(t.Context(), &jsonqv1.QueryRequest{Query: q, Input: docJSON(`null`)})
			if err != nil {
				t.Fatalf("worker: %v", err)
			}
			if got := resultsJSON(t, resp); got != want {
				t.Fatalf("worker %s, gojq %s", got, want)
			}
		})
	}
}

// plainGojq runs q with gojq alone, as a JSON array of its results, spaced
// as resultsJSON spaces the worker's (not at all).
func plainGojq(t *testing.T, q string) string {
	t.Helper()
	parsed, err := gojq.Parse(q)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	iter := parsed.Run(nil)
	for {
		v, ok := iter.Next()
		if !ok {
			break
		}
		if err, ok := v.(error); ok {
			t.Fatalf("gojq: %v", err)
		}
		out = append(out, v)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), "")
}
