// Tests that drive models with the scripted model of sdk/llm/llmtest (an
// external test package: llmtest imports llm).
package llm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestScriptedExhausted(t *testing.T) {
	t.Parallel()
	m := llmtest.NewScripted(llmtest.SayText("only"))
	if _, err := m.Complete(t.Context(), &llm.Request{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(t.Context(), &llm.Request{}); !errors.Is(err, llm.ErrScriptExhausted) {
		t.Fatalf("err = %v, want ErrScriptExhausted", err)
	}
}

func TestWithRetry(t *testing.T) {
	t.Parallel()
	rateLimited := &llm.APIError{Provider: "test", StatusCode: 429, RetryAfter: 20 * time.Millisecond}
	badRequest := &llm.APIError{Provider: "test", StatusCode: 400}
	tests := []struct {
		name      string
		turns     []llmtest.ScriptTurn
		policy    llm.RetryPolicy
		wantErr   error
		wantCalls int
		minWait   time.Duration
	}{
		{"retries 429 honouring retry-after", []llmtest.ScriptTurn{{Err: rateLimited}, {Err: rateLimited}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}, nil, 3, 40 * time.Millisecond},
		{"gives up after attempts", []llmtest.ScriptTurn{{Err: rateLimited}, {Err: rateLimited}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond}, llm.ErrRetryable, 2, 0},
		{"does not retry 400", []llmtest.ScriptTurn{{Err: badRequest}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}, llm.ErrPermanent, 1, 0},
		{"caps the wait", []llmtest.ScriptTurn{{Err: &llm.APIError{StatusCode: 503, RetryAfter: time.Hour}}, llmtest.SayText("ok")}, llm.RetryPolicy{MaxAttempts: 2, MaxBackoff: 5 * time.Millisecond}, nil, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := llmtest.NewScripted(tt.turns...)
			start := time.Now()
			_, err := llm.WithRetry(s, tt.policy).Complete(t.Context(), &llm.Request{})
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
	s := llmtest.NewScripted(llmtest.ScriptTurn{Err: &llm.APIError{StatusCode: 429, RetryAfter: time.Minute}}, llmtest.SayText("late"))
	start := time.Now()
	_, err := llm.WithRetry(s, llm.RetryPolicy{MaxAttempts: 2, MaxBackoff: time.Minute}).Complete(ctx, &llm.Request{})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, llm.ErrRetryable) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("wait did not end with the context")
	}
}

// agentLoop runs model turns, executing calls, until a turn has no calls.
func agentLoop(ctx context.Context, m llm.Model, req *llm.Request, stream bool) ([]*toolfleetv1.Message, error) {
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
		calls := llm.ToolCalls(msg)
		if len(calls) == 0 {
			return req.Messages, nil
		}
		results := llm.NewMessage(toolfleetv1.Role_ROLE_TOOL)
		for _, c := range calls {
			results.Parts = append(results.Parts, runCalculator(c))
		}
		req.Messages = append(req.Messages, results)
	}
	return nil, errors.New("too many turns")
}

// lastResultIs checks that the model was sent the result of its previous calls.
func lastResultIs(want string) func(*llm.Request) error {
	return func(r *llm.Request) error {
		got := ""
		for _, m := range r.Messages {
			for _, p := range m.GetParts() {
				if res := p.GetToolResult(); res != nil {
					got = res.GetContent()
				}
			}
			if t := llm.MessageText(m); m.GetRole() == toolfleetv1.Role_ROLE_USER && strings.Contains(t, `"content":`) {
				got = t
			}
		}
		if !strings.Contains(got, want) {
			return fmt.Errorf("last tool result %q does not contain %q", got, want)
		}
		return nil
	}
}

// assertReachesTool decodes the call's key and revision the way a worker
// does (sdk/tool.DecodeInputStruct: strict protojson, then protovalidate)
// into KV.Get's input and checks the revision arrived unrounded.
func assertReachesTool(t *testing.T, c *toolfleetv1.ToolCall) {
	t.Helper()
	f := c.GetArguments().GetFields()
	input := &structpb.Struct{Fields: map[string]*structpb.Value{"key": f["key"], "revision": f["revision"]}}
	msg, verr, err := tool.DecodeInputStruct((&kvv1.GetRequest{}).ProtoReflect().Descriptor(), input)
	if err != nil || verr != nil {
		t.Fatalf("tool input %v: %v %v", input, verr, err)
	}
	if got := msg.(*kvv1.GetRequest).GetRevision(); got != 9007199254740993 {
		t.Errorf("revision reached the tool as %d", got)
	}
}

// runCalculator executes calculator calls the way an agent loop would.
func runCalculator(c *toolfleetv1.ToolCall) *toolfleetv1.Part {
	args := c.GetArguments().AsMap()
	a, _ := args["a"].(float64)
	b, _ := args["b"].(float64)
	switch c.GetName() {
	case "Calculator_Add":
		return llm.ResultPart(c.GetId(), c.GetName(), fmt.Sprint(a+b), false)
	case "Calculator_Mul":
		return llm.ResultPart(c.GetId(), c.GetName(), fmt.Sprint(a*b), false)
	}
	return llm.ResultPart(c.GetId(), c.GetName(), "unknown tool "+c.GetName(), true)
}
