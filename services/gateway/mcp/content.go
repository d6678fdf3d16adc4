package mcp

import (
	"errors"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// contentBlocks renders the value of a tool whose output message holds only a
// toolfleet.v1.ToolContent (ToolDefinition.content_result) as MCP content
// blocks, in order. A block that breaks MCP's rules (no kind, media without a
// type, a resource without a URI) fails the result: the tool broke its
// contract, and a client must not get half of it.
func contentBlocks(v *structpb.Value) ([]sdk.Content, error) {
	fields := v.GetStructValue().GetFields()
	if len(fields) != 1 {
		return nil, fmt.Errorf("content result with %d fields, want 1 (a toolfleet.v1.ToolContent)", len(fields))
	}
	for _, inner := range fields {
		v = inner
	}
	if _, null := v.GetKind().(*structpb.Value_NullValue); null {
		v = structpb.NewStructValue(&structpb.Struct{})
	}
	raw, err := protojson.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("content result: %w", err)
	}
	var tc toolfleetv1.ToolContent
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &tc); err != nil {
		return nil, fmt.Errorf("content result is not a toolfleet.v1.ToolContent: %w", err)
	}
	out := make([]sdk.Content, 0, len(tc.GetBlocks()))
	for i, b := range tc.GetBlocks() {
		c, err := contentBlock(b)
		if err != nil {
			return nil, fmt.Errorf("content block %d: %w", i, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		// MCP wants a content array; an empty result is one empty text block.
		out = append(out, &sdk.TextContent{})
	}
	return out, nil
}

func contentBlock(b *toolfleetv1.ContentBlock) (sdk.Content, error) {
	switch k := b.GetKind().(type) {
	case *toolfleetv1.ContentBlock_Text:
		return &sdk.TextContent{Text: k.Text}, nil
	case *toolfleetv1.ContentBlock_Image:
		if k.Image.GetMimeType() == "" {
			return nil, errors.New("image without mime_type")
		}
		return &sdk.ImageContent{Data: k.Image.GetData(), MIMEType: k.Image.GetMimeType()}, nil
	case *toolfleetv1.ContentBlock_Audio:
		if k.Audio.GetMimeType() == "" {
			return nil, errors.New("audio without mime_type")
		}
		return &sdk.AudioContent{Data: k.Audio.GetData(), MIMEType: k.Audio.GetMimeType()}, nil
	case *toolfleetv1.ContentBlock_Resource:
		r := k.Resource
		if r.GetUri() == "" {
			return nil, errors.New("resource without uri")
		}
		rc := &sdk.ResourceContents{URI: r.GetUri(), MIMEType: r.GetMimeType(), Text: r.GetText(), Blob: r.GetBlob()}
		if _, isBlob := r.GetBody().(*toolfleetv1.EmbeddedResource_Blob); isBlob && rc.Blob == nil {
			rc.Blob = []byte{}
		}
		return &sdk.EmbeddedResource{Resource: rc}, nil
	default:
		return nil, errors.New("no kind set (text, image, audio or resource)")
	}
}
