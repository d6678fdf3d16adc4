package dialect

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// ParseAuto completes an assistant message's tool calls from its text.
//
// declared is the protocol the model was taught (nil for a model with
// native tool calls). With a declared protocol its parser always runs. For
// a native model, a message that already has calls is returned unchanged;
// one without calls is searched for blocks of the prompt protocols (XML
// function blocks, then Hermes, then fenced), and finding none means no
// calls, not an error. A malformed block is always an error.
//
// msg is not modified; the result's text parts hold the text outside the
// blocks and its stop reason becomes StopToolCalls when calls were found.
func ParseAuto(msg *toolfleetv1.Message, declared llm.TextProtocol, tools []*toolfleetv1.ToolDefinition) (*toolfleetv1.Message, error) {
	if declared == nil {
		return parseAuto(msg, "", tools)
	}
	return parseWith(msg, []llm.TextProtocol{declared}, tools, false)
}

// parseAuto is ParseAuto for a native model named model: the dialect its
// family speaks (For) is tried first, then the prompt protocols.
func parseAuto(msg *toolfleetv1.Message, model string, tools []*toolfleetv1.ToolDefinition) (*toolfleetv1.Message, error) {
	if len(llm.ToolCalls(msg)) > 0 {
		return msg, nil
	}
	protocols := promptProtocols()
	if d, ok := For(model); ok {
		protocols = append([]llm.TextProtocol{d}, protocols...)
	}
	text := llm.MessageText(msg)
	var found []llm.TextProtocol
	for _, p := range protocols {
		// A dialect's markers are its own: its parser runs whenever the
		// model's name says it speaks it.
		if _, dialect := p.(Dialect); dialect || strings.Contains(text, strings.TrimPrefix(p.OpenTag(), "\n")) {
			found = append(found, p)
		}
	}
	return parseWith(msg, found, tools, false)
}

// parseWith reads the protocols' calls out of msg's text, each protocol
// reading what the ones before it left. thinkingOpen: the prompt opened the
// reasoning channel, so the first dialect begins inside it.
func parseWith(msg *toolfleetv1.Message, protocols []llm.TextProtocol, tools []*toolfleetv1.ToolDefinition, thinkingOpen bool) (*toolfleetv1.Message, error) {
	text := llm.MessageText(msg)
	var calls []*toolfleetv1.ToolCall
	var thinking []string
	for _, p := range protocols {
		var rest, think string
		var found []*toolfleetv1.ToolCall
		var err error
		if dp, ok := p.(dialectProtocol); ok {
			rest, think, found, err = parseDialectFrom(dp, text, tools, thinkingOpen)
			thinkingOpen = false
		} else {
			rest, found, err = p.Parse(text, tools)
		}
		if err != nil {
			return nil, err
		}
		text = rest
		calls = append(calls, found...)
		if think != "" {
			thinking = append(thinking, think)
		}
	}
	if len(calls) == 0 && len(thinking) == 0 {
		return msg, nil
	}
	out := withText(msg, text)
	if len(thinking) > 0 {
		// Reasoning a dialect wrote in its text (harmony's analysis
		// channel) comes first, as the model wrote it.
		th := &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: &toolfleetv1.Thinking{Text: strings.Join(thinking, "\n")}}}
		out.Parts = append([]*toolfleetv1.Part{th}, out.Parts...)
	}
	if len(calls) == 0 {
		return out, nil
	}
	seen := map[string]bool{}
	for _, c := range llm.ToolCalls(msg) {
		seen[c.GetId()] = true
	}
	for _, c := range calls {
		// Generated ids restart per protocol; keep them unique in the message.
		for base, n := c.Id, 2; seen[c.Id]; n++ {
			c.Id = base + "_" + strconv.Itoa(n)
		}
		seen[c.Id] = true
		out.Parts = append(out.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: c}})
	}
	out.StopReason = llm.StopToolCalls
	return out, nil
}

// ForTextProtocol rewrites a request for a model taught protocol p instead
// of native tools: the system prompt is augmented with the tool catalog,
// tools and tool choice are removed, past calls become protocol text in the
// assistant message and results become user text.
func ForTextProtocol(p llm.TextProtocol, req *llm.Request) *llm.Request {
	out := *req
	out.Tools, out.ToolChoice, out.ParallelToolCalls, out.Strict = nil, llm.ToolChoice{}, nil, false
	out.Messages = []*toolfleetv1.Message{llm.System(Augment(canon.SystemText(req.Messages), p, req.Tools))}
	for _, m := range req.Messages {
		switch m.GetRole() {
		case toolfleetv1.Role_ROLE_SYSTEM:
			continue
		case toolfleetv1.Role_ROLE_ASSISTANT:
			var parts []string
			if t := llm.MessageText(m); t != "" {
				parts = append(parts, t)
			}
			for _, c := range llm.ToolCalls(m) {
				parts = append(parts, p.RenderCall(c))
			}
			out.Messages = append(out.Messages, llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text(strings.Join(parts, "\n"))))
		default:
			var parts []string
			for _, part := range m.GetParts() {
				if r := part.GetToolResult(); r != nil {
					parts = append(parts, p.RenderResult(r))
				} else if t := part.GetText(); t != "" {
					parts = append(parts, t)
				}
			}
			text := strings.Join(parts, "\n")
			// Results and the user's next words form one turn: text models
			// expect alternating roles too.
			if last := out.Messages[len(out.Messages)-1]; last.GetRole() == toolfleetv1.Role_ROLE_USER {
				last.Parts[0].Kind = &toolfleetv1.Part_Text{Text: llm.MessageText(last) + "\n" + text}
				continue
			}
			out.Messages = append(out.Messages, llm.User(text))
		}
	}
	return &out
}

// withText returns a copy of msg whose text parts are replaced by text, at
// the place of the first text part.
func withText(msg *toolfleetv1.Message, text string) *toolfleetv1.Message {
	out := proto.Clone(msg).(*toolfleetv1.Message)
	out.Parts = nil
	textPlaced := false
	for _, p := range msg.GetParts() {
		if _, isText := p.GetKind().(*toolfleetv1.Part_Text); isText {
			if !textPlaced && text != "" {
				out.Parts = append(out.Parts, llm.Text(text))
			}
			textPlaced = true
			continue
		}
		out.Parts = append(out.Parts, proto.Clone(p).(*toolfleetv1.Part))
	}
	return out
}
