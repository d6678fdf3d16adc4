package toolcall

import (
	"context"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Directory is what resolving a selection of tools asks the gateway
// (*client.Client is one). Each call is made as the principal in ctx.
type Directory interface {
	GetTool(ctx context.Context, toolID string) (*toolfleetv1.ToolDefinition, error)
	Tools(ctx context.Context, req *toolfleetv1.ListToolsRequest) ([]*toolfleetv1.ToolDefinition, error)
}

// Searcher is a Directory that can also search tools (for Selection.Search).
type Searcher interface {
	SearchTools(ctx context.Context, req *toolfleetv1.SearchToolsRequest) (*toolfleetv1.SearchToolsResponse, error)
}

// Selection is the tools a run or a program asks for.
type Selection struct {
	// Patterns are tool ids and globs, in the order wanted.
	Patterns []string
	// Search, when set, adds the gateway's best matches for this query
	// (at most SearchLimit of them) after the patterns' tools.
	Search      string
	SearchLimit int
	// Max bounds the tools selected: patterns that select more are refused.
	Max int
}

// IsExact reports whether a pattern names one tool rather than a glob: it
// carries a version ("Calculator.Add@1") or no glob character.
func IsExact(pattern string) bool {
	return strings.Contains(pattern, "@") || !strings.ContainsAny(pattern, "*?[")
}

// Resolve is the one rule by which runs and programs get their tools:
//
//   - an exact pattern (see [IsExact]) is asked for with GetTool; a glob is
//     the gateway's listing filtered by it (matched against "Toolkit.Name"
//     and the model-facing name). Both answer UNAVAILABLE while the gateway
//     is still loading the workers that may serve them, which is retried;
//   - a pattern that selects nothing, or a tool the gateway refuses, fails
//     for good (ErrTypeConfig): the caller named a tool that is not there;
//   - tools keep the order of the patterns that selected them, each once;
//   - more than Max tools from the patterns fail for good: nothing asked for
//     by name or glob is dropped silently;
//   - search results come last, each once, as long as there is room under Max
//     (they are suggestions, not requests).
func Resolve(ctx context.Context, dir Directory, sel Selection) ([]*toolfleetv1.ToolDefinition, error) {
	var out []*toolfleetv1.ToolDefinition
	seen := map[string]bool{}
	add := func(d *toolfleetv1.ToolDefinition) {
		if !seen[d.GetId()] {
			seen[d.GetId()] = true
			out = append(out, d)
		}
	}
	for _, p := range sel.Patterns {
		var defs []*toolfleetv1.ToolDefinition
		if IsExact(p) {
			d, err := dir.GetTool(ctx, p)
			if err != nil {
				return nil, Refusal(fmt.Sprintf("tool %q", p), err)
			}
			defs = []*toolfleetv1.ToolDefinition{d}
		} else {
			var err error
			if defs, err = dir.Tools(ctx, &toolfleetv1.ListToolsRequest{Filter: p}); err != nil {
				return nil, Refusal(fmt.Sprintf("tools %q", p), err)
			}
		}
		if len(defs) == 0 {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("no tool matches %q", p), ErrTypeConfig, nil)
		}
		for _, d := range defs {
			add(d)
		}
		if sel.Max > 0 && len(out) > sel.Max {
			return nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("more than %d tools match %q: name fewer", sel.Max, sel.Patterns), ErrTypeConfig, nil)
		}
	}
	if sel.Search == "" {
		return out, nil
	}
	s, ok := dir.(Searcher)
	if !ok {
		return nil, temporal.NewNonRetryableApplicationError("tool search is not available here", ErrTypeConfig, nil)
	}
	resp, err := s.SearchTools(ctx, &toolfleetv1.SearchToolsRequest{Query: sel.Search, Limit: int32(sel.SearchLimit)})
	if err != nil {
		return nil, Refusal("search tools", err)
	}
	for _, r := range resp.GetResults() {
		if sel.Max > 0 && len(out) >= sel.Max {
			break
		}
		add(r.GetTool())
	}
	return out, nil
}
