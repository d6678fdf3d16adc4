package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// image compiles a tool contract against the repository's real options.proto
// and writes it as buf writes an image: a FileDescriptorSet with its imports.
func image(t *testing.T, version, toolOption string) string {
	t.Helper()
	dir := t.TempDir()
	src := `syntax = "proto3";
package tools.acme.v1;
import "toolfleet/v1/options.proto";
service AcmeService {
  option (toolfleet.v1.toolkit) = {name: "Acme", version: "` + version + `"};
  rpc List(Req) returns (Req) { option (toolfleet.v1.tool) = {` + toolOption + `}; }
  rpc Other(Req) returns (Req);
}
message Req {}
`
	if err := os.MkdirAll(filepath.Join(dir, "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tools", "acme.proto"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		ImportPaths: []string{dir, filepath.Join("..", "..", "proto")},
	})}
	files, err := c.Compile(t.Context(), "tools/acme.proto")
	if err != nil {
		t.Fatal(err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := range fd.Imports().Len() {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(files[0])
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "image.binpb")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCredentialChanges(t *testing.T) {
	t.Parallel()
	const gh = `credential: {provider: "github", scopes: ["repo:read"]}`
	for _, tc := range []struct {
		name              string
		before, now       string // tool options of Acme.List
		beforeVer, nowVer string
		want              string // in the one finding; "" = none
	}{
		{"unchanged", gh, gh, "1.0.0", "1.0.0", ""},
		{"narrowed", `credential: {provider: "github", scopes: ["repo:read", "user"]}`, gh, "1.0.0", "1.0.0", ""},
		{"removed", gh, `description: "x"`, "1.0.0", "1.0.0", ""},
		{"widened", gh, `credential: {provider: "github", scopes: ["repo:read", "repo:write"]}`, "1.0.0", "1.0.0", "widens by scopes repo:write"},
		{"widened in a new version", gh, `credential: {provider: "github", scopes: ["repo:write"]}`, "1.0.0", "1.1.0", ""},
		{"declared anew", `description: "x"`, gh, "1.0.0", "1.0.0", `now acts with the caller's "github" account`},
		{"other provider", gh, `credential: {provider: "gitlab", scopes: ["repo:read"]}`, "1.0.0", "1.0.0", `to "gitlab"`},
		{"other audience", `credential: {provider: "corp", audience: "a"}`, `credential: {provider: "corp", audience: "b"}`, "1.0.0", "1.0.0", `"b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			findings, err := compareFiles(image(t, tc.beforeVer, tc.before), image(t, tc.nowVer, tc.now), "tools/")
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(findings) != 0 {
					t.Fatalf("findings %q, want none", findings)
				}
				return
			}
			if len(findings) != 1 || !strings.HasPrefix(findings[0], "tools.acme.v1.AcmeService/List@") || !strings.Contains(findings[0], tc.want) {
				t.Fatalf("findings %q, want one about List containing %q", findings, tc.want)
			}
		})
	}
}

// Files outside the path prefix are not compared.
func TestPathPrefix(t *testing.T) {
	t.Parallel()
	findings, err := compareFiles(image(t, "1.0.0", `description: "x"`),
		image(t, "1.0.0", `credential: {provider: "github"}`), "other/")
	if err != nil || len(findings) != 0 {
		t.Fatalf("findings %q, error %v; want none", findings, err)
	}
}
