package mcp

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A request's declared capabilities decide whether a task's tools may ask
// (elicitation), and what a task carrying a first round of answers takes:
// the tool's needs declared, at most 16 answers, each an object, the
// approval answer left to the task's own gate and the carried approval
// stripped from the state.
func TestTaskAnswers(t *testing.T) {
	t.Parallel()
	meta := func(caps string) map[string]json.RawMessage {
		return map[string]json.RawMessage{metaProtocol: json.RawMessage(`"2026-07-28"`), metaClientCaps: json.RawMessage(caps)}
	}
	rev, _ := revisionOf(meta(`{"elicitation":{},"roots":null,"extensions":{"io.modelcontextprotocol/tasks":{}}}`))
	if !rev.extension || !rev.declared || !rev.can("elicitation") || rev.can("roots") || rev.can("sampling") {
		t.Fatalf("revision %+v: want the extension declared, elicitation only (a null capability is not declared)", rev)
	}
	noAsk, _ := revisionOf(meta(`{"extensions":{"io.modelcontextprotocol/tasks":{}}}`))
	if noAsk.can("elicitation") {
		t.Fatalf("revision %+v: elicitation was not declared", noAsk)
	}

	answer := json.RawMessage(`{"action":"accept","content":{"name":"Ada"}}`)
	p := taskParams{Name: "asks", InputResponses: map[string]json.RawMessage{"user_name": answer, ApprovalInput: answer},
		RequestState: carryApproval("bo", "tfs1.sealed")}
	got, state, jerr := taskAnswers(p, rev, []string{"elicitation"})
	if jerr != nil || len(got) != 1 || got["user_name"].AsMap()["action"] != "accept" || state != "tfs1.sealed" {
		t.Fatalf("taskAnswers = %v, %q, %v: want the tool's one answer and the gateway's state", got, state, jerr)
	}
	if got, _, jerr := taskAnswers(taskParams{Name: "asks"}, rev, []string{"elicitation"}); got != nil || jerr != nil {
		t.Fatalf("no answers: %v, %v", got, jerr)
	}
	_, _, jerr = taskAnswers(p, noAsk, []string{"elicitation"})
	if jerr == nil || jerr.Code != sdk.CodeMissingRequiredClientCapabilities || !strings.Contains(string(jerr.Data), `"elicitation"`) {
		t.Fatalf("answers from a client without elicitation: %v, want -32021 naming it", jerr)
	}
	many := map[string]json.RawMessage{}
	for i := range 17 {
		many[fmt.Sprint("k", i)] = answer
	}
	if _, _, jerr := taskAnswers(taskParams{InputResponses: many}, rev, nil); jerr == nil || jerr.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("17 answers: %v, want invalid params", jerr)
	}
	bad := taskParams{InputResponses: map[string]json.RawMessage{"user_name": json.RawMessage(`"yes"`)}}
	if _, _, jerr := taskAnswers(bad, rev, nil); jerr == nil || jerr.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("an answer that is not an object: %v, want invalid params", jerr)
	}
}
