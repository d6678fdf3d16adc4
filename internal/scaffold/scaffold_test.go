package scaffold_test

import (
	"bytes"
	"errors"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.starlark.net/syntax"

	"github.com/toolfleet/toolfleet/internal/scaffold"
)

// root is the toolfleet checkout this test runs in.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "proto", "toolfleet", "v1", "options.proto")); err != nil {
		t.Fatalf("not at toolfleet's root: %v", err)
	}
	return r
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"tickets", "kv2", "ab", "payments"} {
		if err := scaffold.ValidateName(good); err != nil {
			t.Errorf("ValidateName(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", "a", "Tickets", "my-tickets", "my_tickets", "2fa", "tickets/v1", "../x", "tool", "main", "string", "func", "toolfleet", strings.Repeat("a", 31)} {
		err := scaffold.ValidateName(bad)
		if !errors.Is(err, scaffold.ErrBadName) {
			t.Errorf("ValidateName(%q) = %v, want ErrBadName", bad, err)
		}
	}
	if _, err := (scaffold.Toolkit{Name: "tickets", Module: "Not A Module"}).Files(); !errors.Is(err, scaffold.ErrBadModule) {
		t.Errorf("a bad module path: %v", err)
	}
	if _, err := (scaffold.Toolkit{Name: "tickets", Replace: t.TempDir()}).Files(); err == nil {
		t.Error("a replace directory without go.mod was accepted")
	}
	// A checkout path cannot smuggle directives into go.mod.
	evil := filepath.Join(t.TempDir(), "x\nreplace example.com/a => ../b")
	if err := os.MkdirAll(evil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(evil, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (scaffold.Toolkit{Name: "tickets", Replace: evil}).Files(); err == nil || !strings.Contains(err.Error(), "control characters") {
		t.Errorf("a replace path with a newline: %v", err)
	}
	spaced := filepath.Join(t.TempDir(), "my checkout")
	if err := os.MkdirAll(spaced, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spaced, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if files, err := (scaffold.Toolkit{Name: "tickets", Replace: spaced}).Files(); err != nil || !strings.Contains(string(files["go.mod"]), `=> "`+spaced+`"`) {
		t.Errorf("a replace path with a space is not quoted: %v\n%s", err, files["go.mod"])
	}
}

func TestWriteNeverOverwrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (scaffold.Toolkit{Name: "tickets"}).Write(dir); !errors.Is(err, scaffold.ErrNotEmpty) {
		t.Fatalf("Write into a non-empty dir: %v, want ErrNotEmpty", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "keep.txt")); string(b) != "mine" {
		t.Fatalf("keep.txt = %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("Write left %d entries in a refused dir", len(entries))
	}
	empty := filepath.Join(t.TempDir(), "new", "repo")
	paths, err := (scaffold.Toolkit{Name: "tickets"}).Write(empty)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"go.mod", "buf.yaml", "buf.gen.yaml", "main.go", "proto/tickets/v1/tickets.proto",
		"tickets/service.go", "tickets/service_test.go", "Dockerfile", "deploy/k8s/worker-tickets.yaml", ".gitignore",
		"Tiltfile", "deploy/tilt.Dockerfile",
		"third_party/toolfleet/toolfleet/v1/options.proto", "third_party/protovalidate/buf/validate/validate.proto"} {
		if _, err := os.Stat(filepath.Join(empty, filepath.FromSlash(want))); err != nil {
			t.Errorf("%s not written (wrote %v)", want, paths)
		}
	}
}

// The scaffold's Go is gofmt-clean and names nothing of the template.
func TestRendered(t *testing.T) {
	t.Parallel()
	files, err := (scaffold.Toolkit{Name: "payments", Module: "github.com/acme/payments"}).Files()
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range files {
		if strings.Contains(string(b), "[[") && !strings.HasPrefix(p, "third_party/") {
			t.Errorf("%s holds an unexpanded template action", p)
		}
		if strings.HasSuffix(p, ".go") {
			if f, err := format.Source(b); err != nil || !bytes.Equal(f, b) {
				t.Errorf("%s is not gofmt-clean (%v)", p, err)
			}
		}
	}
	if s := string(files["buf.gen.yaml"]); !strings.Contains(s, "value: github.com/acme/payments/gen") ||
		!strings.Contains(s, "github.com/toolfleet/toolfleet/gen/toolfleet/v1;toolfleetv1") {
		t.Errorf("buf.gen.yaml does not map the packages:\n%s", s)
	}
	if s := string(files["proto/payments/v1/payments.proto"]); !strings.Contains(s, "package payments.v1;") || !strings.Contains(s, "service PaymentsService {") {
		t.Errorf("contract:\n%s", s)
	}
}

// The Tiltfile is Starlark that builds the image the manifest runs, from the
// file its Dockerfile copies, and deploys that manifest.
func TestTiltfile(t *testing.T) {
	t.Parallel()
	files, err := (scaffold.Toolkit{Name: "payments"}).Files()
	if err != nil {
		t.Fatal(err)
	}
	tiltfile := string(files["Tiltfile"])
	if _, err := syntax.Parse("Tiltfile", tiltfile, 0); err != nil {
		t.Fatalf("Tiltfile is not Starlark: %v", err)
	}
	manifest := string(files["deploy/k8s/worker-payments.yaml"])
	if !strings.Contains(manifest, "image: toolfleet-worker-payments\n") {
		t.Fatalf("manifest does not run toolfleet-worker-payments")
	}
	for _, want := range []string{"docker_build(\n    'toolfleet-worker-payments'", "read_file('deploy/k8s/worker-payments.yaml')", "o['metadata']['namespace'] = NAMESPACE",
		"dockerfile='deploy/tilt.Dockerfile'", "-o build/tilt/worker ."} {
		if !strings.Contains(tiltfile, want) {
			t.Errorf("Tiltfile lacks %q", want)
		}
	}
	if df := string(files["deploy/tilt.Dockerfile"]); !strings.Contains(df, "COPY worker /app") {
		t.Errorf("deploy/tilt.Dockerfile does not copy build/tilt/worker:\n%s", df)
	}
}

// The vendored contracts are the ones this checkout serves and builds with.
func TestVendoredContracts(t *testing.T) {
	t.Parallel()
	r := root(t)
	files, err := (scaffold.Toolkit{Name: "tickets"}).Files()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(r, "proto/toolfleet/v1/options.proto"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files["third_party/toolfleet/toolfleet/v1/options.proto"], want) {
		t.Error("internal/scaffold/toolkit/third_party/toolfleet/toolfleet/v1/options.proto differs from proto/toolfleet/v1/options.proto: copy it over")
	}
	// build/protovalidate is printed by `make generate` from the pinned protovalidate module.
	printed, err := os.ReadFile(filepath.Join(r, "build/protovalidate/buf/validate/validate.proto"))
	if errors.Is(err, os.ErrNotExist) {
		if os.Getenv("CI") == "true" {
			t.Fatal("build/protovalidate is missing: `make test` prints it before the tests (make generate)")
		}
		t.Skip("build/protovalidate not printed yet (make generate); the options.proto check ran")
	}
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files["third_party/protovalidate/buf/validate/validate.proto"], printed) {
		t.Error("the vendored validate.proto differs from build/protovalidate's: copy it over")
	}
}

// onlyGoEnv is the environment of a newcomer's machine that has Go and
// nothing else: PATH holds only the Go toolchain's folder (no buf, no
// plugins); modules come from GOPROXY as set, into the shared module cache.
func onlyGoEnv(t *testing.T) (goBin string, env []string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	return goBin, append(env, "PATH="+filepath.Dir(goBin), "GOTOOLCHAIN=local", "GOWORK=off", "GOFLAGS=-buildvcs=false")
}

// TestScaffoldBuildsAndPasses is what a new team does: scaffold a toolkit
// outside any checkout, generate its Go with the tools its go.mod pins (only
// Go on PATH), and run its tests (a worker behind a real gateway). toolfleet
// is not published, so go.mod replaces it with this checkout.
func TestScaffoldBuildsAndPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("generates and builds two modules and runs their tests")
	}
	t.Parallel()
	r := root(t)
	goBin, env := onlyGoEnv(t)
	for _, tc := range []struct{ template, name, want string }{
		{scaffold.TemplateMinimal, "weather", "--- PASS: TestHello"},
		{scaffold.TemplateRich, "tickets", "--- PASS: TestContractRefusals/limit_over_bound"},
	} {
		t.Run(tc.template, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.name)
			if _, err := (scaffold.Toolkit{Name: tc.name, Module: "example.com/acme/" + tc.name, Replace: r, Template: tc.template}).Write(dir); err != nil {
				t.Fatal(err)
			}
			var progress strings.Builder
			start := time.Now()
			if err := (scaffold.Generator{Go: goBin, Env: env, Progress: &progress}).Generate(t.Context(), dir); err != nil {
				t.Fatal(err)
			}
			t.Logf("generate (go mod tidy, go tool buf generate, go mod tidy): %s\n%s", time.Since(start).Round(100*time.Millisecond), progress.String())
			for _, f := range []string{tc.name + ".pb.go", tc.name + "_grpc.pb.go"} {
				if _, err := os.Stat(filepath.Join(dir, "gen", tc.name, "v1", f)); err != nil {
					t.Fatalf("generation wrote no gen/%s/v1/%s: %v", tc.name, f, err)
				}
			}
			run := func(args ...string) string {
				t.Helper()
				start := time.Now()
				cmd := exec.CommandContext(t.Context(), goBin, args...)
				cmd.Dir, cmd.Env = dir, env
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				t.Logf("go %s: %s", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
				return string(out)
			}
			run("tool", "buf", "lint", "proto")
			run("vet", "./...")
			if out := run("test", "-count=1", "-v", "./..."); !strings.Contains(out, tc.want) {
				t.Errorf("the scaffold's tests did not report %q:\n%s", tc.want, out)
			}
			run("build", "-o", filepath.Join(t.TempDir(), tc.name), ".")
		})
	}
}
