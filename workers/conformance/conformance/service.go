// Package conformance serves the Conformance toolkit: the fixture tools of the
// official MCP conformance suite (@modelcontextprotocol/conformance), under
// the MCP names the suite calls (the contract's mcp_name), with the content the
// suite expects. Its results are toolfleet.v1.ToolContent blocks, which the
// gateway's MCP surface shows as text, image, audio and embedded-resource
// content. `toolfleet dev --conformance` serves it; nothing else needs it.
package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"time"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolfleet/toolfleet/sdk/tool"
)

// The texts the suite expects.
const (
	SimpleText       = "This is a simple text response for testing."
	ErrorText        = "This tool intentionally returns an error for testing"
	EmbeddedText     = "This is an embedded resource content."
	EmbeddedURI      = "test://embedded-resource"
	MixedResourceURI = "test://mixed-content-resource"
)

// ProgressRun is how long test_tool_with_progress runs: long enough for the
// gateway's progress notifications (one a second, mcp.DefaultProgressInterval)
// to reach the caller three times.
const ProgressRun = 3500 * time.Millisecond

// Service implements conformancev1.ConformanceServiceServer.
type Service struct {
	conformancev1.UnimplementedConformanceServiceServer
	png, wav []byte
	progress time.Duration
}

// New returns the service. The logging fixtures log for their caller
// (tool.CallerLogger), which also writes to the worker's log.
func New() *Service {
	return &Service{png: redPixel(), wav: silence(), progress: ProgressRun}
}

// redPixel is a 1x1 red PNG.
func redPixel() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(fmt.Sprintf("conformance: encode a 1x1 PNG: %v", err)) // cannot fail on an in-memory image
	}
	return b.Bytes()
}

// silence is a tenth of a second of silent 8 kHz 16-bit mono PCM as WAV.
func silence() []byte {
	const rate, samples = 8000, 800
	data := samples * 2
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	w(uint32(36 + data))
	b.WriteString("WAVEfmt ")
	w(uint32(16))       // fmt chunk size
	w(uint16(1))        // PCM
	w(uint16(1))        // mono
	w(uint32(rate))     // sample rate
	w(uint32(rate * 2)) // byte rate
	w(uint16(2))        // block align
	w(uint16(16))       // bits per sample
	b.WriteString("data")
	w(uint32(data))
	b.Write(make([]byte, data))
	return b.Bytes()
}

func text(s string) *toolfleetv1.ContentBlock {
	return &toolfleetv1.ContentBlock{Kind: &toolfleetv1.ContentBlock_Text{Text: s}}
}

func (s *Service) image() *toolfleetv1.ContentBlock {
	return &toolfleetv1.ContentBlock{Kind: &toolfleetv1.ContentBlock_Image{Image: &toolfleetv1.MediaContent{Data: s.png, MimeType: "image/png"}}}
}

func resource(uri, mime, body string) *toolfleetv1.ContentBlock {
	return &toolfleetv1.ContentBlock{Kind: &toolfleetv1.ContentBlock_Resource{Resource: &toolfleetv1.EmbeddedResource{
		Uri: uri, MimeType: mime, Body: &toolfleetv1.EmbeddedResource_Text{Text: body}}}}
}

func content(blocks ...*toolfleetv1.ContentBlock) *toolfleetv1.ToolContent {
	return &toolfleetv1.ToolContent{Blocks: blocks}
}

// SimpleText is test_simple_text.
func (s *Service) SimpleText(context.Context, *conformancev1.SimpleTextRequest) (*conformancev1.SimpleTextResponse, error) {
	return &conformancev1.SimpleTextResponse{Content: content(text(SimpleText))}, nil
}

// ImageContent is test_image_content.
func (s *Service) ImageContent(context.Context, *conformancev1.ImageContentRequest) (*conformancev1.ImageContentResponse, error) {
	return &conformancev1.ImageContentResponse{Content: content(s.image())}, nil
}

// AudioContent is test_audio_content.
func (s *Service) AudioContent(context.Context, *conformancev1.AudioContentRequest) (*conformancev1.AudioContentResponse, error) {
	return &conformancev1.AudioContentResponse{Content: content(&toolfleetv1.ContentBlock{
		Kind: &toolfleetv1.ContentBlock_Audio{Audio: &toolfleetv1.MediaContent{Data: s.wav, MimeType: "audio/wav"}}})}, nil
}

// EmbeddedResource is test_embedded_resource.
func (s *Service) EmbeddedResource(context.Context, *conformancev1.EmbeddedResourceRequest) (*conformancev1.EmbeddedResourceResponse, error) {
	return &conformancev1.EmbeddedResourceResponse{Content: content(resource(EmbeddedURI, "text/plain", EmbeddedText))}, nil
}

// MultipleContentTypes is test_multiple_content_types.
func (s *Service) MultipleContentTypes(context.Context, *conformancev1.MultipleContentTypesRequest) (*conformancev1.MultipleContentTypesResponse, error) {
	return &conformancev1.MultipleContentTypesResponse{Content: content(
		text("Multiple content types test:"),
		s.image(),
		resource(MixedResourceURI, "application/json", `{"test":"data","value":123}`),
	)}, nil
}

// ErrorHandling is test_error_handling: always an execution error.
func (s *Service) ErrorHandling(context.Context, *conformancev1.ErrorHandlingRequest) (*conformancev1.ErrorHandlingResponse, error) {
	return nil, tool.NewError(ErrorText)
}

// WithProgress is test_tool_with_progress: it runs for ProgressRun (or until
// the call is cancelled), and the gateway reports progress meanwhile.
func (s *Service) WithProgress(ctx context.Context, _ *conformancev1.WithProgressRequest) (*conformancev1.WithProgressResponse, error) {
	t := time.NewTimer(s.progress)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, tool.NewError("cancelled before it finished", tool.WithDeveloperMessage(ctx.Err().Error()))
	case <-t.C:
	}
	return &conformancev1.WithProgressResponse{Content: content(text(fmt.Sprintf("Finished after %s.", s.progress)))}, nil
}

// WithLogging is test_tool_with_logging.
func (s *Service) WithLogging(ctx context.Context, _ *conformancev1.WithLoggingRequest) (*conformancev1.WithLoggingResponse, error) {
	if err := s.logThree(ctx); err != nil {
		return nil, err
	}
	return &conformancev1.WithLoggingResponse{Content: content(text("Tool execution completed; it logged three lines for its caller."))}, nil
}

// LoggingTool is test_logging_tool.
func (s *Service) LoggingTool(ctx context.Context, _ *conformancev1.LoggingToolRequest) (*conformancev1.LoggingToolResponse, error) {
	if err := s.logThree(ctx); err != nil {
		return nil, err
	}
	return &conformancev1.LoggingToolResponse{Content: content(text("Tool execution completed; it logged three lines for its caller."))}, nil
}

// logThree logs the three lines the suite names for the caller, 50ms apart
// (tool.CallerLogger: the gateway relays them as notifications/message).
func (s *Service) logThree(ctx context.Context) error {
	for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
		if i > 0 {
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return tool.NewError("cancelled before it finished", tool.WithDeveloperMessage(ctx.Err().Error()))
			case <-t.C:
			}
		}
		tool.CallerLogger(ctx).InfoContext(ctx, msg)
	}
	return nil
}

// StreamingElicitation is test_streaming_elicitation: it runs once approved.
func (s *Service) StreamingElicitation(context.Context, *conformancev1.StreamingElicitationRequest) (*conformancev1.StreamingElicitationResponse, error) {
	return &conformancev1.StreamingElicitationResponse{Content: content(text("Approved and run."))}, nil
}

// Greet is greet (the tasks scenarios' synchronous tool).
func (s *Service) Greet(_ context.Context, req *conformancev1.GreetRequest) (*conformancev1.GreetResponse, error) {
	return &conformancev1.GreetResponse{Content: content(text("Hello, " + req.GetName() + "!"))}, nil
}

// wait sleeps d, or fails when the call is cancelled first.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return tool.NewError("cancelled before it finished", tool.WithDeveloperMessage(ctx.Err().Error()))
	case <-t.C:
		return nil
	}
}

// SlowCompute is slow_compute: it sleeps for the seconds asked (the contract
// bounds them), or until the call is cancelled.
func (s *Service) SlowCompute(ctx context.Context, req *conformancev1.SlowComputeRequest) (*conformancev1.SlowComputeResponse, error) {
	if err := wait(ctx, time.Duration(req.GetSeconds())*time.Second); err != nil {
		return nil, err
	}
	return &conformancev1.SlowComputeResponse{Content: content(text(fmt.Sprintf("Computed %q after %ds.", req.GetLabel(), req.GetSeconds())))}, nil
}

// FailingJobText is what failing_job fails with.
const FailingJobText = "This job intentionally fails for testing"

// FailingJob is failing_job: an execution error after about a second.
func (s *Service) FailingJob(ctx context.Context, _ *conformancev1.FailingJobRequest) (*conformancev1.FailingJobResponse, error) {
	if err := wait(ctx, time.Second); err != nil {
		return nil, err
	}
	return nil, tool.NewError(FailingJobText)
}

// ProtocolErrorJob is protocol_error_job: the worker cannot take the call
// (UNIMPLEMENTED), which the gateway reports as its own failure (a JSON-RPC
// error; a failed task), not as the tool's answer.
func (s *Service) ProtocolErrorJob(context.Context, *conformancev1.ProtocolErrorJobRequest) (*conformancev1.ProtocolErrorJobResponse, error) {
	return nil, status.Error(codes.Unimplemented, "protocol_error_job never runs: it is the fixture of a protocol error")
}

// ConfirmDelete is confirm_delete: it runs only once a human approved the
// call (the contract requires approval), and deletes nothing.
func (s *Service) ConfirmDelete(_ context.Context, req *conformancev1.ConfirmDeleteRequest) (*conformancev1.ConfirmDeleteResponse, error) {
	return &conformancev1.ConfirmDeleteResponse{Content: content(text(fmt.Sprintf("Approved: %q would be deleted (nothing was).", req.GetFilename())))}, nil
}
