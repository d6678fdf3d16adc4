// Package scaffold writes new repositories from templates embedded in the
// toolfleet CLI: `toolfleet new toolkit NAME` is [Toolkit.Write], and
// `toolfleet add tool NAME` is [AddTool].
//
// Templates live under common/ (every toolkit) and one of minimal/ (one tool,
// the default) or rich/ (every toolfleet option shown once), which add the
// contract, the implementation and its test (text/template with [[ ]] delimiters; a path
// segment _name_ becomes the toolkit name, a .tmpl suffix is dropped, gitignore
// and dockerignore gain their dot). Files without .tmpl are copied as they are:
// the contracts a toolkit's contract imports (toolfleet/v1/options.proto and
// buf/validate/validate.proto), vendored so that a toolkit's repository needs no
// buf registry. Tests keep them equal to the sources they come from.
package scaffold

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

//go:embed all:common all:minimal all:rich
var templateFS embed.FS

// Templates a toolkit can start from ([Toolkit.Template]).
const (
	// TemplateMinimal is one tool, Hello, and a test of a few lines.
	TemplateMinimal = "minimal"
	// TemplateRich is three tools showing every toolfleet option once.
	TemplateRich = "rich"
)

// Tool versions a scaffolded go.mod pins with tool directives, so that
// `go generate` (go tool buf generate) needs nothing but Go: the versions in
// toolfleet's own tools/go.mod (TestToolVersions keeps them equal).
const (
	BufVersion        = "v1.73.0"
	ProtobufVersion   = "v1.36.12"
	GRPCPluginVersion = "v1.6.2"
)

// GoVersion is the go line a scaffolded go.mod declares: toolfleet's own.
const GoVersion = "1.26.8"

// UnpublishedVersion is the toolfleet version a scaffold requires when none is
// given: a placeholder that only a replace directive (Toolkit.Replace) resolves.
const UnpublishedVersion = "v0.0.0-00010101000000-000000000000"

// ErrBadName is returned for a toolkit name that cannot be used, and
// ErrNotEmpty for a target directory that already holds files.
var (
	ErrBadName   = errors.New("scaffold: bad toolkit name")
	ErrNotEmpty  = errors.New("scaffold: target directory is not empty")
	ErrBadModule = errors.New("scaffold: bad module path")
	// ErrBadTemplate is returned for a template that is neither minimal nor rich.
	ErrBadTemplate = errors.New("scaffold: unknown template")
)

var (
	namePattern   = regexp.MustCompile(`^[a-z][a-z0-9]{1,29}$`)
	modulePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*(/[A-Za-z0-9._~-]+)*$`)
)

// reserved are names that would not compile or would clash in the scaffold:
// Go keywords and predeclared identifiers, the package names the generated code
// imports, and names toolfleet's own contracts use.
var reserved = strings.Fields(`
	break case chan const continue default defer else fallthrough for func go goto if
	import interface map package range return select struct switch type var
	any append bool byte cap clear close complex complex64 complex128 copy delete
	error false float32 float64 imag int int8 int16 int32 int64 iota len make max min
	new nil panic print println real recover rune string true uint uint8 uint16 uint32
	uint64 uintptr
	main tool tooltest gateway status codes structpb slog io context errors slices
	testing time fmt sync grpc proto protoimpl protoreflect fleet call ctx err def req res
	toolfleet toolfleetv1 google buf validate gen`)

// Toolkit says what to scaffold.
type Toolkit struct {
	// Name is the toolkit's name in lower case, e.g. "tickets": the proto
	// package (tickets.v1), the Go package, the binary and the k8s names. The
	// toolkit's display name is the same with a capital (Tickets).
	Name string
	// Module is the Go module path. Default "example.com/<name>".
	Module string
	// ToolfleetVersion is the toolfleet module version go.mod requires.
	// Default [UnpublishedVersion].
	ToolfleetVersion string
	// Replace, when set, is a toolfleet checkout that go.mod's replace
	// directive points at (made absolute).
	Replace string
	// Template is TemplateMinimal (the default) or TemplateRich.
	Template string
}

// ValidateName reports whether name can name a toolkit, with an error that
// says what a good name looks like.
func ValidateName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%w %q: use 2 to 30 lower-case letters and digits, starting with a letter (e.g. tickets); it becomes the proto package %s.v1 and the Go package", ErrBadName, name, "<name>")
	}
	if slices.Contains(reserved, name) {
		return fmt.Errorf("%w %q: it is reserved (a Go keyword, a predeclared identifier or a package the scaffold imports); pick another", ErrBadName, name)
	}
	return nil
}

type data struct {
	Name, Title, Service, GoPkg, ProtoPkg, Module, GoVersion, ToolfleetVersion, Replace string
	BufVersion, ProtobufVersion, GRPCPluginVersion                                      string
}

func (tk Toolkit) data() (data, error) {
	if err := ValidateName(tk.Name); err != nil {
		return data{}, err
	}
	d := data{
		Name:             tk.Name,
		Title:            strings.ToUpper(tk.Name[:1]) + tk.Name[1:],
		GoPkg:            tk.Name + "v1",
		ProtoPkg:         tk.Name + ".v1",
		Module:           tk.Module,
		GoVersion:        GoVersion,
		ToolfleetVersion: tk.ToolfleetVersion,

		BufVersion:        BufVersion,
		ProtobufVersion:   ProtobufVersion,
		GRPCPluginVersion: GRPCPluginVersion,
	}
	d.Service = d.Title + "Service"
	if d.Module == "" {
		d.Module = "example.com/" + tk.Name
	}
	if !modulePattern.MatchString(d.Module) || strings.Contains(d.Module, "..") || len(d.Module) > 200 {
		return data{}, fmt.Errorf("%w %q: want a Go module path such as github.com/acme/%s", ErrBadModule, d.Module, tk.Name)
	}
	if d.ToolfleetVersion == "" {
		d.ToolfleetVersion = UnpublishedVersion
	}
	if !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+[A-Za-z0-9.+-]*$`).MatchString(d.ToolfleetVersion) {
		return data{}, fmt.Errorf("scaffold: bad toolfleet version %q: want a module version such as v0.3.0", d.ToolfleetVersion)
	}
	if tk.Replace != "" {
		abs, err := filepath.Abs(tk.Replace)
		if err != nil {
			return data{}, fmt.Errorf("scaffold: toolfleet directory: %w", err)
		}
		if _, err := os.Stat(filepath.Join(abs, "go.mod")); err != nil {
			return data{}, fmt.Errorf("scaffold: toolfleet directory %s has no go.mod: %w", abs, err)
		}
		if strings.ContainsFunc(abs, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return data{}, fmt.Errorf("scaffold: toolfleet directory %q holds control characters", abs)
		}
		d.Replace = abs
		if strings.ContainsAny(abs, " \t\"'`\\") {
			d.Replace = strconv.Quote(abs)
		}
	}
	return d, nil
}

// Files renders the scaffold in memory: slash-separated paths relative to the
// repository root, and their contents.
func (tk Toolkit) Files() (map[string][]byte, error) {
	d, err := tk.data()
	if err != nil {
		return nil, err
	}
	tmpl := tk.Template
	switch tmpl {
	case "":
		tmpl = TemplateMinimal
	case TemplateMinimal, TemplateRich:
	default:
		return nil, fmt.Errorf("%w %q: want %s or %s", ErrBadTemplate, tmpl, TemplateMinimal, TemplateRich)
	}
	files := map[string][]byte{}
	for _, root := range []string{"common", tmpl} {
		if err := render(root, d, files); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// render adds the files of the template folder root to files.
func render(root string, d data, files map[string][]byte) error {
	return fs.WalkDir(templateFS, root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		raw, err := templateFS.ReadFile(p)
		if err != nil {
			return err
		}
		out := strings.ReplaceAll(strings.TrimPrefix(p, root+"/"), "_name_", d.Name)
		if base := path.Base(out); base == "gitignore.tmpl" || base == "dockerignore.tmpl" {
			out = path.Join(path.Dir(out), "."+base)
		}
		if !strings.HasSuffix(out, ".tmpl") {
			files[out] = raw
			return nil
		}
		out = strings.TrimSuffix(out, ".tmpl")
		t, err := template.New(p).Delims("[[", "]]").Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return fmt.Errorf("scaffold: template %s: %w", p, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, d); err != nil {
			return fmt.Errorf("scaffold: template %s: %w", p, err)
		}
		files[out] = buf.Bytes()
		return nil
	})
}

// Write renders the scaffold into dir, which must not exist or be empty; it
// never overwrites a file. It returns the paths written, sorted.
func (tk Toolkit) Write(dir string) ([]string, error) {
	files, err := tk.Files()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("scaffold: %w", err)
	case len(entries) > 0:
		return nil, fmt.Errorf("%w: %s holds %d entries (e.g. %s); pick a new directory with --dir", ErrNotEmpty, dir, len(entries), entries[0].Name())
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		target := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return nil, fmt.Errorf("scaffold: %w", err)
		}
		// O_EXCL: a file that appeared meanwhile is never overwritten.
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, fmt.Errorf("scaffold: %w", err)
		}
		_, werr := f.Write(files[p])
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return nil, fmt.Errorf("scaffold: write %s: %w", target, werr)
		}
	}
	return paths, nil
}
