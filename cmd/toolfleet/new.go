package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolfleet/toolfleet/internal/scaffold"
)

// bufGenerateTimeout bounds `buf generate` on a fresh scaffold.
const bufGenerateTimeout = 2 * time.Minute

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
		dir, module, toolfleetDir, toolfleetVersion, buf string
		noGenerate                                       bool
	)
	cmd := &cobra.Command{
		Use:   "toolkit NAME",
		Short: "Scaffold a toolkit in its own repository (contract, worker, test, Dockerfile, k8s manifest)",
		Long: `Writes a standalone Go module that serves the toolkit NAME: a contract showing every
toolfleet option, the worker, a test that calls it through a real gateway on loopback,
a Dockerfile and a k8s manifest shaped like toolfleet's k8s/base. The contracts it
imports are vendored under third_party/, so no buf registry is needed.

NAME is 2-30 lower-case letters and digits (e.g. tickets). The directory (default
./NAME) must not exist or be empty. When buf and the Go plugins are on PATH (or
--buf names buf), gen/ is generated right away; otherwise run 'buf generate proto'.
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
			tk := scaffold.Toolkit{Name: name, Module: module, ToolfleetVersion: toolfleetVersion, Replace: toolfleetDir}
			paths, err := tk.Write(dir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %d files into %s\n", len(paths), dir)
			generated := false
			if !noGenerate {
				generated, err = bufGenerate(cmd, dir, buf)
				if err != nil {
					return err
				}
			}
			printNextSteps(out, dir, name, generated, toolfleetDir != "" || toolfleetVersion != scaffold.UnpublishedVersion)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory to write (default ./NAME); must not exist or be empty")
	f.StringVar(&module, "module", "", "Go module path (default example.com/NAME)")
	f.StringVar(&toolfleetDir, "toolfleet-dir", "", "a toolfleet checkout for go.mod's replace directive (while toolfleet is not published)")
	f.StringVar(&toolfleetVersion, "toolfleet-version", "", "toolfleet module version to require (default: this CLI's, or a placeholder for a development build)")
	f.StringVar(&buf, "buf", "", "buf binary for generating gen/ (default: buf on PATH)")
	f.BoolVar(&noGenerate, "no-generate", false, "do not run buf generate")
	return cmd
}

// ownVersion is the toolfleet module version this CLI was built from, or
// the placeholder a replace directive resolves for a development build.
func ownVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && strings.HasPrefix(bi.Main.Version, "v") && !strings.Contains(bi.Main.Version, "+dirty") {
		return bi.Main.Version
	}
	return scaffold.UnpublishedVersion
}

// bufGenerate runs `buf generate proto` in dir when buf and the Go plugins are
// found, and reports whether it did.
func bufGenerate(cmd *cobra.Command, dir, buf string) (bool, error) {
	explicit := buf != ""
	if !explicit {
		p, err := exec.LookPath("buf")
		if err != nil {
			return false, nil
		}
		buf = p
	}
	path := os.Getenv("PATH")
	if explicit {
		// The plugins pinned next to an explicit buf (toolfleet's build/bin) win.
		abs, err := filepath.Abs(buf)
		if err != nil {
			return false, err
		}
		buf, path = abs, filepath.Dir(abs)+string(os.PathListSeparator)+path
	}
	var missing []string
	for _, plugin := range []string{"protoc-gen-go", "protoc-gen-go-grpc"} {
		if _, err := lookPathIn(plugin, path); err != nil {
			missing = append(missing, plugin)
		}
	}
	if len(missing) > 0 {
		if explicit {
			return false, fmt.Errorf("buf generate needs %s on PATH or next to %s", strings.Join(missing, " and "), buf)
		}
		return false, nil
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), bufGenerateTimeout)
	defer cancel()
	gen := exec.CommandContext(ctx, buf, "generate", "proto")
	gen.Dir = dir
	gen.Env = append(os.Environ(), "PATH="+path)
	gen.Stdout, gen.Stderr = cmd.ErrOrStderr(), cmd.ErrOrStderr()
	gen.WaitDelay = 5 * time.Second
	if err := gen.Run(); err != nil {
		return false, fmt.Errorf("buf generate proto in %s: %w", dir, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "generated %s\n", filepath.Join(dir, "gen"))
	return true, nil
}

func lookPathIn(file, path string) (string, error) {
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, file)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New(file + " not found")
}

func printNextSteps(w io.Writer, dir, name string, generated, resolvable bool) {
	fmt.Fprintf(w, "\nnext:\n  cd %s\n", dir)
	if !generated {
		fmt.Fprintln(w, "  buf generate proto        # needs buf, protoc-gen-go and protoc-gen-go-grpc on PATH (see buf.gen.yaml)")
	}
	if !resolvable {
		fmt.Fprintln(w, "  # toolfleet is not published: point go.mod at a checkout first, e.g.")
		fmt.Fprintln(w, "  go mod edit -replace github.com/toolfleet/toolfleet=/path/to/toolfleet")
	}
	fmt.Fprintf(w, "  go mod tidy && go test ./...\n  toolfleet dev --worker .   # the fleet with this worker, rebuilt on change; then: toolfleet tools call %s.List '{\"limit\": 5}'\n",
		strings.ToUpper(name[:1])+name[1:])
}
