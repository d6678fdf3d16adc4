package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// Gemini is the Gemini generateContent format: function_declarations with
// schemas in Gemini's OpenAPI subset, functionCall parts with args as an
// object, functionResponse parts answering them. Thought signatures are kept
// in ToolCall.signature / Thinking.signature and sent back verbatim. Gemini
// does not always send call ids; missing ones are generated as
// "<name>_<n>" (n counts calls in the message). The model id is part of the
// URL, not the body, and there is no parallel-calls flag.
type Gemini struct{}

// Name implements Format.
func (Gemini) Name() string { return "gemini" }

type gmDeclaration struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Parameters  map[string]any `json:"parameters,omitempty"`
	// ParametersJSONSchema is the newer full-JSON-Schema alternative; read, never written.
	ParametersJSONSchema map[string]any `json:"parametersJsonSchema,omitempty"`
}

type gmTool struct {
	FunctionDeclarations []gmDeclaration `json:"functionDeclarations,omitempty"`
}

type gmPart struct {
	Text             *string         `json:"text,omitempty"`
	Thought          bool            `json:"thought,omitempty"`
	ThoughtSignature []byte          `json:"thoughtSignature,omitempty"`
	FunctionCall     *gmFunctionCall `json:"functionCall,omitempty"`
	FunctionResponse *gmFunctionResp `json:"functionResponse,omitempty"`
}

type gmFunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type gmFunctionResp struct {
	ID       string         `json:"id,omitempty"`
	Name     string         `json:"name"`
	Response map[string]any `json:"response"`
}

type gmContent struct {
	Role  string   `json:"role,omitempty"`
	Parts []gmPart `json:"parts"`
}

type gmRequest struct {
	Contents          []gmContent `json:"contents"`
	SystemInstruction *gmContent  `json:"systemInstruction,omitempty"`
	Tools             []gmTool    `json:"tools,omitempty"`
	ToolConfig        *struct {
		FunctionCallingConfig gmCallingConfig `json:"functionCallingConfig"`
	} `json:"toolConfig,omitempty"`
	GenerationConfig *struct {
		MaxOutputTokens int `json:"maxOutputTokens,omitempty"`
	} `json:"generationConfig,omitempty"`
}

type gmCallingConfig struct {
	Mode                 string   `json:"mode,omitempty"`
	AllowedFunctionNames []string `json:"allowedFunctionNames,omitempty"`
}

type gmUsage struct {
	PromptTokenCount        int64 `json:"promptTokenCount,omitempty"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount,omitempty"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount,omitempty"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount,omitempty"`
	TotalTokenCount         int64 `json:"totalTokenCount,omitempty"`
}

func (u *gmUsage) canonical() *toolfleetv1.Usage {
	if u == nil {
		return nil
	}
	return &toolfleetv1.Usage{InputTokens: u.PromptTokenCount, OutputTokens: u.CandidatesTokenCount + u.ThoughtsTokenCount, CacheReadTokens: u.CachedContentTokenCount}
}

type gmResponse struct {
	Candidates []struct {
		Content      *gmContent `json:"content,omitempty"`
		FinishReason string     `json:"finishReason,omitempty"`
		Index        int        `json:"index"`
	} `json:"candidates"`
	UsageMetadata *gmUsage `json:"usageMetadata,omitempty"`
	ModelVersion  string   `json:"modelVersion,omitempty"`
}

// RenderTools implements Format: one tools entry holding every declaration.
// Gemini has no strict flag; schemas always get the subset transform.
func (Gemini) RenderTools(tools []*toolfleetv1.ToolDefinition, _ bool) ([]byte, error) {
	return json.Marshal(geminiTools(tools))
}

func geminiTools(tools []*toolfleetv1.ToolDefinition) []gmTool {
	decls := make([]gmDeclaration, 0, len(tools))
	for _, d := range tools {
		decls = append(decls, gmDeclaration{Name: d.GetModelName(), Description: d.GetDescription(), Parameters: GeminiSchema(canon.SchemaOf(d))})
	}
	return []gmTool{{FunctionDeclarations: decls}}
}

// ParseTools implements Format.
func (Gemini) ParseTools(body []byte) ([]*toolfleetv1.ToolDefinition, error) {
	body, err := geminiCamelCase(body)
	if err != nil {
		return nil, malformed("gemini tools", err)
	}
	var tools []gmTool
	if err := json.Unmarshal(body, &tools); err != nil {
		return nil, malformed("gemini tools", err)
	}
	return geminiDefs(tools)
}

func geminiDefs(tools []gmTool) ([]*toolfleetv1.ToolDefinition, error) {
	var defs []*toolfleetv1.ToolDefinition
	for _, t := range tools {
		for _, decl := range t.FunctionDeclarations {
			schema := decl.Parameters
			if schema == nil {
				schema = decl.ParametersJSONSchema
			}
			d, err := defFromWire(decl.Name, decl.Description, schema)
			if err != nil {
				return nil, err
			}
			defs = append(defs, d)
		}
	}
	return defs, nil
}

// RenderRequest implements Format. Tool results go in a user content as
// functionResponse parts; their response object is {"output": …} or, for
// failed results, {"error": …}, as Gemini documents.
func (Gemini) RenderRequest(req *llm.Request) ([]byte, error) {
	out := gmRequest{Contents: []gmContent{}}
	if sys := canon.SystemText(req.Messages); sys != "" {
		out.SystemInstruction = &gmContent{Parts: []gmPart{{Text: &sys}}}
	}
	if len(req.Tools) > 0 {
		out.Tools = geminiTools(req.Tools)
	}
	cfg := gmCallingConfig{}
	switch req.ToolChoice.Mode {
	case llm.ToolChoiceAuto:
		cfg.Mode = "AUTO"
	case llm.ToolChoiceNone:
		cfg.Mode = "NONE"
	case llm.ToolChoiceRequired:
		cfg.Mode = "ANY"
	case llm.ToolChoiceTool:
		cfg = gmCallingConfig{Mode: "ANY", AllowedFunctionNames: []string{req.ToolChoice.Name}}
	}
	if cfg.Mode != "" {
		out.ToolConfig = &struct {
			FunctionCallingConfig gmCallingConfig `json:"functionCallingConfig"`
		}{cfg}
	}
	if req.MaxTokens > 0 {
		out.GenerationConfig = &struct {
			MaxOutputTokens int `json:"maxOutputTokens,omitempty"`
		}{req.MaxTokens}
	}
	names := canon.CallNames(req.Messages)
	for _, m := range req.Messages {
		if m.GetRole() == toolfleetv1.Role_ROLE_SYSTEM {
			continue
		}
		role := "user"
		if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			role = "model"
		}
		parts := geminiParts(m, names)
		if len(parts) == 0 {
			continue
		}
		// Gemini wants alternating turns: merge same-role neighbours (tool results + user text).
		if n := len(out.Contents); n > 0 && out.Contents[n-1].Role == role {
			out.Contents[n-1].Parts = append(out.Contents[n-1].Parts, parts...)
			continue
		}
		out.Contents = append(out.Contents, gmContent{Role: role, Parts: parts})
	}
	return json.Marshal(out)
}

func geminiParts(m *toolfleetv1.Message, names map[string]string) []gmPart {
	var out []gmPart
	for _, p := range m.GetParts() {
		switch k := p.GetKind().(type) {
		case *toolfleetv1.Part_Text:
			if k.Text != "" {
				out = append(out, gmPart{Text: &k.Text})
			}
		case *toolfleetv1.Part_Thinking:
			text := k.Thinking.GetText()
			out = append(out, gmPart{Text: &text, Thought: true, ThoughtSignature: k.Thinking.GetSignature()})
		case *toolfleetv1.Part_ToolCall:
			c := k.ToolCall
			out = append(out, gmPart{FunctionCall: &gmFunctionCall{ID: c.GetId(), Name: c.GetName(), Args: canon.CallArguments(c)}, ThoughtSignature: c.GetSignature()})
		case *toolfleetv1.Part_ToolResult:
			r := k.ToolResult
			name := r.GetName()
			if name == "" {
				name = names[r.GetCallId()]
			}
			var value any = canon.ResultText(r)
			if r.GetStructured() != nil {
				value = r.GetStructured().AsInterface()
			}
			key := "output"
			if r.GetIsError() {
				key = "error"
			}
			out = append(out, gmPart{FunctionResponse: &gmFunctionResp{ID: r.GetCallId(), Name: name, Response: map[string]any{key: value}}})
		}
	}
	return out
}

// ParseRequest implements Format.
func (Gemini) ParseRequest(body []byte) (*llm.Request, error) {
	body, err := geminiCamelCase(body)
	if err != nil {
		return nil, malformed("gemini request", err)
	}
	var in gmRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, malformed("gemini request", err)
	}
	req := &llm.Request{}
	if req.Tools, err = geminiDefs(in.Tools); err != nil {
		return nil, err
	}
	if in.ToolConfig != nil {
		cfg := in.ToolConfig.FunctionCallingConfig
		switch {
		case cfg.Mode == "AUTO":
			req.ToolChoice.Mode = llm.ToolChoiceAuto
		case cfg.Mode == "NONE":
			req.ToolChoice.Mode = llm.ToolChoiceNone
		case cfg.Mode == "ANY" && len(cfg.AllowedFunctionNames) == 1:
			req.ToolChoice = llm.ToolChoice{Mode: llm.ToolChoiceTool, Name: cfg.AllowedFunctionNames[0]}
		case cfg.Mode == "ANY":
			req.ToolChoice.Mode = llm.ToolChoiceRequired
		}
	}
	if in.GenerationConfig != nil {
		req.MaxTokens = in.GenerationConfig.MaxOutputTokens
	}
	if in.SystemInstruction != nil {
		var sys string
		for _, p := range in.SystemInstruction.Parts {
			sys += deref(p.Text)
		}
		req.Messages = append(req.Messages, llm.System(sys))
	}
	// Gemini often sends no ids; a response then answers the first
	// unanswered call of the same name in the preceding model turn.
	var pending []*toolfleetv1.ToolCall
	for _, c := range in.Contents {
		if c.Role == "model" {
			msg, err := geminiAssistant(c.Parts)
			if err != nil {
				return nil, err
			}
			req.Messages = append(req.Messages, msg)
			pending = llm.ToolCalls(msg)
			continue
		}
		tool := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_TOOL}
		user := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_USER}
		for _, p := range c.Parts {
			if fr := p.FunctionResponse; fr != nil {
				r, err := geminiResult(fr)
				if err != nil {
					return nil, err
				}
				for i, call := range pending {
					if call != nil && (call.GetId() == r.CallId || (r.CallId == "" && call.GetName() == r.Name)) {
						r.CallId = call.GetId()
						pending[i] = nil
						break
					}
				}
				tool.Parts = append(tool.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolResult{ToolResult: r}})
			} else if p.Text != nil {
				user.Parts = append(user.Parts, llm.Text(*p.Text))
			}
		}
		if len(tool.Parts) > 0 {
			req.Messages = append(req.Messages, tool)
		}
		if len(user.Parts) > 0 || len(tool.Parts) == 0 {
			req.Messages = append(req.Messages, user)
		}
	}
	return req, nil
}

func geminiResult(fr *gmFunctionResp) (*toolfleetv1.ToolResult, error) {
	r := &toolfleetv1.ToolResult{CallId: fr.ID, Name: fr.Name}
	value, ok := fr.Response["output"]
	if errValue, isErr := fr.Response["error"]; isErr {
		value, ok, r.IsError = errValue, true, true
	}
	if !ok {
		value = fr.Response
	}
	if s, isString := value.(string); isString {
		r.Content = s
		return r, nil
	}
	b, err := json.Marshal(value)
	if err != nil {
		return nil, malformed("gemini functionResponse", err)
	}
	r.Content = string(b)
	if r.Structured, err = structpb.NewValue(value); err != nil {
		return nil, malformed("gemini functionResponse", err)
	}
	return r, nil
}

func geminiAssistant(parts []gmPart) (*toolfleetv1.Message, error) {
	msg := &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_ASSISTANT}
	calls := 0
	for _, p := range parts {
		switch {
		case p.FunctionCall != nil:
			calls++
			fc := p.FunctionCall
			id := fc.ID
			if id == "" {
				id = fc.Name + "_" + strconv.Itoa(calls)
			}
			args, err := llm.DecodeArguments(fc.Name+" ("+id+")", fc.Args)
			if err != nil {
				return nil, err
			}
			msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: &toolfleetv1.ToolCall{Id: id, Name: fc.Name, Arguments: args, Signature: p.ThoughtSignature}}})
		case p.Thought || (p.Text != nil && *p.Text == "" && p.ThoughtSignature != nil):
			msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: &toolfleetv1.Thinking{Text: deref(p.Text), Signature: p.ThoughtSignature}}})
		case p.Text != nil:
			msg.Parts = append(msg.Parts, llm.Text(*p.Text))
			if p.ThoughtSignature != nil {
				// A signature on a plain text part must still go back.
				msg.Parts = append(msg.Parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_Thinking{Thinking: &toolfleetv1.Thinking{Signature: p.ThoughtSignature}}})
			}
		}
	}
	return msg, nil
}

func geminiStop(reason string, hasCalls bool) string {
	switch reason {
	case "STOP", "":
		if hasCalls {
			return llm.StopToolCalls
		}
		return llm.StopEndTurn
	case "MAX_TOKENS":
		return llm.StopMaxTokens
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII":
		return llm.StopContentFilter
	}
	return reason
}

// RenderResponse implements Format.
func (Gemini) RenderResponse(msg *toolfleetv1.Message) ([]byte, error) {
	finish := "STOP"
	switch msg.GetStopReason() {
	case llm.StopMaxTokens:
		finish = "MAX_TOKENS"
	case llm.StopContentFilter:
		finish = "SAFETY"
	}
	parts := geminiParts(msg, nil)
	if parts == nil {
		parts = []gmPart{}
	}
	resp := map[string]any{
		"candidates":   []any{map[string]any{"content": gmContent{Role: "model", Parts: parts}, "finishReason": finish, "index": 0}},
		"modelVersion": msg.GetModel(),
	}
	if u := msg.GetUsage(); u != nil {
		resp["usageMetadata"] = gmUsage{PromptTokenCount: u.GetInputTokens(), CandidatesTokenCount: u.GetOutputTokens(), CachedContentTokenCount: u.GetCacheReadTokens(), TotalTokenCount: u.GetInputTokens() + u.GetOutputTokens()}
	}
	return json.Marshal(resp)
}

// ParseResponse implements Format. Only the first candidate is read.
func (Gemini) ParseResponse(body []byte) (*toolfleetv1.Message, error) {
	body, err := geminiCamelCase(body)
	if err != nil {
		return nil, malformed("gemini response", err)
	}
	var resp gmResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, malformed("gemini response", err)
	}
	if len(resp.Candidates) == 0 {
		return nil, malformed("gemini response", errors.New("no candidates"))
	}
	c := resp.Candidates[0]
	var parts []gmPart
	if c.Content != nil {
		parts = c.Content.Parts
	}
	msg, err := geminiAssistant(parts)
	if err != nil {
		return nil, err
	}
	msg.Model = resp.ModelVersion
	msg.Usage = resp.UsageMetadata.canonical()
	msg.StopReason = geminiStop(c.FinishReason, len(llm.ToolCalls(msg)) > 0)
	return msg, nil
}

// NewStreamDecoder implements Format (streamGenerateContent?alt=sse: every
// event is a partial GenerateContentResponse; calls arrive whole).
func (Gemini) NewStreamDecoder() StreamDecoder { return &geminiStream{} }

type geminiStream struct {
	asm   llm.Assembler
	calls int
}

func (s *geminiStream) Decode(_ string, data []byte) ([]llm.Delta, error) {
	var resp gmResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, malformed("gemini stream chunk", err)
	}
	var out []llm.Delta
	if resp.ModelVersion != "" {
		out = append(out, llm.Delta{Model: resp.ModelVersion})
	}
	if u := resp.UsageMetadata.canonical(); u != nil {
		out = append(out, llm.Delta{Usage: u})
	}
	for _, c := range resp.Candidates {
		if c.Index != 0 {
			continue
		}
		if c.Content != nil {
			for _, p := range c.Content.Parts {
				switch {
				case p.FunctionCall != nil:
					s.calls++
					fc := p.FunctionCall
					id := fc.ID
					if id == "" {
						id = fc.Name + "_" + strconv.Itoa(s.calls)
					}
					args := string(fc.Args)
					if args == "" {
						args = "{}"
					}
					out = append(out, llm.Delta{ToolCall: &llm.ToolCallDelta{Index: -1, ID: id, Name: fc.Name, Arguments: args, Signature: p.ThoughtSignature}})
				case p.Thought:
					out = append(out, llm.Delta{Thinking: deref(p.Text), ThinkingSignature: p.ThoughtSignature})
				case p.Text != nil:
					if *p.Text != "" {
						out = append(out, llm.Delta{Text: *p.Text})
					}
					if p.ThoughtSignature != nil {
						out = append(out, llm.Delta{ThinkingSignature: p.ThoughtSignature})
					}
				}
			}
		}
		if c.FinishReason != "" {
			out = append(out, llm.Delta{StopReason: geminiStop(c.FinishReason, s.calls > 0)})
		}
	}
	for _, d := range out {
		s.asm.Add(d)
	}
	return out, nil
}

func (s *geminiStream) Message() (*toolfleetv1.Message, error) { return s.asm.Message() }

// geminiOpaque are keys whose values are user data or schemas, where key
// spelling must be kept.
var geminiOpaque = map[string]bool{"args": true, "response": true, "parameters": true, "parametersJsonSchema": true, "responseSchema": true, "responseJsonSchema": true}

// geminiCamelCase rewrites snake_case keys (function_call, thought_signature,
// system_instruction, …) to the camelCase the types here use: the API
// accepts both spellings (proto JSON) and its docs show both.
func geminiCamelCase(body []byte) ([]byte, error) {
	if !hasSnakeKey(body) {
		return body, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(camelKeys(v))
}

// hasSnakeKey reports whether some object key in the JSON text body holds
// an underscore: one scan, no allocation. Underscores in values (function
// names such as "get_weather") do not count. Invalid JSON reports true, so
// the decoder that follows reports the error.
func hasSnakeKey(body []byte) bool {
	for i := 0; i < len(body); i++ {
		if body[i] != '"' {
			continue
		}
		underscore := false
		j := i + 1
		for ; j < len(body) && body[j] != '"'; j++ {
			switch body[j] {
			case '\\':
				j++
			case '_':
				underscore = true
			}
		}
		if j >= len(body) {
			return true
		}
		i = j
		if !underscore {
			continue
		}
		for k := j + 1; k < len(body); k++ {
			if c := body[k]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				if c == ':' {
					return true
				}
				break
			}
		}
	}
	return false
}

func camelKeys(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			ck := snakeToCamel(k)
			if !geminiOpaque[ck] {
				val = camelKeys(val)
			}
			out[ck] = val
		}
		return out
	case []any:
		for i, val := range t {
			t[i] = camelKeys(val)
		}
	}
	return v
}

func snakeToCamel(s string) string {
	if !strings.Contains(s, "_") {
		return s
	}
	parts := strings.Split(s, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}
