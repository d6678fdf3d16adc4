package toolcall_test

import (
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// TestCheckReply: a reply fits its question's schema and bounds, or is
// refused with words a person can act on.
func TestCheckReply(t *testing.T) {
	t.Parallel()
	q := toolcall.Question{CallID: "r/1/0", Key: "who", SchemaJSON: `{"type":"object","properties":{"name":{"type":"string","maxLength":5},` +
		`"age":{"type":"integer","minimum":0}},"required":["name"]}`}
	for _, tt := range []struct {
		name, action, content, want string
	}{
		{"fits", "accept", `{"name":"Ada","age":36}`, ""},
		{"decline", "decline", "", ""},
		{"cancel", "cancel", "", ""},
		{"missing required", "accept", `{"age":3}`, "name"},
		{"wrong type", "accept", `{"name":7}`, "name"},
		{"too long", "accept", `{"name":"Adalovelace"}`, "name"},
		{"not an object", "accept", `[1]`, "JSON object"},
		{"not JSON", "accept", `{`, "not JSON"},
		{"unknown action", "maybe", "", "accept, decline or cancel"},
		{"decline with content", "decline", `{"name":"x"}`, "no content"},
		{"huge", "accept", `{"name":"` + strings.Repeat("x", toolcall.MaxAnswerBytes) + `"}`, "at most"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := toolcall.CheckReply(q, toolcall.Reply{CallID: q.CallID, Key: q.Key, Action: tt.action, ContentJSON: tt.content, Answerer: "bo"})
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("CheckReply = %v, want %q", err, tt.want)
			}
		})
	}
	// A schema referencing a file is never read: no loader.
	ref := toolcall.Question{SchemaJSON: `{"$ref":"file:///etc/passwd"}`}
	if err := toolcall.CheckReply(ref, toolcall.Reply{Action: "accept", ContentJSON: `{}`, Answerer: "bo"}); err == nil {
		t.Fatal("a schema with a file $ref was used")
	}
}
