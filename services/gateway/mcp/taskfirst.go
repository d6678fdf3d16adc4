package mcp

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/sdk/tool"
)

// A tool's questions and MCP tasks (docs/mcp.md "Tasks").
//
// askFirst: a tool whose contract says it needs its caller's input
// (client_input) asks before it does its work. At 2026-07-28 its first
// round is answered inline, as the tasks extension composes with
// multi-round-trip requests: the tools/call is answered with input_required
// (no task yet), and the call that carries the answers (inputResponses and
// the echoed requestState) becomes the task, whose first call of the tool
// carries them. Questions a tool asks later, inside the task, wait in the
// task (input_required, answered with tasks/update), but only for a client
// that declared the elicitation capability: for any other client the tool
// is told its question was declined, and no inputRequests it could not
// answer reach it.

// taskAnswers reads the answers a task-creating tools/call carries: the
// tool's first round, answered inline. A client that answers must have
// declared what the tool needs (else -32021, as a direct call is refused);
// each answer must be a JSON object; the approval answer is not the tool's.
func taskAnswers(p taskParams, rev revision, needs []string) (map[string]*structpb.Struct, string, *jsonrpc.Error) {
	if len(p.InputResponses) == 0 {
		return nil, "", nil
	}
	if slices.ContainsFunc(needs, func(c string) bool { return !rev.can(c) }) {
		data, _ := json.Marshal(map[string]any{"requiredCapabilities": requiredCapabilities(needs)})
		return nil, "", &jsonrpc.Error{Code: sdk.CodeMissingRequiredClientCapabilities, Data: data,
			Message: fmt.Sprintf("%s asks its caller for input (%s): declare the client capabilities %s to call it as a task",
				p.Name, strings.Join(needs, ", "), strings.Join(needs, ", "))}
	}
	if len(p.InputResponses) > tool.MaxInputRequests {
		return nil, "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: fmt.Sprintf("inputResponses holds %d answers: at most %d", len(p.InputResponses), tool.MaxInputRequests)}
	}
	answers := make(map[string]*structpb.Struct, len(p.InputResponses))
	for key, raw := range p.InputResponses {
		if key == ApprovalInput {
			continue // the gateway's question, not the tool's: the task asks for its approval itself
		}
		s := &structpb.Struct{}
		if err := protojson.Unmarshal(raw, s); err != nil {
			return nil, "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("inputResponses[%q] must be an object", key)}
		}
		answers[key] = s
	}
	// An approval given inline is carried in front of the gateway's state
	// (clientinput.go); the task's own gate asks for approval again.
	_, state, _ := carriedApproval(p.RequestState)
	return answers, state, nil
}
