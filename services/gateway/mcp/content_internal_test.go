package mcp

import (
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
)

// valueOf is a response message as the gateway carries it: protojson (with
// unpopulated fields, as the gateway emits them) as a structpb.Value.
func valueOf(t *testing.T, m *conformancev1.MultipleContentTypesResponse) *structpb.Value {
	t.Helper()
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestContentBlocks(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\nfake")
	resp := &conformancev1.MultipleContentTypesResponse{Content: &toolfleetv1.ToolContent{Blocks: []*toolfleetv1.ContentBlock{
		{Kind: &toolfleetv1.ContentBlock_Text{Text: "hello"}},
		{Kind: &toolfleetv1.ContentBlock_Image{Image: &toolfleetv1.MediaContent{Data: png, MimeType: "image/png"}}},
		{Kind: &toolfleetv1.ContentBlock_Audio{Audio: &toolfleetv1.MediaContent{Data: []byte("RIFF"), MimeType: "audio/wav"}}},
		{Kind: &toolfleetv1.ContentBlock_Resource{Resource: &toolfleetv1.EmbeddedResource{Uri: "test://r", MimeType: "text/plain",
			Body: &toolfleetv1.EmbeddedResource_Text{Text: "body"}}}},
		{Kind: &toolfleetv1.ContentBlock_Resource{Resource: &toolfleetv1.EmbeddedResource{Uri: "test://b",
			Body: &toolfleetv1.EmbeddedResource_Blob{Blob: []byte{1, 2}}}}},
	}}}
	res, err := result(&toolfleetv1.CallToolResponse{Success: true, ToolId: "Conformance.MultipleContentTypes@1.0.0",
		Outcome: &toolfleetv1.CallToolResponse_Value{Value: valueOf(t, resp)}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.StructuredContent != nil || res.IsError {
		t.Errorf("structuredContent %v, isError %v: want neither", res.StructuredContent, res.IsError)
	}
	got, err := json.Marshal(res.Content)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []map[string]any
	if err := json.Unmarshal(got, &blocks); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"text":"hello","type":"text"}`,
		`{"data":"iVBORw0KGgpmYWtl","mimeType":"image/png","type":"image"}`,
		`{"data":"UklGRg==","mimeType":"audio/wav","type":"audio"}`,
		`{"resource":{"mimeType":"text/plain","text":"body","uri":"test://r"},"type":"resource"}`,
		`{"resource":{"blob":"AQI=","uri":"test://b"},"type":"resource"}`,
	}
	if len(blocks) != len(want) {
		t.Fatalf("blocks: %s", got)
	}
	for i, b := range blocks {
		one, _ := json.Marshal(b) // keys sorted
		if string(one) != want[i] {
			t.Errorf("block %d: %s, want %s", i, one, want[i])
		}
	}

	// Without the content flag, the same value is data: JSON text and structuredContent.
	plain, err := result(&toolfleetv1.CallToolResponse{Success: true, Outcome: &toolfleetv1.CallToolResponse_Value{Value: valueOf(t, resp)}}, false)
	if err != nil || plain.StructuredContent == nil || !strings.Contains(plain.Content[0].(*sdk.TextContent).Text, `"blocks"`) {
		t.Errorf("plain result: %+v %v", plain, err)
	}
}

func TestContentBlocksRefuseBrokenBlocks(t *testing.T) {
	t.Parallel()
	for name, b := range map[string]*toolfleetv1.ContentBlock{
		"no kind":              {},
		"image without type":   {Kind: &toolfleetv1.ContentBlock_Image{Image: &toolfleetv1.MediaContent{Data: []byte{1}}}},
		"audio without type":   {Kind: &toolfleetv1.ContentBlock_Audio{Audio: &toolfleetv1.MediaContent{Data: []byte{1}}}},
		"resource without uri": {Kind: &toolfleetv1.ContentBlock_Resource{Resource: &toolfleetv1.EmbeddedResource{Body: &toolfleetv1.EmbeddedResource_Text{Text: "x"}}}},
	} {
		v := valueOf(t, &conformancev1.MultipleContentTypesResponse{Content: &toolfleetv1.ToolContent{Blocks: []*toolfleetv1.ContentBlock{b}}})
		if _, err := result(&toolfleetv1.CallToolResponse{Success: true, Outcome: &toolfleetv1.CallToolResponse_Value{Value: v}}, true); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// An unset content field is an empty result: one empty text block.
	v := valueOf(t, &conformancev1.MultipleContentTypesResponse{})
	res, err := result(&toolfleetv1.CallToolResponse{Success: true, Outcome: &toolfleetv1.CallToolResponse_Value{Value: v}}, true)
	if err != nil || len(res.Content) != 1 {
		t.Errorf("empty content: %+v %v", res, err)
	}
}
