package demo

import (
	"encoding/json"
	"fmt"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// demoProgramTool is the one tool toolfleet's code mode offers a model: it
// runs a Starlark program whose stubs the system prompt lists.
const demoProgramTool = "run_program"

// demoProgramTurn is the demo in code mode: the whole plan as one program
// (add and read the clock in parallel, cross-check, save, read back), then
// the same answer as the plan made call by call. It writes stubs only for
// tools the system prompt lists, as a model reading it would.
func demoProgramTurn(req *llm.Request, s *demoState) *toolfleetv1.Message {
	var prompt strings.Builder
	for _, m := range req.Messages {
		if m.GetRole() == toolfleetv1.Role_ROLE_SYSTEM {
			prompt.WriteString(llm.MessageText(m))
		}
	}
	has := func(stub string) bool { return strings.Contains(prompt.String(), stub+"(") }
	tries := s.attempts[demoProgramTool]
	switch {
	case !has("Calculator_Add"):
		return llmtest.SayText(s.answer(nil)).Reply
	case len(tries) == 0:
		args := map[string]any{"source": demoProgram(has), "args": map[string]any{"a": s.a, "b": s.b, "key": s.key}}
		return llmtest.CallTools("I'll do it all in one program: add and read the clock in parallel, cross-check the sum, save it and read it back.",
			llm.CallPart(fmt.Sprintf("demo_%d_1", s.turn), demoProgramTool, args)).Reply
	}
	r := tries[len(tries)-1].result
	if r == nil || r.GetIsError() {
		return llmtest.SayText("The program did not finish: " + firstLine(r.GetContent())).Reply
	}
	// The program returns each step's outcome by tool; the answer reads them
	// as it reads the results of separate calls.
	var steps map[string]struct {
		OK    bool   `json:"ok"`
		Value any    `json:"value"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.GetContent()), &steps); err != nil {
		return llmtest.SayText("The program returned something I cannot read: " + firstLine(r.GetContent())).Reply
	}
	offered := map[string]bool{}
	for tool, st := range steps {
		offered[tool] = true
		content := st.Error
		if st.OK {
			b, _ := json.Marshal(st.Value)
			content = string(b)
		}
		s.attempts[tool] = []demoAttempt{{call: llm.CallPart("", tool, map[string]any{"key": s.key}).GetToolCall(),
			result: &toolfleetv1.ToolResult{Content: content, IsError: !st.OK}}}
	}
	return llmtest.SayText(s.answer(offered) + fmt.Sprintf(" (%d tool calls in one program.)", len(steps))).Reply
}

// demoProgram is the demo's plan as a Starlark program over the stubs it has.
func demoProgram(has func(string) bool) string {
	var b strings.Builder
	b.WriteString("a, b, key = args[\"a\"], args[\"b\"], args[\"key\"]\n")
	if has("Clock_Now") {
		b.WriteString("first = parallel([lambda: Calculator_Add(a=a, b=b), lambda: Clock_Now()])\n")
		b.WriteString("steps = {\"Calculator_Add\": first[0], \"Clock_Now\": first[1]}\n")
	} else {
		b.WriteString("steps = {\"Calculator_Add\": Calculator_Add(a=a, b=b)}\n")
	}
	b.WriteString("if steps[\"Calculator_Add\"].ok:\n")
	b.WriteString("    total = steps[\"Calculator_Add\"].value[\"result\"]\n")
	if has("JSONQuery_Query") {
		b.WriteString("    steps[\"JSONQuery_Query\"] = JSONQuery_Query(query=\".a + .b\", document={\"a\": a, \"b\": b})\n")
	}
	if has("KV_Put") {
		b.WriteString("    steps[\"KV_Put\"] = KV_Put(key=key, value=str(total))\n")
		if has("KV_Get") {
			b.WriteString("    if steps[\"KV_Put\"].ok:\n")
			b.WriteString("        steps[\"KV_Get\"] = KV_Get(key=key)\n")
		}
	}
	b.WriteString("result = {name: {\"ok\": r.ok, \"value\": r.value, \"error\": r.error.message if r.error else None} for name, r in steps.items()}\n")
	return b.String()
}
