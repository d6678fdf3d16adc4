package tool

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// TestAskInputWire: a question travels as FAILED_PRECONDITION with a
// WorkerInputRequired detail and reads back the same on the caller's side; a
// malformed one is Internal (a worker bug) and no question.
func TestAskInputWire(t *testing.T) {
	t.Parallel()
	q := AskInput(Elicit("name", "Who?", map[string]any{"type": "object"}), Sample("s", map[string]any{"maxTokens": 5}), ListRoots("r")).WithState([]byte("st"))
	st := status.Convert(q) // as grpc-go sends it
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("code %s", st.Code())
	}
	got, ok := AsInputRequired(st.Err())
	if !ok || len(got.GetRequests()) != 3 || string(got.GetState()) != "st" ||
		got.GetRequests()["name"].GetMethod() != MethodElicit || got.GetRequests()["s"].GetMethod() != MethodSample ||
		got.GetRequests()["r"].GetMethod() != MethodListRoots || got.GetRequests()["name"].GetParams().GetFields()["message"].GetStringValue() != "Who?" {
		t.Fatalf("read back %v %v", got, ok)
	}
	if _, ok := AsInputRequired(status.Error(codes.FailedPrecondition, "other")); ok {
		t.Fatal("a plain FAILED_PRECONDITION read as a question")
	}
	many := make([]InputRequest, MaxInputRequests+1)
	for i := range many {
		many[i] = ListRoots(strings.Repeat("k", i+1))
	}
	for name, bad := range map[string]*InputRequiredError{
		"none":          AskInput(),
		"too many":      AskInput(many...),
		"duplicate key": AskInput(ListRoots("a"), ListRoots("a")),
		"empty key":     AskInput(ListRoots("")),
		"bad params":    AskInput(Sample("s", map[string]any{"x": make(chan int)})),
		"state too big": AskInput(ListRoots("a")).WithState(make([]byte, MaxInputStateBytes+1)),
	} {
		if c := status.Code(bad); c != codes.Internal {
			t.Errorf("%s: code %s, want Internal", name, c)
		}
		if _, ok := AsInputRequired(status.Convert(bad).Err()); ok {
			t.Errorf("%s: read as a question", name)
		}
	}
}

// TestInputAnswersHeader: answers put on a call by the gateway reach the
// handler; oversized or malformed ones are refused.
func TestInputAnswersHeader(t *testing.T) {
	t.Parallel()
	resp, _ := structpb.NewStruct(map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}})
	a := &toolfleetv1.InputAnswers{Responses: map[string]*structpb.Struct{"name": resp}, State: []byte("s1"), HasState: true,
		ClientInput: []toolfleetv1.ClientCapability{toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ELICITATION}}
	out, err := OutgoingInputAnswers(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := metadata.FromOutgoingContext(out)
	in := metadata.NewIncomingContext(context.Background(), md)
	var seen context.Context
	handler := func(ctx context.Context, _ any) (any, error) { seen = ctx; return nil, nil }
	if _, err := inputInterceptor()(in, nil, &grpc.UnaryServerInfo{}, handler); err != nil {
		t.Fatal(err)
	}
	got, ok := InputResponse(seen, "name")
	state, has := RequestState(seen)
	if !ok || got["content"].(map[string]any)["name"] != "Ada" || string(state) != "s1" || !has ||
		!CallerCan(seen, toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ELICITATION) || CallerCan(seen, toolfleetv1.ClientCapability_CLIENT_CAPABILITY_SAMPLING) {
		t.Fatalf("handler saw %v %v %q %v", got, ok, state, has)
	}
	// A handler on a plain grpc.Server reads the header itself.
	if got, ok := InputResponse(in, "name"); !ok || got["action"] != "accept" {
		t.Fatalf("plain server: %v %v", got, ok)
	}
	if _, ok := InputResponse(context.Background(), "name"); ok {
		t.Fatal("an answer without a header")
	}

	big, _ := structpb.NewStruct(map[string]any{"x": strings.Repeat("y", MaxInputAnswersBytes)})
	if _, err := OutgoingInputAnswers(context.Background(), &toolfleetv1.InputAnswers{Responses: map[string]*structpb.Struct{"x": big}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("oversized answers: %v, want InvalidArgument", err)
	}
	for name, v := range map[string]string{"malformed": "\xff\xff\xff", "oversized": strings.Repeat("a", MaxInputAnswersBytes+1)} {
		in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(InputAnswersKey, v))
		if _, err := inputInterceptor()(in, nil, &grpc.UnaryServerInfo{}, handler); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s header: %v, want InvalidArgument", name, err)
		}
	}
}
