package scaffold

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// DefaultGenerateTimeout bounds [Generate]: the first run downloads and
// compiles buf (minutes on a cold cache), later ones take seconds.
const DefaultGenerateTimeout = 15 * time.Minute

// Generator runs the go command in a scaffolded toolkit.
type Generator struct {
	// Go is the go command. Default "go" on PATH.
	Go string
	// Env is the environment of the go commands. Default os.Environ().
	Env []string
	// Progress receives a line per step and the commands' output. Default: discarded.
	Progress io.Writer
	// Timeout bounds the whole run. Default [DefaultGenerateTimeout].
	Timeout time.Duration
}

// Generate writes the toolkit's gen/ from its contract with the buf and
// plugins its go.mod pins (go tool buf generate proto) and tidies go.mod:
// nothing needs to be installed but Go. go.mod is tidied first with -e, as
// the code importing gen/ cannot be resolved before gen/ exists.
func (g Generator) Generate(ctx context.Context, dir string) error {
	return g.run(ctx, dir, [][]string{
		{"mod", "tidy", "-e"},
		{"tool", "buf", "generate", "proto"},
		{"mod", "tidy"},
	})
}

// Regenerate is Generate without the first tidy, for a toolkit whose go.mod
// is complete (after `toolfleet add tool`).
func (g Generator) Regenerate(ctx context.Context, dir string) error {
	return g.run(ctx, dir, [][]string{{"tool", "buf", "generate", "proto"}})
}

func (g Generator) run(ctx context.Context, dir string, steps [][]string) error {
	if g.Go == "" {
		g.Go = "go"
	}
	if g.Env == nil {
		g.Env = os.Environ()
	}
	if g.Progress == nil {
		g.Progress = io.Discard
	}
	if g.Timeout <= 0 {
		g.Timeout = DefaultGenerateTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	for _, args := range steps {
		start := time.Now()
		fmt.Fprintf(g.Progress, "go %s\n", strings.Join(args, " "))
		var out strings.Builder
		cmd := exec.CommandContext(ctx, g.Go, args...)
		cmd.Dir, cmd.Env = dir, g.Env
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, g.Progress), io.MultiWriter(&out, g.Progress)
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("scaffold: go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, strings.TrimSpace(out.String()))
		}
		fmt.Fprintf(g.Progress, "  (%s)\n", time.Since(start).Round(100*time.Millisecond))
	}
	return nil
}
