package wire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// TestDocumentedRequests parses request bodies shaped like each provider's
// documentation, checks the canonical result, and checks that rendering it
// and parsing again is a fixpoint (wire → canonical → wire → canonical).
func TestDocumentedRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		format     Format
		wantRoles  []toolfleetv1.Role
		wantChoice llm.ToolChoice
		wantResult string
		wantError  bool
	}{
		{OpenAIChat{}, []toolfleetv1.Role{1, 2, 3, 4}, llm.ToolChoice{Mode: llm.ToolChoiceAuto}, "18°C and sunny", false},
		{OpenAIResponses{}, []toolfleetv1.Role{2, 3, 4}, llm.ToolChoice{Mode: llm.ToolChoiceTool, Name: "get_weather"}, "18°C and sunny", false},
		{Anthropic{}, []toolfleetv1.Role{1, 2, 3, 4}, llm.ToolChoice{Mode: llm.ToolChoiceRequired}, "ConnectionError: the weather service API is not available (HTTP 500)", true},
		{Gemini{}, []toolfleetv1.Role{1, 2, 3, 4}, llm.ToolChoice{Mode: llm.ToolChoiceTool, Name: "schedule_meeting"}, `{"meeting_id":"m-42","status":"booked"}`, false},
		{Bedrock{}, []toolfleetv1.Role{1, 2, 3, 4}, llm.ToolChoice{Mode: llm.ToolChoiceAuto}, `{"artist":"8 Storey Hike","song":"Elemental Hotel"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.format.Name(), func(t *testing.T) {
			t.Parallel()
			req, err := tt.format.ParseRequest(convtest.ReadTestdata(t, tt.format.Name()+"/documented_request.json"))
			if err != nil {
				t.Fatal(err)
			}
			var roles []toolfleetv1.Role
			var result *toolfleetv1.ToolResult
			for _, m := range req.Messages {
				roles = append(roles, m.GetRole())
				for _, p := range m.GetParts() {
					if r := p.GetToolResult(); r != nil {
						result = r
					}
				}
			}
			if len(roles) != len(tt.wantRoles) {
				t.Fatalf("roles = %v, want %v", roles, tt.wantRoles)
			}
			for i := range roles {
				if roles[i] != tt.wantRoles[i] {
					t.Fatalf("roles = %v, want %v", roles, tt.wantRoles)
				}
			}
			if req.ToolChoice != tt.wantChoice {
				t.Errorf("tool choice = %+v, want %+v", req.ToolChoice, tt.wantChoice)
			}
			if result.GetContent() != tt.wantResult || result.GetIsError() != tt.wantError || result.GetName() == "" || result.GetCallId() == "" {
				t.Errorf("result = %v, want %q (error %v) with name and call id", result, tt.wantResult, tt.wantError)
			}
			if len(req.Tools) != 1 || req.Tools[0].GetInputSchema() == nil {
				t.Errorf("tools = %v", req.Tools)
			}
			body, err := tt.format.RenderRequest(req)
			if err != nil {
				t.Fatal(err)
			}
			again, err := tt.format.ParseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			assertMessages(t, req.Messages, again.Messages)
			if again.ToolChoice != req.ToolChoice || again.MaxTokens != req.MaxTokens || !proto.Equal(again.Tools[0], req.Tools[0]) {
				t.Errorf("request fields changed on the second trip: %+v vs %+v", again, req)
			}
		})
	}
}

// TestDocumentedResponsesRoundTrip checks parse → render → parse is a
// fixpoint for every documented response fixture.
func TestDocumentedResponsesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, f := range Formats() {
		t.Run(f.Name(), func(t *testing.T) {
			t.Parallel()
			msg, err := f.ParseResponse(convtest.ReadTestdata(t, f.Name()+"/documented_response.json"))
			if err != nil {
				t.Fatal(err)
			}
			body, err := f.RenderResponse(msg)
			if err != nil {
				t.Fatal(err)
			}
			again, err := f.ParseResponse(body)
			if err != nil {
				t.Fatal(err)
			}
			assertMessages(t, []*toolfleetv1.Message{msg}, []*toolfleetv1.Message{again})
		})
	}
}
