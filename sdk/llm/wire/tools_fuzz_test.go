package wire

import (
	"errors"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// typedToolsError reports whether err is one of the errors a tools body may
// fail with.
func typedToolsError(err error) bool {
	return errors.Is(err, llm.ErrMalformed) || errors.Is(err, llm.ErrInvalidArguments) || errors.Is(err, llm.ErrInvalidName)
}

// FuzzParseTools reads any body as each format's tools array. Properties: a
// refusal is typed; accepted tools render, and parsing the rendering gives
// back as many tools with the same model names.
func FuzzParseTools(f *testing.F) {
	for i, ft := range Formats() {
		f.Add(uint8(i), []byte(`[]`))
		if b, err := ft.RenderTools([]*toolfleetv1.ToolDefinition{convtest.TypedTool(f)}, false); err == nil {
			f.Add(uint8(i), b)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		ft := Formats()[int(which)%len(Formats())]
		defs, err := ft.ParseTools(body)
		if err != nil {
			if !typedToolsError(err) {
				t.Fatalf("%s %q: untyped error %v", ft.Name(), body, err)
			}
			return
		}
		r, err := ft.RenderTools(defs, false)
		if err != nil {
			if !typedToolsError(err) {
				t.Fatalf("%s %q: render: untyped error %v", ft.Name(), body, err)
			}
			return
		}
		again, err := ft.ParseTools(r)
		if err != nil || len(again) != len(defs) {
			t.Fatalf("%s %q: rendering %q parses to %d tools (%v), want %d", ft.Name(), body, r, len(again), err, len(defs))
		}
		for i := range defs {
			if again[i].GetModelName() != defs[i].GetModelName() {
				t.Fatalf("%s %q: tool %d named %q, want %q", ft.Name(), body, i, again[i].GetModelName(), defs[i].GetModelName())
			}
		}
	})
}
