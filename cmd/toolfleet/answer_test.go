package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
)

// TestAnswerContent: --json and --field read into the answer's content, and
// a mistake is named before anything is sent.
func TestAnswerContent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		json    string
		fields  []string
		want    string // the content's JSON, or the error's words
		wantErr bool
	}{
		{"json", `{"name":"Ada","age":36}`, nil, `{"age":36,"name":"Ada"}`, false},
		{"fields typed", "", []string{"name=Ada", "age=36", "ok=true", `zip="01234"`, "note=a=b"}, `{"age":36,"name":"Ada","note":"a=b","ok":true,"zip":"01234"}`, false},
		{"both", `{}`, []string{"a=b"}, "not both", true},
		{"neither", "", nil, "--json", true},
		{"not an object", `[1]`, nil, "not a JSON object", true},
		{"field without =", "", []string{"name"}, "want k=v", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := answerContent(tt.json, tt.fields)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("answerContent: %v, want an error saying %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := protojson.MarshalOptions{}.Marshal(got)
			if compact(string(b)) != tt.want {
				t.Fatalf("content %s, want %s", b, tt.want)
			}
		})
	}
}

func compact(s string) string { return strings.Join(strings.Fields(s), "") }
