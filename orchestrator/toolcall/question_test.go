package toolcall_test

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
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

// TestConnectionRound: a ConnectionRequired refusal becomes a round of one
// connection item that keeps the provider and scopes but never the
// authorization URL (single-use state), and the item takes accept, decline
// or cancel without content.
func TestConnectionRound(t *testing.T) {
	t.Parallel()
	const url = "https://gw.example/connections/start?state=secret-state-123"
	o, err := toolcall.Classify(t.Context(), nil, &client.ServerError{Code: codes.FailedPrecondition, Message: "connect first",
		ConnectionRequired: &toolfleetv1.ConnectionRequired{Provider: "github", Scopes: []string{"repo", "read:user"}, AuthorizationUrl: url}})
	if err != nil || o.Kind != toolcall.KindInput || o.Asked.Connect() != "github" {
		t.Fatalf("Classify = %+v, %v: want a connection round for github", o, err)
	}
	b, _ := json.Marshal(o.Asked)
	if strings.Contains(string(b), "secret-state") || strings.Contains(string(b), "https://") || !strings.Contains(string(b), "read:user") {
		t.Fatalf("the round kept %s: want provider and scopes, never the URL", b)
	}
	// A refusal naming no provider stays a refusal.
	if o, _ := toolcall.Classify(t.Context(), nil, &client.ServerError{Code: codes.FailedPrecondition, ConnectionRequired: &toolfleetv1.ConnectionRequired{}}); o.Kind != toolcall.KindRefused {
		t.Fatalf("kind %q for a connection without provider, want refused", o.Kind)
	}
	q := toolcall.Question{CallID: "r/1/0", Key: toolcall.ConnectKey, Method: toolcall.MethodConnect, Provider: "github"}
	for _, tt := range []struct{ action, content, want string }{
		{"accept", "", ""},
		{"accept", "{}", ""},
		{"decline", "", ""},
		{"cancel", "", ""},
		{"accept", `{"token":"x"}`, "no content"},
		{"maybe", "", "accept (connected), decline or cancel"},
	} {
		err := toolcall.CheckReply(q, toolcall.Reply{CallID: q.CallID, Key: q.Key, Action: tt.action, ContentJSON: tt.content, Answerer: "bo"})
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("CheckReply(%s %s) = %v, want %q", tt.action, tt.content, err, tt.want)
		}
	}
	if msg := toolcall.ConnectMessage("github", []string{"repo"}); !strings.Contains(msg, "toolfleet connections connect github") {
		t.Errorf("message %q does not say how to connect", msg)
	}
}
