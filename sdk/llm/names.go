package llm

import (
	"fmt"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// ModelName returns the model-facing name of Toolkit.Tool: the dot becomes an
// underscore ("Calculator.Add" → "Calculator_Add"). It fails with
// ErrInvalidName when the result is not accepted by OpenAI and Anthropic.
func ModelName(toolkit, tool string) (string, error) {
	name := toolkit + "_" + tool
	if !canon.ModelNamePattern.MatchString(name) {
		return "", fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return name, nil
}

// Names is the reversible mapping between model-facing names and tool
// definitions. Build it once per tool set with NewNames.
type Names struct {
	byModel map[string]*toolfleetv1.ToolDefinition
}

// NewNames indexes defs by ModelName. It fails with ErrInvalidName for a
// name models would reject and ErrNameCollision when two definitions share
// one (two versions of the same tool count as a collision: a model cannot
// choose between them).
func NewNames(defs []*toolfleetv1.ToolDefinition) (*Names, error) {
	n := &Names{byModel: make(map[string]*toolfleetv1.ToolDefinition, len(defs))}
	for _, d := range defs {
		name := d.GetModelName()
		if !canon.ModelNamePattern.MatchString(name) {
			return nil, fmt.Errorf("%w: %q (tool %s)", ErrInvalidName, name, d.GetId())
		}
		if prev, ok := n.byModel[name]; ok {
			return nil, fmt.Errorf("%w: %q used by %s and %s", ErrNameCollision, name, prev.GetId(), d.GetId())
		}
		n.byModel[name] = d
	}
	return n, nil
}

// Lookup returns the definition a model-facing name refers to. Models
// sometimes echo the dotted canonical name ("Calculator.Add"); that is
// accepted too. Unknown names fail with ErrUnknownTool.
func (n *Names) Lookup(name string) (*toolfleetv1.ToolDefinition, error) {
	if d, ok := n.byModel[name]; ok {
		return d, nil
	}
	if d, ok := n.byModel[strings.ReplaceAll(name, ".", "_")]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownTool, name)
}

// Canonical returns "Toolkit.Tool" for a model-facing name.
func (n *Names) Canonical(name string) (string, error) {
	d, err := n.Lookup(name)
	if err != nil {
		return "", err
	}
	return d.GetToolkit() + "." + d.GetName(), nil
}
