// Command slimtemporal prepares a build of `toolfleet` without the parts of the
// embedded Temporal server `toolfleet dev` never runs: the S3 and Google Cloud
// Storage history/visibility archivers (dev keeps archival off) and the
// auto-scaled worker controller with its Kubernetes, AWS and Cloud Run clients
// (dev runs no auto-scaled worker deployments). Temporal imports them statically
// and has no build tags for them, so the linker keeps them; without them the
// stripped binary is about 70 MB smaller (docs/performance.md, "Binary size").
//
// Nothing of Temporal is committed: it copies the module version go.mod pins
// from the module cache into -out, drops the imports from the two files that
// bring them in along with the code that names them, checks that nothing else
// names them, and writes -out/go.mod (toolfleet's go.mod with a replace of
// Temporal by that copy) and -out/go.sum for `go build -modfile`. A Temporal
// upgrade that moves these uses makes it fail with the file and the reason
// instead of building a binary that differs silently. `make install` runs it:
//
//	(cd tools && go run ./slimtemporal -root .. -out ../build/slim)
//	go install -modfile build/slim/go.mod -ldflags="-s -w" ./cmd/toolfleet
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
)

// temporalModule is the module the cuts apply to.
const temporalModule = "go.temporal.io/server"

// cut names a file of the Temporal module and the imports to leave out of it.
type cut struct {
	file  string   // slash-separated, relative to the module root
	drops []string // import paths
}

// cuts are the edges through which the unused providers enter the binary
// (go list -deps ./cmd/toolfleet shows no other importer of them).
var cuts = []cut{
	// The archiver provider's switch on the archival URI scheme: dev archives
	// nothing, and filestore (a local folder) stays available.
	{"common/archiver/provider/provider.go", []string{
		"go.temporal.io/server/common/archiver/gcloud",
		"go.temporal.io/server/common/archiver/s3store",
	}},
	// The worker service's fx module list: the auto-scaled workers' controller
	// (compute providers for Kubernetes, AWS ECS/Lambda/Bedrock, Cloud Run).
	{"service/worker/fx.go", []string{
		"go.temporal.io/auto-scaled-workers/wci/workercomponent",
	}},
}

func main() {
	root := flag.String("root", ".", "folder of toolfleet's go.mod (the Temporal version it pins is patched)")
	out := flag.String("out", "build/slim", "folder to write the slim files and overlay.json into")
	flag.Parse()
	if err := run(*root, *out); err != nil {
		fmt.Fprintln(os.Stderr, "slimtemporal:", err)
		os.Exit(1)
	}
}

func run(root, out string) error {
	modDir, err := moduleDir(root, temporalModule)
	if err != nil {
		return err
	}
	out, err = filepath.Abs(out)
	if err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return err
	}
	if bytes.Contains(gomod, []byte("replace "+temporalModule)) {
		return fmt.Errorf("%s/go.mod already replaces %s", root, temporalModule)
	}
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return err
	}
	copyDir := filepath.Join(out, "temporal")
	if err := os.RemoveAll(copyDir); err != nil {
		return err
	}
	if err := copyTree(modDir, copyDir); err != nil {
		return err
	}
	for _, c := range cuts {
		file := filepath.Join(copyDir, filepath.FromSlash(c.file))
		src, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		slim, err := dropImports(src, c.drops)
		if err != nil {
			return fmt.Errorf("%s %s: %w", temporalModule, c.file, err)
		}
		if err := os.WriteFile(file, slim, 0o644); err != nil {
			return err
		}
	}
	gomod = fmt.Appendf(gomod, "\n// Written by tools/slimtemporal: Temporal without what toolfleet dev never runs.\nreplace %s => %s\n",
		temporalModule, copyDir)
	if err := os.WriteFile(filepath.Join(out, "go.mod"), gomod, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "go.sum"), gosum, 0o644)
}

// copyTree copies the regular files under src into dst, writable (the module
// cache's are read-only).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// moduleDir is the folder of module mod at the version root's go.mod requires,
// downloaded into the module cache when it is not there yet.
func moduleDir(root, mod string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s", mod, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(stdout, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", mod, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: no folder (%s)", mod, info.Error)
	}
	return info.Dir, nil
}

// dropImports removes the given imports from a Go file together with the
// switch cases and call arguments that use them, and fails when an import is
// missing, nothing used it in those places, or a use remains elsewhere.
func dropImports(src []byte, drops []string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	for _, imp := range drops {
		name, err := removeImport(f, imp)
		if err != nil {
			return nil, err
		}
		if removed := removeUses(f, name); removed == 0 {
			return nil, fmt.Errorf("import %s: no switch case or call argument uses %s", imp, name)
		}
		if pos, ok := firstUse(f, name); ok {
			return nil, fmt.Errorf("import %s: %s is still used at line %d (only switch cases and call arguments are removed)",
				imp, name, fset.Position(pos).Line)
		}
	}
	var buf bytes.Buffer
	if err := format.Node(&buf, fset, f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// removeImport deletes the import of path from f and returns the name the
// file refers to it by.
func removeImport(f *ast.File, importPath string) (string, error) {
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.IMPORT {
			continue
		}
		for i, spec := range gen.Specs {
			is := spec.(*ast.ImportSpec)
			p, err := strconv.Unquote(is.Path.Value)
			if err != nil || p != importPath {
				continue
			}
			name := path.Base(p)
			if is.Name != nil {
				name = is.Name.Name
			}
			if name == "_" || name == "." {
				return "", fmt.Errorf("import %s is imported as %q: cannot tell its uses", p, name)
			}
			gen.Specs = append(gen.Specs[:i:i], gen.Specs[i+1:]...)
			for j, imp := range f.Imports {
				if imp == is {
					f.Imports = append(f.Imports[:j:j], f.Imports[j+1:]...)
					break
				}
			}
			return name, nil
		}
	}
	return "", errors.New("import " + importPath + " not found: the file changed; update the cuts in tools/slimtemporal")
}

// removeUses drops the switch cases that mention pkg and the call arguments
// that are pkg.Name, and reports how many it dropped.
func removeUses(f *ast.File, pkg string) int {
	removed := 0
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SwitchStmt:
			kept := n.Body.List[:0]
			for _, st := range n.Body.List {
				if cc, ok := st.(*ast.CaseClause); ok && anyMentions(cc.List, pkg) {
					removed++
					continue
				}
				kept = append(kept, st)
			}
			n.Body.List = kept
		case *ast.CallExpr:
			kept := n.Args[:0]
			for _, arg := range n.Args {
				// Only a bare pkg.Name argument (an fx module in a list of
				// them); a call that passes pkg's values otherwise fails below.
				if sel, ok := arg.(*ast.SelectorExpr); ok && isPkg(sel.X, pkg) {
					removed++
					continue
				}
				kept = append(kept, arg)
			}
			n.Args = kept
		}
		return true
	})
	return removed
}

func anyMentions(exprs []ast.Expr, pkg string) bool {
	for _, e := range exprs {
		if mentions(e, pkg) {
			return true
		}
	}
	return false
}

func mentions(n ast.Node, pkg string) bool {
	_, ok := firstUse(n, pkg)
	return ok
}

// firstUse is the position of the first pkg.X selector under n.
func firstUse(n ast.Node, pkg string) (token.Pos, bool) {
	var at token.Pos
	ast.Inspect(n, func(n ast.Node) bool {
		if at.IsValid() {
			return false
		}
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if isPkg(sel.X, pkg) {
				at = sel.Pos()
				return false
			}
		}
		return true
	})
	return at, at.IsValid()
}

// isPkg tells whether x is the identifier of the imported package pkg (not a
// local variable of that name, which the parser resolves to an object).
func isPkg(x ast.Expr, pkg string) bool {
	id, ok := x.(*ast.Ident)
	return ok && id.Name == pkg && id.Obj == nil // deprecated, but tells locals from packages without type checking
}
