package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolfleet/toolfleet/internal/scaffold"
)

func newNewCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "new",
		Short: "Scaffold new things (toolkit)",
	}
	cmd.AddCommand(newNewToolkitCommand())
	return cmd
}

func newNewToolkitCommand() *cobra.Command {
	var (
		dir, module, toolfleetDir, toolfleetVersion, template string
		noGenerate                                            bool
	)
	cmd := &cobra.Command{
		Use:   "toolkit NAME",
		Short: "Scaffold a toolkit in its own Go module (contract, worker, test, Dockerfile, k8s manifest)",
		Long: `Writes a standalone Go module that serves the toolkit NAME: a contract with one
tool (NAME's Hello; --template rich: three tools showing every toolfleet option),
the worker, a test that calls it through a real gateway on loopback, a Dockerfile
and a k8s manifest. The contracts it imports are vendored under third_party/, so
no buf registry is needed, and gen/ is generated at once with the buf and protoc
plugins the module pins in go.mod (go tool buf generate proto, which go generate
runs): nothing to install but Go. The first generation downloads and compiles buf
(minutes on a small machine); later ones take seconds.

While toolfleet is not published, go.mod needs a replace directive to a toolfleet
checkout: --toolfleet-dir, or found by itself when toolfleet new runs inside a
checkout or next to one (a sibling folder named toolfleet).

NAME is 2-30 lower-case letters and digits (e.g. weather). The directory (default
./NAME) must not exist or be empty. Then: toolfleet add tool NAME adds a tool.
See docs/tool-authoring.md, "A toolkit in its own repository".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := scaffold.ValidateName(name); err != nil {
				return err
			}
			if dir == "" {
				dir = name
			}
			if toolfleetVersion == "" {
				toolfleetVersion = ownVersion()
			}
			out := cmd.OutOrStdout()
			if toolfleetDir == "" && toolfleetVersion == scaffold.UnpublishedVersion {
				toolfleetDir = findCheckout(dir)
				if toolfleetDir != "" {
					fmt.Fprintf(out, "toolfleet is not published: go.mod replaces it with the checkout at %s\n", toolfleetDir)
				}
			}
			tk := scaffold.Toolkit{Name: name, Module: module, ToolfleetVersion: toolfleetVersion, Replace: toolfleetDir, Template: template}
			paths, err := tk.Write(dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "wrote %d files into %s\n", len(paths), dir)
			resolvable := toolfleetDir != "" || toolfleetVersion != scaffold.UnpublishedVersion
			generated := false
			switch {
			case noGenerate:
			case !resolvable:
				fmt.Fprintln(out, "gen/ not generated: go.mod cannot resolve toolfleet yet (see next)")
			default:
				fmt.Fprintln(out, "generating gen/ with the buf go.mod pins (the first time on a machine downloads and compiles buf: minutes)…")
				if err := generate(cmd, dir, false); err != nil {
					return err
				}
				generated = true
			}
			printNextSteps(out, dir, name, generated, resolvable)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory to write (default ./NAME); must not exist or be empty")
	f.StringVar(&module, "module", "", "Go module path (default example.com/NAME)")
	f.StringVar(&template, "template", scaffold.TemplateMinimal, "what to start from: minimal (one tool) or rich (every toolfleet option shown once)")
	f.StringVar(&toolfleetDir, "toolfleet-dir", "", "a toolfleet checkout for go.mod's replace directive (while toolfleet is not published; default: the checkout this runs in or next to)")
	f.StringVar(&toolfleetVersion, "toolfleet-version", "", "toolfleet module version to require (default: this CLI's, or a placeholder for a development build)")
	f.BoolVar(&noGenerate, "no-generate", false, "do not generate gen/ (run go generate later)")
	return cmd
}

// generate runs the scaffold's generation in dir (with the first go mod tidy
// unless regen), its progress on stderr.
func generate(cmd *cobra.Command, dir string, regen bool) error {
	g := scaffold.Generator{Progress: cmd.ErrOrStderr()}
	var err error
	if regen {
		err = g.Regenerate(cmd.Context(), dir)
	} else {
		err = g.Generate(cmd.Context(), dir)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "generated %s\n", filepath.Join(dir, "gen"))
	return nil
}

// ownVersion is the toolfleet module version this CLI was built from, or
// the placeholder a replace directive resolves for a development build.
func ownVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && strings.HasPrefix(bi.Main.Version, "v") && !strings.Contains(bi.Main.Version, "+dirty") {
		return bi.Main.Version
	}
	return scaffold.UnpublishedVersion
}

// findCheckout returns the toolfleet checkout that the working directory or
// target lies in, or one in a sibling folder named toolfleet of either, or "".
func findCheckout(target string) string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if abs, err := filepath.Abs(target); err == nil {
		starts = append(starts, filepath.Dir(abs))
	}
	for _, start := range starts {
		for d := start; ; d = filepath.Dir(d) {
			for _, c := range []string{d, filepath.Join(d, "toolfleet")} {
				if isCheckout(c) {
					return c
				}
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return ""
}

// isCheckout reports whether dir holds toolfleet's go.mod and contracts.
func isCheckout(dir string) bool {
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || !bytes.HasPrefix(mod, []byte("module github.com/toolfleet/toolfleet\n")) {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, "proto", "toolfleet", "v1", "options.proto"))
	return err == nil
}

func printNextSteps(w io.Writer, dir, name string, generated, resolvable bool) {
	fmt.Fprintf(w, "\nnext:\n  cd %s\n", dir)
	if !resolvable {
		fmt.Fprintln(w, "  # toolfleet is not published: point go.mod at a checkout first, e.g.")
		fmt.Fprintln(w, "  go mod edit -replace github.com/toolfleet/toolfleet=/path/to/toolfleet")
	}
	if !generated {
		fmt.Fprintln(w, "  go mod tidy -e && go generate && go mod tidy   # gen/ from the buf go.mod pins")
	}
	title := strings.ToUpper(name[:1]) + name[1:]
	fmt.Fprintf(w, "  go test ./...\n  toolfleet add tool Forecast   # a second tool: its rpc, messages, handler and test\n")
	fmt.Fprintf(w, "  toolfleet dev --worker .      # the fleet with this worker, rebuilt on change; then:\n  toolfleet tools call %s.Hello '{\"name\": \"Ada\"}'\n", title)
}

func newAddCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add to a scaffolded toolkit (tool)",
	}
	cmd.AddCommand(newAddToolCommand())
	return cmd
}

func newAddToolCommand() *cobra.Command {
	var (
		dir        string
		noGenerate bool
	)
	cmd := &cobra.Command{
		Use:   "tool NAME",
		Short: "Add a tool to the toolkit in the current folder: its rpc, messages, a handler stub and a test",
		Long: `Adds the tool NAME (UpperCamelCase, e.g. Forecast) to a toolkit scaffolded by
toolfleet new toolkit: an rpc with NAME's request and response messages in the
contract (proto/TOOLKIT/v1), a handler in TOOLKIT/NAME.go that compiles and answers
a "not implemented" tool error until you write it, and a test of it beside; then
regenerates gen/ (go tool buf generate proto). A running toolfleet dev --worker
picks the change up by itself.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			added, err := scaffold.AddTool(dir, args[0])
			if err != nil {
				if errors.Is(err, scaffold.ErrNotToolkit) && dir == "." {
					return fmt.Errorf("%w (run it in the toolkit's folder, or pass --dir)", err)
				}
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "added %s to %s\n", added.ToolID, added.Proto)
			for _, f := range added.Files {
				fmt.Fprintf(out, "wrote %s\n", f)
			}
			if !noGenerate {
				if err := generate(cmd, dir, true); err != nil {
					return err
				}
			}
			fmt.Fprintf(out, "\nnext: describe %s in the contract, write its handler, then its test (go test ./...)\n", added.ToolID)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "the toolkit's folder (its go.mod)")
	cmd.Flags().BoolVar(&noGenerate, "no-generate", false, "do not regenerate gen/ (run go generate later)")
	return cmd
}
