package program

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// fileOptions is the dialect programs are written in: while loops, top-level
// control flow, set and global reassignment on; recursion off (a recursive call
// is a runtime error); load statements are refused by the loader.
var fileOptions = &syntax.FileOptions{
	Set:             true,
	While:           true,
	TopLevelControl: true,
	GlobalReassign:  true,
	Recursion:       false,
}

// builtinNames are the globals every program gets besides the tool stubs and
// Starlark's universe.
var builtinNames = []string{"args", "call", "parallel", "json", "fail"}

// Check is what [Compile] learns of a script without running it.
type Check struct {
	// Calls are the tool ids named by literal call("…") arguments, in order of
	// first appearance.
	Calls []string `json:"calls,omitempty"`
	// Stubs are the names called as functions that the script neither defines
	// nor gets from Starlark: tool stubs such as "Calculator_Add", in order of
	// first appearance.
	Stubs []string `json:"stubs,omitempty"`
	// HasResult reports whether the script assigns a top-level `result`.
	HasResult bool `json:"has_result"`
	// Sites are the calls whose tool the source names (stubs and call()
	// with a literal id), with their arguments, in source order.
	Sites []CallSite `json:"-"`

	resultPos syntax.Position
}

// Compile parses and resolves src as a program, without running it, and lists
// the tools it would call. Syntax and resolve errors are [*ProgramError]s with
// the position and the offending line.
func Compile(filename, src string) (*Check, error) {
	// Any free name may be a tool stub; Starlark's own names stay its own.
	_, chk, err := compile(filename, src, func(name string) bool { return !starlark.Universe.Has(name) || name == "fail" }, false)
	return chk, err
}

// compile parses src once; isPredeclared says which free names exist. With
// bounded, the operations that allocate are rewritten into checked builtins
// (rewrite.go).
func compile(filename, src string, isPredeclared func(string) bool, bounded bool) (*starlark.Program, *Check, error) {
	if filename == "" {
		filename = DefaultFilename
	}
	if len(src) > MaxSourceBytes {
		return nil, nil, &ProgramError{Kind: "syntax", Message: fmt.Sprintf("source is %d bytes, over the limit of %d", len(src), MaxSourceBytes)}
	}
	f, err := fileOptions.Parse(filename, src, 0)
	if err != nil {
		return nil, nil, syntaxError(src, err)
	}
	if bounded {
		if err := rewriteFile(f); err != nil {
			return nil, nil, syntaxError(src, err)
		}
	}
	prog, err := starlark.FileProgram(f, isPredeclared)
	if err != nil {
		return nil, nil, syntaxError(src, err)
	}
	if prog.NumLoads() > 0 {
		_, pos := prog.Load(0)
		return nil, nil, positioned(&ProgramError{Kind: "syntax", Message: "load is not available in programs"}, src, pos)
	}
	return prog, inspect(f), nil
}

// inspect lists literal call targets and stub-like free names of a resolved file.
func inspect(f *syntax.File) *Check {
	chk := &Check{}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CallExpr:
			id, ok := n.Fn.(*syntax.Ident)
			if !ok {
				return true
			}
			b, _ := id.Binding.(*resolve.Binding)
			if b == nil || b.Scope != resolve.Predeclared {
				return true
			}
			if id.Name == "call" {
				if len(n.Args) > 0 {
					if lit, ok := n.Args[0].(*syntax.Literal); ok && lit.Token == syntax.STRING {
						if s, ok := lit.Value.(string); ok {
							if !slices.Contains(chk.Calls, s) {
								chk.Calls = append(chk.Calls, s)
							}
							chk.Sites = append(chk.Sites, callSite(s, n, 1))
						}
					}
				}
				return true
			}
			if strings.HasPrefix(id.Name, reservedPrefix) || starlark.Universe.Has(id.Name) {
				return true // a checked operator or builtin of a bounded program
			}
			if slices.Contains(builtinNames, id.Name) {
				return true
			}
			if !slices.Contains(chk.Stubs, id.Name) {
				chk.Stubs = append(chk.Stubs, id.Name)
			}
			chk.Sites = append(chk.Sites, callSite(id.Name, n, 0))
		}
		return true
	})
	for _, stmt := range f.Stmts {
		if a, ok := stmt.(*syntax.AssignStmt); ok {
			if id, ok := a.LHS.(*syntax.Ident); ok && id.Name == "result" {
				chk.HasResult = true
				chk.resultPos = id.NamePos // the last assignment wins, as at run time
			}
		}
	}
	return chk
}

// syntaxError turns a scanner, parser or resolver error into a ProgramError.
func syntaxError(src string, err error) error {
	var se syntax.Error
	if errors.As(err, &se) {
		return positioned(&ProgramError{Kind: "syntax", Message: se.Msg}, src, se.Pos)
	}
	var rl resolve.ErrorList
	if errors.As(err, &rl) && len(rl) > 0 {
		pe := positioned(&ProgramError{Kind: "syntax", Message: rl[0].Msg}, src, rl[0].Pos)
		if len(rl) > 1 {
			pe.Message += fmt.Sprintf(" (and %d more errors)", len(rl)-1)
		}
		return pe
	}
	return &ProgramError{Kind: "syntax", Message: err.Error()}
}

// positioned sets e's position and offending line from pos.
func positioned(e *ProgramError, src string, pos syntax.Position) *ProgramError {
	if !pos.IsValid() {
		return e
	}
	e.Position = fmt.Sprintf("%s:%d:%d", pos.Filename(), pos.Line, pos.Col)
	e.Line = sourceLine(src, int(pos.Line))
	return e
}

// sourceLine returns line n (from 1) of src without surrounding blanks.
func sourceLine(src string, n int) string {
	for i, l := range strings.Split(src, "\n") {
		if i+1 == n {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// scriptPosition is the innermost position of stack that lies in the script
// (builtins have none).
func scriptPosition(stack starlark.CallStack, filename string) syntax.Position {
	for i := len(stack) - 1; i >= 0; i-- {
		if p := stack[i].Pos; p.IsValid() && p.Filename() == filename {
			return p
		}
	}
	return syntax.Position{}
}
