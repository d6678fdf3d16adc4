package llm

import (
	"errors"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

func TestModelName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		toolkit, tool, want string
		wantErr             error
	}{
		{"Calculator", "Add", "Calculator_Add", nil},
		{"web-search", "Fetch", "web-search_Fetch", nil},
		{"Bad Kit", "Add", "", ErrInvalidName},
		{"Calc", string(make([]byte, 70)), "", ErrInvalidName},
	}
	for _, tt := range tests {
		got, err := ModelName(tt.toolkit, tt.tool)
		if !errors.Is(err, tt.wantErr) || got != tt.want {
			t.Errorf("ModelName(%q, %q) = %q, %v; want %q, %v", tt.toolkit, tt.tool, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	add := &toolfleetv1.ToolDefinition{Id: "Calculator.Add@1.0.0", Toolkit: "Calculator", Name: "Add", ModelName: "Calculator_Add"}
	names, err := NewNames([]*toolfleetv1.ToolDefinition{add})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"Calculator_Add", "Calculator.Add"} {
		got, err := names.Canonical(in)
		if err != nil || got != "Calculator.Add" {
			t.Errorf("Canonical(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := names.Lookup("Calculator_Sub"); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("unknown tool err = %v", err)
	}
	add2 := &toolfleetv1.ToolDefinition{Id: "Calculator.Add@2.0.0", ModelName: "Calculator_Add"}
	if _, err := NewNames([]*toolfleetv1.ToolDefinition{add, add2}); !errors.Is(err, ErrNameCollision) {
		t.Errorf("collision err = %v", err)
	}
	if _, err := NewNames([]*toolfleetv1.ToolDefinition{{ModelName: "a.b"}}); !errors.Is(err, ErrInvalidName) {
		t.Errorf("invalid name err = %v", err)
	}
}
