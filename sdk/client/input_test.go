package client_test

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// TestInputOfTyped: typed Go slices, maps, nested structs and generated proto
// messages become the JSON object encoding/json (or protojson) would write.
func TestInputOfTyped(t *testing.T) {
	t.Parallel()
	type item struct {
		Name string `json:"name"`
		Qty  int    `json:"quantity,omitempty"`
	}
	type request struct {
		Title  string         `json:"title"`
		Tags   []string       `json:"tags"`
		Counts map[string]int `json:"counts"`
		Items  []item         `json:"items"`
	}
	tests := []struct {
		name  string
		input any
		want  string
	}{
		{"typed slice and map in a map", map[string]any{"tags": []string{"a", "b"}, "counts": map[string]int{"x": 1}, "n": 2},
			`{"counts":{"x":1},"n":2,"tags":["a","b"]}`},
		{"nested typed values", map[string]any{"items": []item{{"p", 3}}, "ids": []int64{7}, "m": map[string][]float64{"k": {1.5}}},
			`{"ids":[7],"items":[{"name":"p","quantity":3}],"m":{"k":[1.5]}}`},
		{"untyped map", map[string]any{"a": []any{1.0, "x"}, "b": map[string]any{"c": true}},
			`{"a":[1,"x"],"b":{"c":true}}`},
		{"struct with tags", request{Title: "t", Tags: []string{"a"}, Counts: map[string]int{"z": 0}, Items: []item{{Name: "i"}}},
			`{"counts":{"z":0},"items":[{"name":"i"}],"tags":["a"],"title":"t"}`},
		{"pointer to struct", &item{Name: "p"}, `{"name":"p"}`},
		{"typed map", map[string]string{"a": "b"}, `{"a":"b"}`},
		{"generated request", &calculatorv1.EvaluateRequest{Expression: "1+2"}, `{"expression":"1+2"}`},
		{"JSON text", `{"a": 1}`, `{"a":1}`},
		{"nil", nil, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := client.InputOf(tt.input)
			if err != nil {
				t.Fatalf("InputOf: %v", err)
			}
			b, err := protojson.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			if string(gb) != string(wb) {
				t.Fatalf("InputOf = %s, want %s", gb, wb)
			}
		})
	}
	for name, bad := range map[string]any{
		"not an object":    []string{"a"},
		"a channel inside": map[string]any{"c": make(chan int)},
		"a number":         42,
		"broken JSON":      `{"a":`,
	} {
		if _, err := client.InputOf(bad); err == nil || !strings.HasPrefix(err.Error(), "client: input") {
			t.Errorf("%s: err = %v, want a client: input error", name, err)
		}
	}
}

// TestValidationErrorSaysEachFieldOnce: the gateway's message already lists
// the field errors; neither the one-line nor the multi-line form repeats them.
func TestValidationErrorSaysEachFieldOnce(t *testing.T) {
	t.Parallel()
	fields := map[string]string{"title": "must be at least 1 character", "priority": "is required"}
	tests := []struct {
		name, message, wantError, wantText string
	}{
		{"gateway message", "invalid input: priority: is required; title: must be at least 1 character",
			"invalid input: priority: is required; title: must be at least 1 character",
			"invalid input:\n- priority: is required\n- title: must be at least 1 character"},
		{"own message", "the dates overlap",
			"invalid input: the dates overlap; priority: is required; title: must be at least 1 character",
			"invalid input: the dates overlap\n- priority: is required\n- title: must be at least 1 character"},
		{"message naming one field", "invalid input: title: must be at least 1 character (and more)",
			"invalid input: title: must be at least 1 character (and more); priority: is required",
			"invalid input: title: must be at least 1 character (and more)\n- priority: is required"},
	}
	for _, tt := range tests {
		ve := &client.ValidationError{Message: tt.message, ParameterErrors: fields}
		if got := ve.Error(); got != tt.wantError {
			t.Errorf("%s: Error() = %q, want %q", tt.name, got, tt.wantError)
		}
		if got := ve.Text(); got != tt.wantText {
			t.Errorf("%s: Text() = %q, want %q", tt.name, got, tt.wantText)
		}
	}
	if got := (&client.ValidationError{Message: "invalid input: x"}).Text(); got != "invalid input: x" {
		t.Errorf("no fields: Text() = %q", got)
	}
}
