package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `package p

import (
	"fmt"

	s3 "example.com/s3store"
	"example.com/gcloud"
	"example.com/filestore"
	"go.uber.org/fx"
)

var Module = fx.Options(
	filestore.Module,
	s3.Module,
)

func pick(scheme string) (string, error) {
	switch scheme {
	case filestore.Scheme:
		return filestore.Name, nil
	case s3.Scheme:
		return s3.Name, nil
	case gcloud.Scheme:
		return gcloud.Name, nil
	default:
		return "", fmt.Errorf("unknown %s", scheme)
	}
}
`

func TestDropImportsRemovesCasesAndModules(t *testing.T) {
	t.Parallel()
	out, err := dropImports([]byte(sample), []string{"example.com/s3store", "example.com/gcloud"})
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, gone := range []string{"s3store", "s3.", "gcloud"} {
		if strings.Contains(got, gone) {
			t.Errorf("%q is still in the result:\n%s", gone, got)
		}
	}
	for _, kept := range []string{`"example.com/filestore"`, "filestore.Module,", "case filestore.Scheme:", "default:"} {
		if !strings.Contains(got, kept) {
			t.Errorf("%q was removed too:\n%s", kept, got)
		}
	}
}

func TestDropImportsRefusesWhatItCannotCut(t *testing.T) {
	t.Parallel()
	otherUse := strings.Replace(sample, "func pick(", "var name = s3.Name\n\nfunc pick(", 1)
	unused := strings.Replace(sample, "\t\"go.uber.org/fx\"\n", "\t\"go.uber.org/fx\"\n\t\"example.com/unused\"\n", 1)
	for _, tc := range []struct {
		name, src, drop, want string
	}{
		{"a use outside a case or a module list", otherUse, "example.com/s3store", "still used at line"},
		{"an import the file no longer has", sample, "example.com/moved", "not found"},
		{"an import nothing cuttable uses", unused, "example.com/unused", "no switch case or call argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := dropImports([]byte(tc.src), []string{tc.drop})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// heavy are packages the cuts leave out of toolfleet (one per provider).
var heavy = []string{
	"go.temporal.io/server/common/archiver/s3store",
	"go.temporal.io/server/common/archiver/gcloud",
	"github.com/aws/aws-sdk-go-v2/service/s3",
	"cloud.google.com/go/storage",
	"go.temporal.io/auto-scaled-workers/wci/workercomponent",
	"k8s.io/client-go/kubernetes",
	"cloud.google.com/go/run/apiv2",
}

func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

func linked(deps string) []string {
	var found []string
	have := map[string]bool{}
	for _, p := range strings.Fields(deps) {
		have[p] = true
	}
	for _, h := range heavy {
		if have[h] {
			found = append(found, h)
		}
	}
	return found
}

// The slim module set must compile and leave every provider out, against the
// Temporal version go.mod pins: an upgrade that breaks the cuts fails here,
// not in someone's make install.
func TestSlimTemporalBuildsWithoutProviders(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if got := linked(goCmd(t, root, "list", "-deps", "./cmd/toolfleet")); len(got) != len(heavy) {
		t.Fatalf("the stock build links only %v of %v: update heavy to what Temporal imports now", got, heavy)
	}
	// The folder make install uses, so that both share Go's build cache (the
	// copy's path is part of each package's cache key).
	out := filepath.Join(root, "build", "slim")
	if err := run(root, out); err != nil {
		t.Fatal(err)
	}
	modfile := filepath.Join(out, "go.mod")
	if got := linked(goCmd(t, root, "list", "-modfile", modfile, "-deps", "./cmd/toolfleet")); len(got) > 0 {
		t.Errorf("the slim build still links %v", got)
	}
	// devstack is what imports the Temporal server: compiling it compiles the
	// patched packages and everything between them and toolfleet.
	goCmd(t, root, "build", "-modfile", modfile, "./internal/devstack")
	if _, err := os.Stat(filepath.Join(out, "temporal", "go.mod")); err != nil {
		t.Errorf("the copy has no go.mod: %v", err)
	}
}
