package jsonq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

func docJSON(s string) *jsonqv1.QueryRequest_DocumentJson {
	return &jsonqv1.QueryRequest_DocumentJson{DocumentJson: s}
}

func mustValue(t *testing.T, v any) *structpb.Value {
	t.Helper()
	pv, err := structpb.NewValue(v)
	if err != nil {
		t.Fatalf("NewValue: %v", err)
	}
	return pv
}

// resultsJSON renders results as one JSON array, for compact comparisons.
func resultsJSON(t *testing.T, resp *jsonqv1.QueryResponse) string {
	t.Helper()
	b, err := protojson.Marshal(structpb.NewListValue(&structpb.ListValue{Values: resp.GetResults()}))
	if err != nil {
		t.Fatalf("marshal results: %v", err)
	}
	// protojson's spacing is deliberately unstable; compare without it.
	return strings.Join(strings.Fields(string(b)), "")
}

func TestQuery(t *testing.T) {
	t.Parallel()
	svc := New(Config{})
	tests := []struct {
		name          string
		req           *jsonqv1.QueryRequest
		want          string // results as one JSON array
		wantCount     int    // instead of want: just the number of results
		wantTruncated bool
	}{
		{
			name: "select from JSON text",
			req: &jsonqv1.QueryRequest{
				Query: "[.items[] | select(.price > 10) | .name]",
				Input: docJSON(`{"items": [{"name": "a", "price": 5}, {"name": "b", "price": 12}, {"name": "c", "price": 30}]}`),
			},
			want: `[["b","c"]]`,
		},
		{
			name: "structured document and variables",
			req: &jsonqv1.QueryRequest{
				Query:     "map(select(. > $min)) | length, $label",
				Input:     &jsonqv1.QueryRequest_Document{Document: mustValue(t, []any{1, 5, 9})},
				Variables: map[string]*structpb.Value{"min": structpb.NewNumberValue(4), "label": structpb.NewStringValue("big")},
			},
			want: `[2,"big"]`,
		},
		{
			name: "several results from a stream of documents",
			req:  &jsonqv1.QueryRequest{Query: ".a", Input: docJSON(`{"a": 1} {"a": "x"}` + "\n" + `{"a": null}`)},
			want: `[1,"x",null]`,
		},
		{
			name: "big integers keep their digits while in jq",
			req:  &jsonqv1.QueryRequest{Query: ".id | tostring", Input: docJSON(`{"id": 12345678901234567890123}`)},
			want: `["12345678901234567890123"]`,
		},
		{
			name: "NaN and infinity become JSON",
			req:  &jsonqv1.QueryRequest{Query: "nan, infinite, -infinite", Input: docJSON(`null`)},
			want: `[null,1.7976931348623157e+308,-1.7976931348623157e+308]`,
		},
		{
			name: "the environment is not visible",
			req:  &jsonqv1.QueryRequest{Query: "$ENV, env", Input: docJSON(`null`)},
			want: `[{},{}]`,
		},
		{
			name: "no results",
			req:  &jsonqv1.QueryRequest{Query: ".[] | select(. > 100)", Input: docJSON(`[1, 2]`)},
			want: `[]`,
		},
		{
			name: "halt stops quietly",
			req:  &jsonqv1.QueryRequest{Query: "1, halt, 2", Input: docJSON(`null`)},
			want: `[1]`,
		},
		{
			name:          "max_results truncates",
			req:           &jsonqv1.QueryRequest{Query: "range(10)", Input: docJSON(`null`), MaxResults: 3},
			want:          `[0,1,2]`,
			wantTruncated: true,
		},
		{
			name: "exactly max_results is not truncated",
			req:  &jsonqv1.QueryRequest{Query: "range(3)", Input: docJSON(`null`), MaxResults: 3},
			want: `[0,1,2]`,
		},
		{
			name:          "default result limit",
			req:           &jsonqv1.QueryRequest{Query: "range(1000000000)", Input: docJSON(`null`)},
			wantCount:     DefaultMaxResults,
			wantTruncated: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := svc.Query(t.Context(), tt.req)
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			if tt.wantCount > 0 {
				if len(resp.GetResults()) != tt.wantCount {
					t.Errorf("got %d results, want %d", len(resp.GetResults()), tt.wantCount)
				}
			} else if got := resultsJSON(t, resp); got != tt.want {
				t.Errorf("results = %s, want %s", got, tt.want)
			}
			if resp.GetTruncated() != tt.wantTruncated {
				t.Errorf("truncated = %v, want %v", resp.GetTruncated(), tt.wantTruncated)
			}
		})
	}
}

func TestQueryErrors(t *testing.T) {
	t.Parallel()
	small := New(Config{MaxInputBytes: 64, MaxOutputBytes: 64})
	// Only runaway queries meet the short deadline; other cases must not race it.
	impatient := New(Config{Timeout: 300 * time.Millisecond})
	tests := []struct {
		name     string
		svc      *Service
		req      *jsonqv1.QueryRequest
		want     string
		wantHint bool
	}{
		{
			name:     "syntax error points at the token",
			req:      &jsonqv1.QueryRequest{Query: ".items[] | select(.price >)", Input: docJSON(`{}`)},
			want:     `invalid jq query: unexpected token ")" at byte 27, near ".items[] | select(.price >)"`,
			wantHint: true,
		},
		{
			name:     "unknown function",
			req:      &jsonqv1.QueryRequest{Query: "frobnicate(1)", Input: docJSON(`{}`)},
			want:     "invalid jq query: function not defined: frobnicate/1",
			wantHint: true,
		},
		{
			name:     "undefined variable",
			req:      &jsonqv1.QueryRequest{Query: "$missing", Input: docJSON(`{}`)},
			want:     "invalid jq query: variable not defined: $missing",
			wantHint: true,
		},
		{
			name:     "input is not available",
			req:      &jsonqv1.QueryRequest{Query: "input", Input: docJSON(`{}`)},
			want:     "invalid jq query: input(s)/0 is not allowed",
			wantHint: true,
		},
		{
			name:     "runtime type error",
			req:      &jsonqv1.QueryRequest{Query: ".[] | .name", Input: docJSON(`[{"name": "a"}, 3]`)},
			want:     "jq error after 1 results: expected an object but got: number (3)",
			wantHint: true,
		},
		{
			name:     "error raised by the query",
			req:      &jsonqv1.QueryRequest{Query: `error("no such user")`, Input: docJSON(`{}`)},
			want:     "jq error after 0 results: no such user",
			wantHint: true,
		},
		{
			name:     "invalid document_json",
			req:      &jsonqv1.QueryRequest{Query: ".", Input: docJSON(`{"a": }`)},
			want:     "documentJson is not valid JSON (after 0 values",
			wantHint: true,
		},
		{
			name: "empty document_json",
			req:  &jsonqv1.QueryRequest{Query: ".", Input: docJSON(" \n")},
			want: "documentJson is empty",
		},
		{
			name: "missing document",
			req:  &jsonqv1.QueryRequest{Query: "."},
			want: "no document",
		},
		{
			name:     "document text over the input cap",
			svc:      small,
			req:      &jsonqv1.QueryRequest{Query: ".", Input: docJSON(`"` + strings.Repeat("x", 100) + `"`)},
			want:     "the document is 102 bytes, more than the limit of 64",
			wantHint: true,
		},
		{
			name:     "structured document over the input cap",
			svc:      small,
			req:      &jsonqv1.QueryRequest{Query: ".", Input: &jsonqv1.QueryRequest_Document{Document: structpb.NewStringValue(strings.Repeat("x", 100))}},
			want:     "the document is 102 bytes, more than the limit of 64",
			wantHint: true,
		},
		{
			name:     "first result over the output cap",
			svc:      small,
			req:      &jsonqv1.QueryRequest{Query: `"y" * 100`, Input: docJSON(`null`)},
			want:     "the first result is 102 bytes of JSON, more than the limit of 64",
			wantHint: true,
		},
		{
			name:     "endless recursion is stopped by the deadline",
			svc:      impatient,
			req:      &jsonqv1.QueryRequest{Query: "def f: f; f", Input: docJSON(`null`)},
			want:     "the query ran longer than 300ms and was stopped after 0 results",
			wantHint: true,
		},
		{
			name:     "huge array is stopped by the deadline",
			svc:      impatient,
			req:      &jsonqv1.QueryRequest{Query: "[range(1e9)] | length", Input: docJSON(`null`)},
			want:     "the query ran longer than 300ms",
			wantHint: true,
		},
		{
			name:     "too deeply nested result",
			req:      &jsonqv1.QueryRequest{Query: "reduce range(2000) as $i (0; [.])", Input: docJSON(`null`)},
			want:     "result 1 cannot be returned: it is nested more than 1000 levels deep",
			wantHint: true,
		},
		{
			name:     "a query that fills the heap is stopped",
			svc:      New(Config{Timeout: 20 * time.Second, MaxQueryBytes: 1}),
			req:      &jsonqv1.QueryRequest{Query: "[range(1e9)] | length", Input: docJSON(`null`)},
			want:     "the query used too much memory and was stopped after 0 results",
			wantHint: true,
		},
		{
			name:     "endless loop is stopped by the deadline",
			svc:      impatient,
			req:      &jsonqv1.QueryRequest{Query: "last(repeat(1))", Input: docJSON(`null`)},
			want:     "the query ran longer than 300ms",
			wantHint: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := tt.svc
			if svc == nil {
				svc = New(Config{})
			}
			_, err := svc.Query(t.Context(), tt.req)
			te, ok := tool.AsToolError(err)
			if !ok {
				t.Fatalf("err = %v (%T), want an execution error", err, err)
			}
			if !strings.HasPrefix(te.GetMessage(), tt.want) {
				t.Errorf("message = %q, want it to start with %q", te.GetMessage(), tt.want)
			}
			if hint := te.GetAdditionalPromptContent(); (hint != "") != tt.wantHint {
				t.Errorf("hint = %q, want a hint: %v", hint, tt.wantHint)
			}
		})
	}
}

func TestQueryOutputCapTruncates(t *testing.T) {
	t.Parallel()
	svc := New(Config{MaxOutputBytes: 10})
	// Each result encodes to 3 bytes ("a"); three fit in 10 bytes, the fourth does not.
	resp, err := svc.Query(t.Context(), &jsonqv1.QueryRequest{Query: `"a", "b", "c", "d", "e"`, Input: docJSON(`null`)})
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if got := resultsJSON(t, resp); got != `["a","b","c"]` || !resp.GetTruncated() {
		t.Errorf("results = %s truncated=%v, want [\"a\",\"b\",\"c\"] truncated", got, resp.GetTruncated())
	}
}

// The caller's cancellation is reported as such, not as the query's fault.
func TestQueryCallerCancelled(t *testing.T) {
	t.Parallel()
	svc := New(Config{Timeout: time.Minute})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := svc.Query(ctx, &jsonqv1.QueryRequest{Query: "def f: f; f", Input: docJSON(`null`)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
