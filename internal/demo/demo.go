// Package demo is toolfleet's demo model, "scripted:demo" (llm.DemoModelName):
// a stateless model that drives a believable agent run over the bundled
// tools (Calculator, Clock, JSONQuery, KV) and the orchestrator's
// run_program, with no provider and no key. It lives beside the bundled
// tools, not in the public SDK, because it knows their names; the
// orchestrator's model resolver opens it (toolfleet dev, examples, tests).
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// demoDefaultKey is where the demo saves its sum when the user names no key.
const demoDefaultKey = "demo.sum"

// demoMaxAttempts bounds how often the demo tries one step that keeps failing.
const demoMaxAttempts = 3

// New returns the scripted demo model: with the bundled tools it drives
// a believable multi-turn run with no provider and no key. It is stateless
// (every turn is planned from the request's transcript alone), so it
// behaves the same in any process, after any retry or restart:
//
//  1. it reads the numbers in the latest user message (2 and 3 when there
//     are none) and calls Calculator_Add and Clock_Now in parallel;
//  2. with the sum in hand it cross-checks it with JSONQuery_Query
//     (".a + .b") and saves it with KV_Put under the key the user named
//     ("… save it as lucky number") or "demo.sum";
//  3. it reads the value back with KV_Get;
//  4. it answers with the sum, the check, the saved key and the time.
//
// It reacts to results, not a fixed transcript: a failed call (is_error) is
// retried with corrected arguments when the error names an argument it can
// fix (a key the tool rejected is turned into a slug: "lucky number" →
// "lucky-number"), at most three attempts per step; a step that cannot
// succeed is reported in the answer. Steps whose tool is not offered are
// skipped, and a request with ToolChoiceNone gets the answer at once. With
// ParallelToolCalls false the same plan runs one call per turn. Usage is estimated at four bytes per token so budgets apply.
func New() llm.Model { return demoModel{} }

type demoModel struct{}

func (demoModel) Complete(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return llm.FinishTurn(req, demoTurn(req)), nil
}

func (demoModel) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return llmtest.StreamReply(ctx, req, demoTurn(req), 12, onDelta)
}

// demoStep is one planned call.
type demoStep struct {
	tool  string
	group int // steps of a group are called in the same turn
	args  func(s *demoState) map[string]any
	ready func(s *demoState) bool // nil: always
}

// demoAttempt is one call of a step and its result (nil while pending).
type demoAttempt struct {
	call   *toolfleetv1.ToolCall
	result *toolfleetv1.ToolResult
}

// demoState is what the transcript since the latest user message says.
type demoState struct {
	a, b     float64
	guessed  bool // no numbers were given
	key      string
	attempts map[string][]demoAttempt // by tool name
	turn     int
}

var (
	demoNumber = regexp.MustCompile(`-?\d+(?:\.\d+)?`)
	demoKey    = regexp.MustCompile(`(?i)\b(?:save|store|remember|keep)\b.*?\b(?:as|under)\s+["'“]?([^"'”.!?\n]+)`)
)

var demoSteps = []demoStep{
	{tool: "Calculator_Add", group: 1, args: func(s *demoState) map[string]any { return map[string]any{"a": s.a, "b": s.b} }},
	{tool: "Clock_Now", group: 1, args: func(*demoState) map[string]any { return map[string]any{} }},
	{tool: "JSONQuery_Query", group: 2, ready: (*demoState).haveSum, args: func(s *demoState) map[string]any {
		return map[string]any{"query": ".a + .b", "document": map[string]any{"a": s.a, "b": s.b}}
	}},
	{tool: "KV_Put", group: 2, ready: (*demoState).haveSum, args: func(s *demoState) map[string]any {
		return map[string]any{"key": s.key, "value": formatNumber(s.sum())}
	}},
	{tool: "KV_Get", group: 3, ready: func(s *demoState) bool { return s.succeeded("KV_Put") != nil }, args: func(s *demoState) map[string]any {
		return map[string]any{"key": s.savedKey()}
	}},
}

func demoTurn(req *llm.Request) *toolfleetv1.Message {
	s := readDemoState(req)
	offered := map[string]bool{}
	for _, d := range req.Tools {
		offered[d.GetModelName()] = true
	}
	callable := offered
	if req.ToolChoice.Mode == llm.ToolChoiceNone {
		callable = nil // answer with what the results so far say
	}
	if callable[demoProgramTool] {
		return demoFinish(req, demoProgramTurn(req, s))
	}
	var calls []*toolfleetv1.Part
	var says []string
	group := 0
	for _, st := range demoSteps {
		if !callable[st.tool] || (group != 0 && st.group != group) {
			continue
		}
		if st.ready != nil && !st.ready(s) {
			continue
		}
		args, why, ok := s.next(st)
		if !ok {
			continue
		}
		group = st.group
		id := fmt.Sprintf("demo_%d_%d", s.turn, len(calls)+1)
		calls = append(calls, llm.CallPart(id, st.tool, args))
		says = append(says, why)
	}
	if len(calls) > 0 {
		return demoFinish(req, llmtest.CallTools(strings.Join(says, " "), calls...).Reply)
	}
	return demoFinish(req, llmtest.SayText(s.answer(offered)).Reply)
}

// demoFinish names the model and estimates usage at four bytes per token.
func demoFinish(req *llm.Request, msg *toolfleetv1.Message) *toolfleetv1.Message {
	msg.Model = "scripted:" + llm.DemoModelName
	msg.Usage = &toolfleetv1.Usage{InputTokens: int64(requestBytes(req)/4 + 1), OutputTokens: int64(len(llm.MessageText(msg))/4 + 8*len(llm.ToolCalls(msg)) + 1)}
	return msg
}

func readDemoState(req *llm.Request) *demoState {
	s := &demoState{key: demoDefaultKey, attempts: map[string][]demoAttempt{}, turn: 1}
	last := -1
	for i, m := range req.Messages {
		if m.GetRole() == toolfleetv1.Role_ROLE_USER && llm.MessageText(m) != "" {
			last = i
		}
	}
	var task string
	if last >= 0 {
		task = llm.MessageText(req.Messages[last])
	}
	nums := demoNumber.FindAllString(task, 2)
	if len(nums) == 2 {
		s.a, _ = strconv.ParseFloat(nums[0], 64)
		s.b, _ = strconv.ParseFloat(nums[1], 64)
	} else if len(nums) == 1 {
		s.a, _ = strconv.ParseFloat(nums[0], 64)
	} else {
		s.a, s.b, s.guessed = 2, 3, true
	}
	if m := demoKey.FindStringSubmatch(task); m != nil {
		if k := strings.TrimSpace(m[1]); k != "" {
			s.key = k
		}
	}
	results := map[string]*toolfleetv1.ToolResult{}
	for _, m := range req.Messages[last+1:] {
		for _, p := range m.GetParts() {
			if r := p.GetToolResult(); r != nil {
				results[r.GetCallId()] = r
			}
		}
	}
	for _, m := range req.Messages {
		if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			s.turn++
		}
	}
	for _, m := range req.Messages[last+1:] {
		for _, c := range llm.ToolCalls(m) {
			s.attempts[c.GetName()] = append(s.attempts[c.GetName()], demoAttempt{call: c, result: results[c.GetId()]})
		}
	}
	return s
}

// next decides a step's call this turn: its first attempt, or a corrected
// retry after a failure it can fix. ok is false when the step is done,
// waiting, or given up.
func (s *demoState) next(st demoStep) (args map[string]any, why string, ok bool) {
	tries := s.attempts[st.tool]
	if len(tries) == 0 {
		return st.args(s), demoIntent(st.tool, s), true
	}
	lastTry := tries[len(tries)-1]
	if lastTry.result == nil || !lastTry.result.GetIsError() || len(tries) >= demoMaxAttempts {
		return nil, "", false
	}
	fixed, changed := demoFix(lastTry.call.GetArguments().AsMap(), lastTry.result.GetContent())
	if !changed {
		return nil, "", false
	}
	return fixed, fmt.Sprintf("%s said %q; trying again with corrected arguments.", st.tool, firstLine(lastTry.result.GetContent())), true
}

// demoFix corrects string arguments that the error text names: such a
// value becomes a slug of lowercase letters, digits and dashes.
func demoFix(args map[string]any, errText string) (map[string]any, bool) {
	changed := false
	lower := strings.ToLower(errText)
	for k, v := range args {
		str, isStr := v.(string)
		if !isStr || !strings.Contains(lower, strings.ToLower(k)) {
			continue
		}
		if slug := demoSlug(str); slug != "" && slug != str {
			args[k] = slug
			changed = true
		}
	}
	return args, changed
}

var demoNonSlug = regexp.MustCompile(`[^a-z0-9]+`)

func demoSlug(s string) string {
	return strings.Trim(demoNonSlug.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

func demoIntent(tool string, s *demoState) string {
	switch tool {
	case "Calculator_Add":
		if s.guessed {
			return fmt.Sprintf("You gave me no numbers, so I'll show what I can do with %s and %s: adding them,", formatNumber(s.a), formatNumber(s.b))
		}
		return fmt.Sprintf("I'll add %s and %s,", formatNumber(s.a), formatNumber(s.b))
	case "Clock_Now":
		return "and check the time while I'm at it."
	case "JSONQuery_Query":
		return "Cross-checking the sum with a jq query,"
	case "KV_Put":
		return fmt.Sprintf("and saving it under %q.", s.key)
	case "KV_Get":
		return "Reading the saved value back to be sure."
	}
	return "Calling " + tool + "."
}

// succeeded returns the successful result of a tool, or nil.
func (s *demoState) succeeded(tool string) *toolfleetv1.ToolResult {
	for _, a := range s.attempts[tool] {
		if a.result != nil && !a.result.GetIsError() {
			return a.result
		}
	}
	return nil
}

func (s *demoState) failed(tool string) *toolfleetv1.ToolResult {
	tries := s.attempts[tool]
	if len(tries) == 0 || s.succeeded(tool) != nil {
		return nil
	}
	return tries[len(tries)-1].result
}

func (s *demoState) haveSum() bool { _, ok := s.resultNumber("Calculator_Add", "result"); return ok }

func (s *demoState) sum() float64 {
	if v, ok := s.resultNumber("Calculator_Add", "result"); ok {
		return v
	}
	return s.a + s.b
}

// savedKey is the key of the successful KV_Put.
func (s *demoState) savedKey() string {
	for _, a := range s.attempts["KV_Put"] {
		if a.result != nil && !a.result.GetIsError() {
			if k, ok := a.call.GetArguments().AsMap()["key"].(string); ok {
				return k
			}
		}
	}
	return s.key
}

// resultField reads a field of a tool's successful JSON result.
func (s *demoState) resultField(tool, field string) (any, bool) {
	r := s.succeeded(tool)
	if r == nil {
		return nil, false
	}
	var v any
	if r.GetStructured() != nil {
		v = r.GetStructured().AsInterface()
	} else if json.Unmarshal([]byte(r.GetContent()), &v) != nil {
		return nil, false
	}
	for _, part := range strings.Split(field, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[part]; !ok {
			return nil, false
		}
	}
	return v, true
}

func (s *demoState) resultNumber(tool, field string) (float64, bool) {
	v, ok := s.resultField(tool, field)
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case float64:
		return n, true
	case string:
		f, err := strconv.ParseFloat(n, 64)
		return f, err == nil
	}
	return 0, false
}

func (s *demoState) answer(offered map[string]bool) string {
	if !offered["Calculator_Add"] {
		return "I'm toolfleet's scripted demo model. Give me the bundled tools (Calculator, Clock, KV, JSONQuery) and a message such as \"add 2 and 3 and save it as lucky number\", and I'll show a whole run."
	}
	var b strings.Builder
	if r := s.failed("Calculator_Add"); r != nil {
		fmt.Fprintf(&b, "I couldn't add %s and %s: %s", formatNumber(s.a), formatNumber(s.b), firstLine(r.GetContent()))
		return b.String()
	}
	fmt.Fprintf(&b, "%s + %s = %s.", formatNumber(s.a), formatNumber(s.b), formatNumber(s.sum()))
	if v, ok := s.resultField("JSONQuery_Query", "results"); ok {
		if l, isList := v.([]any); isList && len(l) == 1 {
			if n, isNum := l[0].(float64); isNum && n == s.sum() {
				b.WriteString(" A jq query agrees.")
			} else {
				fmt.Fprintf(&b, " A jq query says %v, which does not agree.", l[0])
			}
		}
	} else if r := s.failed("JSONQuery_Query"); r != nil {
		fmt.Fprintf(&b, " (The jq cross-check failed: %s.)", firstLine(r.GetContent()))
	}
	if s.succeeded("KV_Put") != nil {
		fmt.Fprintf(&b, " Saved under %q", s.savedKey())
		if rev, ok := s.resultField("KV_Put", "revision"); ok {
			fmt.Fprintf(&b, " (revision %v)", rev)
		}
		if v, ok := s.resultField("KV_Get", "value"); ok {
			fmt.Fprintf(&b, " and read back as %v", v)
		}
		b.WriteString(".")
	} else if r := s.failed("KV_Put"); r != nil {
		fmt.Fprintf(&b, " I could not save it: %s.", firstLine(r.GetContent()))
	}
	for _, field := range []string{"time.localTime", "time.local_time", "time.timestamp"} {
		if t, ok := s.resultField("Clock_Now", field); ok {
			fmt.Fprintf(&b, " It is %v.", t)
			break
		}
	}
	return b.String()
}

func formatNumber(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// requestBytes approximates a request's size for the demo's usage figures.
func requestBytes(req *llm.Request) int {
	n := 0
	for _, m := range req.Messages {
		for _, p := range m.GetParts() {
			n += len(p.GetText())
			if c := p.GetToolCall(); c != nil {
				n += len(c.GetName()) + len(llm.CallArguments(c))
			}
			if r := p.GetToolResult(); r != nil {
				n += len(r.GetContent())
			}
		}
	}
	for _, d := range req.Tools {
		n += len(d.GetModelName()) + len(d.GetDescription())
	}
	return n
}
