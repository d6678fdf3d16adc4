package llm

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
)

func TestExactNumber(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text    string
		want    string // JSON of the Value
		wantErr bool
	}{
		{"0", "0", false},
		{"-0", "-0", false},
		{"9007199254740992", "9007199254740992", false},
		{"9007199254740993", `"9007199254740993"`, false},
		{"-9007199254740993", `"-9007199254740993"`, false},
		{"100000000000000000000", "100000000000000000000", false},
		{"123456789012345678901234567890", `"123456789012345678901234567890"`, false},
		{"0.1", "0.1", false},
		{"1e400", "", true},
		{"-1e400", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			v, err := ExactNumber(tt.text)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ExactNumber(%s) = %v, want an error", tt.text, v)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := protojson.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.ReplaceAll(string(b), " ", ""); got != tt.want {
				t.Errorf("ExactNumber(%s) = %s, want %s", tt.text, got, tt.want)
			}
		})
	}
}
