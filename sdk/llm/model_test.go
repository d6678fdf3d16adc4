package llm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// runCalculator executes calculator calls the way an agent loop would.
func runCalculator(c *toolfleetv1.ToolCall) *toolfleetv1.Part {
	args := c.GetArguments().AsMap()
	a, _ := args["a"].(float64)
	b, _ := args["b"].(float64)
	switch c.GetName() {
	case "Calculator_Add":
		return ResultPart(c.GetId(), c.GetName(), fmt.Sprint(a+b), false)
	case "Calculator_Mul":
		return ResultPart(c.GetId(), c.GetName(), fmt.Sprint(a*b), false)
	}
	return ResultPart(c.GetId(), c.GetName(), "unknown tool "+c.GetName(), true)
}

// agentLoop runs model turns, executing calls, until a turn has no calls.
func agentLoop(ctx context.Context, m Model, req *Request, stream bool) ([]*toolfleetv1.Message, error) {
	for turn := 0; turn < 10; turn++ {
		var msg *toolfleetv1.Message
		var err error
		if stream {
			msg, err = m.Stream(ctx, req, nil)
		} else {
			msg, err = m.Complete(ctx, req)
		}
		if err != nil {
			return nil, err
		}
		req.Messages = append(req.Messages, msg)
		calls := ToolCalls(msg)
		if len(calls) == 0 {
			return req.Messages, nil
		}
		results := NewMessage(toolfleetv1.Role_ROLE_TOOL)
		for _, c := range calls {
			results.Parts = append(results.Parts, runCalculator(c))
		}
		req.Messages = append(req.Messages, results)
	}
	return nil, errors.New("too many turns")
}

// lastResultIs checks that the model was sent the result of its previous calls.
func lastResultIs(want string) func(*Request) error {
	return func(r *Request) error {
		got := ""
		for _, m := range r.Messages {
			for _, p := range m.GetParts() {
				if res := p.GetToolResult(); res != nil {
					got = res.GetContent()
				}
			}
			if t := MessageText(m); m.GetRole() == toolfleetv1.Role_ROLE_USER && strings.Contains(t, `"content":`) {
				got = t
			}
		}
		if !strings.Contains(got, want) {
			return fmt.Errorf("last tool result %q does not contain %q", got, want)
		}
		return nil
	}
}

// TestScriptedConversation drives a three-turn tool conversation with a
// scripted model, natively and through each text protocol, completed and
// streamed.
func TestScriptedConversation(t *testing.T) {
	t.Parallel()
	type variant struct {
		name  string
		proto TextProtocol
	}
	variants := []variant{{"native", nil}}
	for _, p := range TextProtocols() {
		variants = append(variants, variant{p.Name(), p})
	}
	for _, v := range variants {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", v.name, stream), func(t *testing.T) {
				t.Parallel()
				say := func(text string, calls ...*toolfleetv1.Part) ScriptTurn {
					if v.proto == nil {
						return CallTools(text, calls...)
					}
					return WriteCalls(v.proto, text, calls...)
				}
				turn2 := say("Now the product.", CallPart("call_2", "Calculator_Mul", map[string]any{"a": 5, "b": 4}))
				turn2.Check = lastResultIs("5")
				turn3 := SayText("(2+3)*4 = 20.")
				turn3.Check = lastResultIs("20")
				script := NewScripted(say("First the sum.", CallPart("call_1", "Calculator_Add", map[string]any{"a": 2, "b": 3})), turn2, turn3)
				var m Model = script
				if v.proto != nil {
					m = WithTextProtocol(script, v.proto)
				}
				req := &Request{Messages: []*toolfleetv1.Message{User("What is (2+3)*4?")}, Tools: calculatorTools(t)}
				msgs, err := agentLoop(t.Context(), m, req, stream)
				if err != nil {
					t.Fatal(err)
				}
				if got := MessageText(msgs[len(msgs)-1]); got != "(2+3)*4 = 20." {
					t.Errorf("final answer = %q", got)
				}
				if len(msgs) != 6 || script.Remaining() != 0 {
					t.Errorf("messages = %d, remaining turns = %d", len(msgs), script.Remaining())
				}
				ids := map[string]bool{}
				for _, m := range msgs {
					for _, c := range ToolCalls(m) {
						if ids[c.GetId()] {
							t.Errorf("call id %q repeated in the conversation", c.GetId())
						}
						ids[c.GetId()] = true
					}
				}
				if v.proto != nil {
					sent := script.Requests()[0]
					if sent.Tools != nil || !strings.Contains(MessageText(sent.Messages[0]), "Calculator_Add") {
						t.Errorf("text-protocol request keeps native tools or lacks the catalog")
					}
				}
			})
		}
	}
}

func TestScriptedExhausted(t *testing.T) {
	t.Parallel()
	m := NewScripted(SayText("only"))
	if _, err := m.Complete(t.Context(), &Request{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(t.Context(), &Request{}); !errors.Is(err, ErrScriptExhausted) {
		t.Fatalf("err = %v, want ErrScriptExhausted", err)
	}
}

func TestWithRetry(t *testing.T) {
	t.Parallel()
	rateLimited := &APIError{Provider: "test", StatusCode: 429, RetryAfter: 20 * time.Millisecond}
	badRequest := &APIError{Provider: "test", StatusCode: 400}
	tests := []struct {
		name      string
		turns     []ScriptTurn
		policy    RetryPolicy
		wantErr   error
		wantCalls int
		minWait   time.Duration
	}{
		{"retries 429 honouring retry-after", []ScriptTurn{{Err: rateLimited}, {Err: rateLimited}, SayText("ok")}, RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}, nil, 3, 40 * time.Millisecond},
		{"gives up after attempts", []ScriptTurn{{Err: rateLimited}, {Err: rateLimited}, SayText("ok")}, RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond}, ErrRetryable, 2, 0},
		{"does not retry 400", []ScriptTurn{{Err: badRequest}, SayText("ok")}, RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}, ErrPermanent, 1, 0},
		{"caps the wait", []ScriptTurn{{Err: &APIError{StatusCode: 503, RetryAfter: time.Hour}}, SayText("ok")}, RetryPolicy{MaxAttempts: 2, MaxBackoff: 5 * time.Millisecond}, nil, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewScripted(tt.turns...)
			start := time.Now()
			_, err := WithRetry(s, tt.policy).Complete(t.Context(), &Request{})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if n := len(s.Requests()); n != tt.wantCalls {
				t.Errorf("calls = %d, want %d", n, tt.wantCalls)
			}
			if waited := time.Since(start); waited < tt.minWait {
				t.Errorf("waited %v, want at least %v", waited, tt.minWait)
			}
		})
	}
}

func TestWithRetryStopsOnContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	s := NewScripted(ScriptTurn{Err: &APIError{StatusCode: 429, RetryAfter: time.Minute}}, SayText("late"))
	start := time.Now()
	_, err := WithRetry(s, RetryPolicy{MaxAttempts: 2, MaxBackoff: time.Minute}).Complete(ctx, &Request{})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrRetryable) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("wait did not end with the context")
	}
}

func TestAutoFallback(t *testing.T) {
	t.Parallel()
	m := WithAutoFallback(NewScripted(SayText("<tool_call>{\"name\":\"Calculator_Add\",\"arguments\":{\"a\":1,\"b\":2}}</tool_call>")))
	msg, err := m.Complete(t.Context(), &Request{Tools: calculatorTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got := callStrings(ToolCalls(msg)); !equalStrings(got, []string{`Calculator_Add(call_1)={"a":1,"b":2}`}) {
		t.Errorf("calls = %q", got)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		header map[string]string
		want   time.Duration
	}{
		{map[string]string{"Retry-After": "2"}, 2 * time.Second},
		{map[string]string{"Retry-After-Ms": "150", "Retry-After": "9"}, 150 * time.Millisecond},
		{map[string]string{"Retry-After": now.Add(3 * time.Second).Format(http1123)}, 3 * time.Second},
		{map[string]string{"Retry-After": "soon"}, 0},
		{nil, 0},
	}
	for _, tt := range tests {
		h := map[string][]string{}
		for k, v := range tt.header {
			h[k] = []string{v}
		}
		if got := RetryAfter(h, now); got != tt.want {
			t.Errorf("RetryAfter(%v) = %v, want %v", tt.header, got, tt.want)
		}
	}
}

const http1123 = "Mon, 02 Jan 2006 15:04:05 GMT"

// TestTextProtocolOneCallPerTurn cuts a streamed XML-function reply right
// after the first </function> when the request allows one call per turn,
// and never shows the block's text to the caller.
func TestTextProtocolOneCallPerTurn(t *testing.T) {
	t.Parallel()
	first := CallPart("call_1", "Calculator_Add", map[string]any{"a": 1, "b": 2})
	second := CallPart("call_2", "Calculator_Mul", map[string]any{"a": 3, "b": 4})
	script := NewScripted(WriteCalls(XMLFunction{}, "Let me add.", first, second))
	script.ChunkSize = 5
	parallel := false
	var shown strings.Builder
	msg, err := WithTextProtocol(script, XMLFunction{}).Stream(t.Context(), &Request{Messages: []*toolfleetv1.Message{User("1+2?")}, Tools: calculatorTools(t), ParallelToolCalls: &parallel}, func(d Delta) error {
		shown.WriteString(d.Text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := callStrings(ToolCalls(msg)); !equalStrings(got, []string{`Calculator_Add(call_1)={"a":1,"b":2}`}) {
		t.Errorf("calls = %q, want only the first", got)
	}
	if shown.String() != "Let me add.\n\n" {
		t.Errorf("shown = %q", shown.String())
	}
	if got := MessageText(msg); got != "Let me add." {
		t.Errorf("message text = %q, want the text before the call", got)
	}
}
