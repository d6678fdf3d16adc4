package jsonerr

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{`{"a": 1,}`, "not valid JSON: line 1, column 9: unexpected '}': a key in double quotes was expected"},
		{"{\n  \"a\": }", "not valid JSON: line 2, column 8: unexpected '}': a value was expected"},
		{`{"a" 1}`, "not valid JSON: line 1, column 6: unexpected '1': ':' was expected after the key"},
		{`{"a": 1 "b": 2}`, "not valid JSON: line 1, column 9: unexpected '\"': ',' or '}' was expected after the value"},
		{`{"a": [1 2]}`, "not valid JSON: line 1, column 10: unexpected '2': ',' or ']' was expected after the element"},
		{`{"a": tru}`, "not valid JSON: line 1, column 10: unexpected '}': 'true' is misspelled"},
		{`{"a": "x`, "not valid JSON: line 1, column 9: the JSON ends before it is complete"},
		{`{"a": 1} {}`, "not valid JSON: line 1, column 10: more after the JSON value ended"},
		{``, "not valid JSON: empty: a JSON value was expected"},
		{`[1, 2]`, "line 1, column 1: unexpected token ["}, // valid JSON, not an object: protojson's reason, placed
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			err := protojson.Unmarshal([]byte(tt.in), &structpb.Struct{})
			if err == nil {
				t.Fatal("decoded")
			}
			got := Describe([]byte(tt.in), err).Error()
			if !strings.HasPrefix(got, tt.want) || strings.Contains(got, "proto:") {
				t.Fatalf("Describe = %q, want it to start with %q", got, tt.want)
			}
		})
	}
	if Describe([]byte(`{}`), nil) != nil {
		t.Fatal("no error described as one")
	}
}
