package scaffold

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"golang.org/x/mod/modfile"
)

// ErrNotToolkit is returned by [AddTool] for a folder that is not a toolkit
// scaffolded by `toolfleet new toolkit`, and ErrToolExists for a tool name the
// contract or the package already uses.
var (
	ErrNotToolkit = errors.New("scaffold: not a scaffolded toolkit")
	ErrToolExists = errors.New("scaffold: tool exists")
	ErrBadTool    = errors.New("scaffold: bad tool name")
)

var toolPattern = regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,39}$`)

// Added says what [AddTool] wrote.
type Added struct {
	// Proto is the contract it extended; Files are the files it created.
	Proto string
	Files []string
	// ToolID is the new tool's id without version (Toolkit.Tool).
	ToolID string
}

// AddTool adds the tool name (UpperCamelCase, e.g. Forecast) to the toolkit
// in dir: an rpc with its request and response messages in the contract, a
// handler that compiles and answers a "not implemented" tool error until it
// is written, and a test of it. gen/ must then be regenerated
// ([Generator.Regenerate]). Nothing is written when the name is taken.
func AddTool(dir, name string) (Added, error) {
	if !toolPattern.MatchString(name) {
		return Added{}, fmt.Errorf("%w %q: use UpperCamelCase letters and digits (e.g. Forecast), at most 40", ErrBadTool, name)
	}
	d, err := readToolkit(dir)
	if err != nil {
		return Added{}, err
	}
	protoPath := filepath.Join(dir, "proto", d.Name, "v1", d.Name+".proto")
	src, err := os.ReadFile(protoPath)
	if err != nil {
		return Added{}, fmt.Errorf("%w: %s: %w", ErrNotToolkit, dir, err)
	}
	for _, taken := range []string{`\brpc\s+` + name + `\s*\(`, `\bmessage\s+` + name + `(Request|Response)\s*\{`} {
		if regexp.MustCompile(taken).Match(src) {
			return Added{}, fmt.Errorf("%w: the contract %s already has %s (or its messages)", ErrToolExists, protoPath, name)
		}
	}
	end, err := serviceEnd(src, d.Service)
	if err != nil {
		return Added{}, fmt.Errorf("%w: %s: %w", ErrNotToolkit, protoPath, err)
	}
	td := toolData{data: d, Tool: name, File: snake(name)}
	files := map[string]string{
		filepath.Join(dir, d.Name, td.File+".go"):      toolGo,
		filepath.Join(dir, d.Name, td.File+"_test.go"): toolTestGo,
	}
	rendered := map[string][]byte{}
	for p, text := range files {
		if _, err := os.Stat(p); err == nil {
			return Added{}, fmt.Errorf("%w: %s exists", ErrToolExists, p)
		}
		b, err := execute(text, td)
		if err != nil {
			return Added{}, err
		}
		rendered[p] = b
	}
	rpc, err := execute(toolRPC, td)
	if err != nil {
		return Added{}, err
	}
	msgs, err := execute(toolMessages, td)
	if err != nil {
		return Added{}, err
	}
	out := append(append(append([]byte{}, src[:end]...), rpc...), src[end:]...)
	out = append(bytes.TrimRight(out, "\n"), append([]byte("\n"), msgs...)...)
	added := Added{Proto: protoPath, ToolID: d.Title + "." + name}
	for p, b := range rendered {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return Added{}, fmt.Errorf("scaffold: %w", err)
		}
		_, werr := f.Write(b)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return Added{}, fmt.Errorf("scaffold: write %s: %w", p, werr)
		}
		added.Files = append(added.Files, p)
	}
	if err := os.WriteFile(protoPath, out, 0o644); err != nil {
		return Added{}, fmt.Errorf("scaffold: %w", err)
	}
	return added, nil
}

// readToolkit derives the scaffold's data from dir's go.mod and its one
// contract under proto/NAME/v1.
func readToolkit(dir string) (data, error) {
	modBytes, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return data{}, fmt.Errorf("%w: %s has no go.mod (run it in the toolkit's folder, or pass --dir)", ErrNotToolkit, dir)
	}
	mod, err := modfile.ParseLax("go.mod", modBytes, nil)
	if err != nil || mod.Module == nil {
		return data{}, fmt.Errorf("%w: %s/go.mod: %v", ErrNotToolkit, dir, err)
	}
	protos, _ := filepath.Glob(filepath.Join(dir, "proto", "*", "v1", "*.proto"))
	var name string
	for _, p := range protos {
		n := filepath.Base(filepath.Dir(filepath.Dir(p)))
		if filepath.Base(p) == n+".proto" {
			if name != "" && name != n {
				return data{}, fmt.Errorf("%w: %s holds several contracts (%s, %s): add the rpc by hand", ErrNotToolkit, dir, name, n)
			}
			name = n
		}
	}
	if name == "" {
		return data{}, fmt.Errorf("%w: %s has no proto/NAME/v1/NAME.proto", ErrNotToolkit, dir)
	}
	d, err := Toolkit{Name: name, Module: mod.Module.Mod.Path}.data()
	if err != nil {
		return data{}, fmt.Errorf("%w: %w", ErrNotToolkit, err)
	}
	return d, nil
}

// serviceEnd returns the offset of the closing brace of `service NAME {` in
// a proto file, skipping comments and string literals.
func serviceEnd(src []byte, service string) (int, error) {
	loc := regexp.MustCompile(`(?m)^\s*service\s+` + service + `\s*\{`).FindIndex(src)
	if loc == nil {
		return 0, fmt.Errorf("no `service %s {`", service)
	}
	depth := 1
	for i := loc[1]; i < len(src); i++ {
		switch c := src[i]; {
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			j := bytes.Index(src[i+2:], []byte("*/"))
			if j < 0 {
				return 0, errors.New("an unterminated comment")
			}
			i += j + 3
		case c == '"' || c == '\'':
			for i++; i < len(src) && src[i] != c; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		case c == '{':
			depth++
		case c == '}':
			if depth--; depth == 0 {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("`service %s {` is not closed", service)
}

// snake is ForecastToday as forecast_today, for file names.
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

type toolData struct {
	data
	Tool, File string
}

func execute(text string, d toolData) ([]byte, error) {
	t, err := template.New("tool").Delims("[[", "]]").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("scaffold: %w", err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, d); err != nil {
		return nil, fmt.Errorf("scaffold: %w", err)
	}
	return buf.Bytes(), nil
}

const toolRPC = `
  // [[.Tool]]: added by toolfleet add tool; say what it does and when to use it.
  rpc [[.Tool]]([[.Tool]]Request) returns ([[.Tool]]Response) {
    option (toolfleet.v1.tool) = {
      description: "TODO: what [[.Tool]] does, when to use it and when not to."
      hints: {read_only: true, idempotent: true, open_world: false}
    };
  }
`

const toolMessages = `
message [[.Tool]]Request {
  // TODO: the inputs; rules such as min_len are checked before your code runs.
  string query = 1 [
    (buf.validate.field).string = {min_len: 1, max_len: 200},
    (toolfleet.v1.field) = {description: "TODO: what the caller gives."}
  ];
}

message [[.Tool]]Response {
  string answer = 1;
}
`

const toolGo = `package [[.Name]]

import (
	"context"

	"github.com/toolfleet/toolfleet/sdk/tool"

	[[.GoPkg]] "[[.Module]]/gen/[[.Name]]/v1"
)

// [[.Tool]] serves the [[.Title]].[[.Tool]] tool.
func (s *Service) [[.Tool]](_ context.Context, req *[[.GoPkg]].[[.Tool]]Request) (*[[.GoPkg]].[[.Tool]]Response, error) {
	// An execution error: the tool ran and says why, to the caller and the model.
	return nil, tool.NewError("[[.Title]].[[.Tool]] is not implemented yet",
		tool.WithPromptHint("Tell the user that this tool is not available yet."))
}
`

const toolTestGo = `package [[.Name]]_test

import (
	"testing"

	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"

	[[.GoPkg]] "[[.Module]]/gen/[[.Name]]/v1"
	"[[.Module]]/[[.Name]]"
)

// Test[[.Tool]] calls [[.Title]].[[.Tool]] as a model would. It checks the
// scaffold's "not implemented" answer: write the tool, then this test.
func Test[[.Tool]](t *testing.T) {
	t.Parallel()
	gw := gatewaytest.Toolkit(t, tool.Config{Name: "[[.Name]]"}, func(w *tool.Worker) {
		[[.GoPkg]].Register[[.Service]]Server(w, [[.Name]].New())
	})
	res, err := gw.Call(t.Context(), "[[.Title]].[[.Tool]]", ` + "`" + `{"query": "x"}` + "`" + `)
	if err != nil || res.GetSuccess() || res.GetError().GetMessage() != "[[.Title]].[[.Tool]] is not implemented yet" {
		t.Fatalf("[[.Tool]]: %v %v", res, err)
	}
	// The contract's rule refuses an empty query before [[.Tool]] runs.
	_, err = gw.Call(t.Context(), "[[.Title]].[[.Tool]]", ` + "`" + `{"query": ""}` + "`" + `)
	if gatewaytest.ParameterErrors(err)["query"] == "" {
		t.Errorf("an empty query: %v, want a parameter error on query", err)
	}
}
`
