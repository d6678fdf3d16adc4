package check

import (
	"errors"
	"fmt"
	"io"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// ParseDockerfile parses a Dockerfile with BuildKit's own parser and fails on
// anything BuildKit would refuse, and on every warning its linter raises (an
// undefined variable, a stage name in the wrong case, ...).
func ParseDockerfile(r io.Reader) ([]instructions.Stage, error) {
	res, err := parser.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	var warnings []error
	for _, w := range res.Warnings {
		warnings = append(warnings, fmt.Errorf("line %d: %s", w.Location.Start.Line, w.Short))
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		warnings = append(warnings, fmt.Errorf("line %d: %s: %s", line, rule, msg))
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		return nil, fmt.Errorf("instructions: %w", err)
	}
	if len(stages) == 0 {
		return nil, errors.New("no FROM")
	}
	return stages, errors.Join(warnings...)
}
