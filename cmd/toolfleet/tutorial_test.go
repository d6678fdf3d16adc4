package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/syncbuf"
)

// tutorialPath is the tutorial whose steps 4 and 5 TestAuthoringWithOnlyGo
// runs, reading the commands, the code and the script from it, so that the
// document and the test cannot drift apart.
const tutorialPath = "../../docs/tutorial.md"

// tutorialSection is the text of the tutorial's "## N." section.
func tutorialSection(t *testing.T, n int) string {
	t.Helper()
	b, err := os.ReadFile(tutorialPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, fmt.Sprintf("\n## %d. ", n))
	if start < 0 {
		t.Fatalf("%s has no section %d", tutorialPath, n)
	}
	sec := doc[start+1:]
	if end := strings.Index(sec, "\n## "); end >= 0 {
		sec = sec[:end]
	}
	return sec
}

// fencedBlocks returns the contents of the section's ```lang blocks.
func fencedBlocks(sec, lang string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```"+regexp.QuoteMeta(lang)+"\n(.*?)```").FindAllStringSubmatch(sec, -1) {
		out = append(out, m[1])
	}
	return out
}

// docCommand finds the line of the section's sh blocks that starts with
// prefix and returns its words after "toolfleet", without a trailing comment.
func docCommand(t *testing.T, sec, prefix string) []string {
	t.Helper()
	for _, block := range fencedBlocks(sec, "sh") {
		for line := range strings.SplitSeq(block, "\n") {
			if strings.HasPrefix(line, prefix) {
				return shellWords(t, withoutComment(line))[1:]
			}
		}
	}
	t.Fatalf("%s: no command %q in:\n%s", tutorialPath, prefix, sec)
	return nil
}

// withoutComment is line up to a # that starts a word outside quotes.
func withoutComment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && quote == '"' {
				i++
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimRight(line[:i], " \t")
		}
	}
	return line
}

func TestWithoutComment(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{
		`toolfleet tools call W.F '{"q": "#1"}'   # "not implemented yet"`:              `toolfleet tools call W.F '{"q": "#1"}'`,
		`toolfleet tools call W.F '{"name": ""}'      # refused by the contract's rule`: `toolfleet tools call W.F '{"name": ""}'`,
		`go test ./...`:   `go test ./...`,
		`a "b \" #c" d#e`: `a "b \" #c" d#e`,
	} {
		if got := withoutComment(line); got != want {
			t.Errorf("withoutComment(%q) = %q, want %q", line, got, want)
		}
	}
}

// tutorialSteps4And5 runs docs/tutorial.md's steps 4 and 5 in dir, where a
// `toolfleet dev --worker .` runs with its dev file and `toolfleet add tool
// Forecast` was done: the stub answers, the hand edit of forecast.go and of
// the contract's description with `go generate` make Forecast answer, the
// scaffold's test then fails as the tutorial says, and the scripted agent
// run calls the tool and answers. The edit changes an existing tool (its
// description), which the gateway takes only after the old worker drained:
// hello (one plain gRPC call without retries) measures that window.
func tutorialSteps4And5(ctx context.Context, t *testing.T, dir string, env []string, goCmd func(...string) *exec.Cmd, hello func() error, devStderr *syncbuf.Buffer) {
	t.Helper()
	step4 := tutorialSection(t, 4)
	cli := func(args []string) (string, error) {
		cmd := cliCommand(ctx, t, env, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// The stub, as the tutorial calls it (the dev file finds the gateway).
	forecast := docCommand(t, step4, "toolfleet tools call Weather.Forecast")
	if out, err := cli(forecast); err == nil || !strings.Contains(out, "Weather.Forecast is not implemented yet") {
		t.Fatalf("%q before the edit: %v\n%s", forecast, err, out)
	}

	// The hand edit: the handler's body, the unused import, the description.
	code := fencedBlocks(step4, "go")
	if len(code) != 1 {
		t.Fatalf("%s step 4: %d go blocks, want the handler's new body", tutorialPath, len(code))
	}
	goFile := filepath.Join(dir, "weather", "forecast.go")
	src, err := os.ReadFile(goFile)
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`(?s)(func \(s \*Service\) Forecast\([^{]*\{\n).*?(\n\}\n)`)
	if !body.Match(src) {
		t.Fatalf("no Forecast handler in forecast.go:\n%s", src)
	}
	src = body.ReplaceAll(src, []byte("${1}\t"+strings.TrimSpace(code[0])+"${2}"))
	src = regexp.MustCompile(`\n\s*"github.com/toolfleet/toolfleet/sdk/tool"\n`).ReplaceAll(src, []byte("\n"))
	if err := os.WriteFile(goFile, src, 0o644); err != nil {
		t.Fatal(err)
	}
	desc := regexp.MustCompile("`(description: \"[^\"]+\")`").FindStringSubmatch(step4)
	if desc == nil {
		t.Fatalf("%s step 4 gives no description", tutorialPath)
	}
	protoFile := filepath.Join(dir, "proto", "weather", "v1", "weather.proto")
	contractSrc, err := os.ReadFile(protoFile)
	if err != nil {
		t.Fatal(err)
	}
	todo := regexp.MustCompile(`description: "TODO: what Forecast does[^"]*"`)
	if !todo.Match(contractSrc) {
		t.Fatalf("no placeholder description of Forecast in the contract:\n%s", contractSrc)
	}
	if err := os.WriteFile(protoFile, todo.ReplaceAll(contractSrc, []byte(desc[1])), 0o644); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(step4, "run `go generate`") {
		t.Fatalf("%s step 4 no longer says to run `go generate`", tutorialPath)
	}
	// Plain calls of Weather.Hello through this rebuild: how long a caller
	// without retries sees no serving replica (measured, not asserted: a
	// changed tool is not additive).
	var window struct {
		sync.Mutex
		calls, failed int
		first, last   time.Time
	}
	stopProbe, probeDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(probeDone)
		for {
			select {
			case <-stopProbe:
				return
			case <-time.After(5 * time.Millisecond):
			}
			err := hello()
			window.Lock()
			window.calls++
			if err != nil {
				if window.failed++; window.first.IsZero() {
					window.first = time.Now()
				}
				window.last = time.Now()
			}
			window.Unlock()
		}
	}()
	defer func() {
		close(stopProbe)
		<-probeDone
		t.Logf("tutorial step 4, a changed tool (not additive): %d of %d plain calls of Weather.Hello failed, over %s from the first failure to the last",
			window.failed, window.calls, window.last.Sub(window.first).Round(time.Millisecond))
	}()
	if out, err := goCmd("generate").CombinedOutput(); err != nil {
		t.Fatalf("go generate: %v\n%s", err, out)
	}

	// "A few seconds later" the tool answers (the rebuild changed an existing
	// tool's description: the old worker drains first, so retry meanwhile).
	for start := time.Now(); ; time.Sleep(300 * time.Millisecond) {
		out, err := cli(forecast)
		if err == nil && strings.Contains(out, "Sunny in Paris") {
			t.Logf("tutorial step 4: %q answers %q %s after go generate", forecast, strings.TrimSpace(out), time.Since(start).Round(100*time.Millisecond))
			break
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("%q after the edit: %v\n%s\ndev's stderr:\n%s", forecast, err, out, devStderr.String())
		}
	}
	// `go test ./...` now fails on the stub's expectation in forecast_test.go.
	if out, err := goCmd("test", "-count=1", "./...").CombinedOutput(); err == nil || !strings.Contains(string(out), "--- FAIL: TestForecast") {
		t.Errorf("go test after the edit: %v, want TestForecast to fail on the stub's expectation\n%s", err, out)
	}

	// Step 5: the scripted model from the tutorial, run as it says.
	step5 := tutorialSection(t, 5)
	script := fencedBlocks(step5, "yaml")
	if len(script) != 1 || !strings.Contains(step5, "Save this as `forecast.yaml`") {
		t.Fatalf("%s step 5: want one yaml block saved as forecast.yaml", tutorialPath)
	}
	if err := os.WriteFile(filepath.Join(dir, "forecast.yaml"), []byte(script[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	run := docCommand(t, step5, "toolfleet agent run")
	out, err := cli(run)
	if err != nil {
		t.Fatalf("%q: %v\n%s", run, err, out)
	}
	t.Logf("tutorial step 5: %q printed:\n%s", run, out)
	for _, want := range []string{"Let me check the forecast.", "→ Weather.Forecast", "← ok", "✓ Sunny in Paris", "1 tool call,"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q printed no %q:\n%s", run, want, out)
		}
	}
}
