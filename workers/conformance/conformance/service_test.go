package conformance_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"image/png"
	"testing"
	"time"

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
