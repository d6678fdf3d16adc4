package conformance_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image/png"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/conformance/conformance"
)

func TestFixtures(t *testing.T) {
	t.Parallel()
	s := conformance.New()
	ctx := t.Context()

	img, err := s.ImageContent(ctx, &conformancev1.ImageContentRequest{})
	if err != nil {
		t.Fatal(err)
	}
	media := img.GetContent().GetBlocks()[0].GetImage()
	pic, err := png.Decode(bytes.NewReader(media.GetData()))
	if err != nil || media.GetMimeType() != "image/png" || pic.Bounds().Dx() != 1 {
		t.Fatalf("image: %v, %s", err, media.GetMimeType())
	}
	if r, g, b, _ := pic.At(0, 0).RGBA(); r != 0xffff || g != 0 || b != 0 {
		t.Errorf("pixel %d %d %d, want red", r, g, b)
	}

	audio, err := s.AudioContent(ctx, &conformancev1.AudioContentRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wav := audio.GetContent().GetBlocks()[0].GetAudio().GetData()
	if len(wav) < 44 || string(wav[:4]) != "RIFF" || string(wav[8:16]) != "WAVEfmt " ||
		binary.LittleEndian.Uint32(wav[4:8]) != uint32(len(wav)-8) || binary.LittleEndian.Uint32(wav[40:44]) != uint32(len(wav)-44) {
		t.Errorf("audio is not a consistent WAV (%d bytes)", len(wav))
	}

	mixed, err := s.MultipleContentTypes(ctx, &conformancev1.MultipleContentTypesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, b := range mixed.GetContent().GetBlocks() {
		switch b.GetKind().(type) {
		case *toolfleetv1.ContentBlock_Text:
			kinds = append(kinds, "text")
		case *toolfleetv1.ContentBlock_Image:
			kinds = append(kinds, "image")
		case *toolfleetv1.ContentBlock_Resource:
			kinds = append(kinds, "resource:"+b.GetResource().GetUri())
		}
	}
	if want := "[text image resource:" + conformance.MixedResourceURI + "]"; fmt.Sprint(kinds) != want {
		t.Errorf("mixed content %s, want %s", fmt.Sprint(kinds), want)
	}

	_, err = s.ErrorHandling(ctx, &conformancev1.ErrorHandlingRequest{})
	if te, ok := tool.AsToolError(err); !ok || te.GetMessage() != conformance.ErrorText {
		t.Errorf("error handling: %v, want the execution error %q", err, conformance.ErrorText)
	}

	// A cancelled progress run stops at once.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.WithProgress(cctx, &conformancev1.WithProgressRequest{}); err == nil || time.Since(start) > conformance.ProgressRun/2 {
		t.Errorf("cancelled progress run: %v after %s", err, time.Since(start))
	}
}

// The tasks scenarios' fixtures: greet answers at once, slow_compute sleeps
// and stops when cancelled, failing_job is an execution error after a second,
// and protocol_error_job a status the gateway fails the call with.
func TestTaskFixtures(t *testing.T) {
	t.Parallel()
	s := conformance.New()
	ctx := t.Context()
	g, err := s.Greet(ctx, &conformancev1.GreetRequest{Name: "World"})
	if err != nil || g.GetContent().GetBlocks()[0].GetText() != "Hello, World!" {
		t.Errorf("greet: %v, %v", g, err)
	}
	sc, err := s.SlowCompute(ctx, &conformancev1.SlowComputeRequest{Seconds: 0, Label: "now"})
	if err != nil || !strings.Contains(sc.GetContent().GetBlocks()[0].GetText(), `"now"`) {
		t.Errorf("slow_compute 0 s: %v, %v", sc, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	began := time.Now()
	if _, err := s.SlowCompute(cctx, &conformancev1.SlowComputeRequest{Seconds: 60}); err == nil || time.Since(began) > 5*time.Second {
		t.Errorf("cancelled slow_compute: %v after %s, want an error at once", err, time.Since(began))
	}
	began = time.Now()
	_, err = s.FailingJob(ctx, &conformancev1.FailingJobRequest{})
	if te, ok := tool.AsToolError(err); !ok || te.GetMessage() != conformance.FailingJobText || time.Since(began) < time.Second {
		t.Errorf("failing_job: %v after %s, want its execution error after a second", err, time.Since(began))
	}
	if _, err := s.ProtocolErrorJob(ctx, &conformancev1.ProtocolErrorJobRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("protocol_error_job: %v, want UNIMPLEMENTED", err)
	}
	cd, err := s.ConfirmDelete(ctx, &conformancev1.ConfirmDeleteRequest{Filename: "a.txt"})
	if err != nil || !strings.Contains(cd.GetContent().GetBlocks()[0].GetText(), `"a.txt"`) {
		t.Errorf("confirm_delete: %v, %v", cd, err)
	}
}

// The tasks fixtures that ask: multi_input asks two questions in one round
// and answers with both; test_tool_with_task asks for a name, then greets it.
func TestTaskQuestionFixtures(t *testing.T) {
	t.Parallel()
	s := conformance.New()
	ctx := t.Context()
	answer := func(fields map[string]map[string]any) context.Context {
		a := &toolfleetv1.InputAnswers{Responses: map[string]*structpb.Struct{}}
		for key, content := range fields {
			r, err := structpb.NewStruct(map[string]any{"action": "accept", "content": content})
			if err != nil {
				t.Fatal(err)
			}
			a.Responses[key] = r
		}
		return tool.WithInputAnswers(ctx, a)
	}
	asked := func(err error) []string {
		var ir *tool.InputRequiredError
		if !errors.As(err, &ir) {
			t.Fatalf("%v, want the tool to ask", err)
		}
		return slices.Sorted(maps.Keys(ir.Detail().GetRequests()))
	}
	_, err := s.MultiInput(ctx, &conformancev1.MultiInputRequest{})
	if got := asked(err); fmt.Sprint(got) != "[confirm name]" {
		t.Errorf("multi_input asked %v, want [confirm name] at once", got)
	}
	_, err = s.MultiInput(answer(map[string]map[string]any{"name": {"name": "Ann"}}), &conformancev1.MultiInputRequest{})
	if got := asked(err); fmt.Sprint(got) != "[confirm name]" {
		t.Errorf("multi_input with one answer asked %v, want both again", got)
	}
	mi, err := s.MultiInput(answer(map[string]map[string]any{"name": {"name": "Ann"}, "confirm": {"confirm": true}}), &conformancev1.MultiInputRequest{})
	if err != nil || mi.GetContent().GetBlocks()[0].GetText() != "Got name Ann and confirm true." {
		t.Errorf("multi_input answered: %v, %v", mi, err)
	}
	_, err = s.WithTask(ctx, &conformancev1.WithTaskRequest{})
	if got := asked(err); fmt.Sprint(got) != "[user_name]" {
		t.Errorf("test_tool_with_task asked %v, want [user_name]", got)
	}
	wt, err := s.WithTask(answer(map[string]map[string]any{"user_name": {"name": "Alice"}}), &conformancev1.WithTaskRequest{})
	if err != nil || !strings.Contains(wt.GetContent().GetBlocks()[0].GetText(), "Alice") {
		t.Errorf("test_tool_with_task answered: %v, %v", wt, err)
	}
}
