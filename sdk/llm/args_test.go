package llm

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
)

// bigArgs is a tool call's arguments as a model writes them: a 64-bit
// revision that float64 would round to 9007199254740992, the largest
// uint64, and numbers float64 holds exactly.
const bigArgs = `{"key":"k","revision":9007199254740993,"max":18446744073709551615,"neg":-9223372036854775807,"safe":9007199254740992,"ratio":0.25,"exp":1e3}`

// wantBig is how the canonical arguments carry bigArgs.
const wantBig = `{"exp":1000,"key":"k","max":"18446744073709551615","neg":"-9223372036854775807","ratio":0.25,"revision":"9007199254740993","safe":9007199254740992}`

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
