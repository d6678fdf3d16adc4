package check

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
)

func parseFile(t *testing.T, path string) []instructions.Stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stages, err := ParseDockerfile(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return stages
}

// runtimeOf returns the final stage's base image, USER and ENTRYPOINT.
func runtimeOf(s instructions.Stage) (base, user string, entrypoint []string) {
	base = s.BaseName
	for _, c := range s.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			if !c.PrependShell {
				entrypoint = c.CmdLine
			}
		}
	}
	return base, user, entrypoint
}

// code is every instruction of a stage as written.
func code(s instructions.Stage) string {
	var b strings.Builder
	for _, c := range s.Commands {
		b.WriteString(c.(interface{ String() string }).String())
		b.WriteString("\n")
	}
	return b.String()
}

// TestDockerfiles: the production Dockerfile downloads modules in their own
// stage with a cache mount, builds statically, and runs the binary as non-root
// on distroless; the Tilt image runs on exactly the same base, user and
// entrypoint, so what runs on kind is what runs in production.
func TestDockerfiles(t *testing.T) {
	t.Parallel()
	prod := parseFile(t, filepath.Join(repo, "Dockerfile"))
	tilt := parseFile(t, filepath.Join(repo, "k8s", "tilt", "Dockerfile"))

	names := []string{}
	for _, s := range prod {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"modules", "build", ""}) {
		t.Fatalf("stages %q, want modules, build and the unnamed runtime stage", names)
	}
	modules, build := code(prod[0]), code(prod[1])
	for _, want := range []string{"CGO_ENABLED=0", "type=cache,target=/go/pkg/mod", "go mod download"} {
		if !strings.Contains(modules, want) {
			t.Errorf("the modules stage lacks %q:\n%s", want, modules)
		}
	}
	if prod[1].BaseName != "modules" {
		t.Errorf("the build stage starts from %s, want the modules stage", prod[1].BaseName)
	}
	for _, want := range []string{"type=cache,target=/root/.cache/go-build", "go build -trimpath"} {
		if !strings.Contains(build, want) {
			t.Errorf("the build stage lacks %q:\n%s", want, build)
		}
	}

	base, user, entry := runtimeOf(prod[2])
	if !strings.HasPrefix(base, "gcr.io/distroless/static") || !strings.HasSuffix(base, ":nonroot") {
		t.Errorf("runtime base %s, want a distroless static nonroot image", base)
	}
	if user != "65532:65532" || !slices.Equal(entry, []string{"/app"}) {
		t.Errorf("runtime USER %q ENTRYPOINT %q, want 65532:65532 and [/app]", user, entry)
	}
	if len(tilt) != 1 {
		t.Fatalf("the Tilt Dockerfile has %d stages, want 1 (it copies a host-built binary)", len(tilt))
	}
	tb, tu, te := runtimeOf(tilt[0])
	if tb != base || tu != user || !slices.Equal(te, entry) {
		t.Errorf("Tilt image %s/%s/%q differs from production %s/%s/%q", tb, tu, te, base, user, entry)
	}
}

func TestParseDockerfileRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, dockerfile, want string }{
		{"unknown instruction", "FROM scratch\nCOPPY a /a\n", "coppy"},
		{"lint warning", "FROM scratch AS Build\nCOPY a /a\n", "StageNameCasing"},
		{"no FROM", "# nothing\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseDockerfile(strings.NewReader(tt.dockerfile))
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tt.want)) {
				t.Fatalf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}
