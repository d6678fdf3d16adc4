// Command credcheck refuses a tool contract change that widens the delegated
// credential of a served tool version.
//
// `buf breaking` compares the shape of descriptors, not the values of custom
// options, so it cannot see a tool that starts asking for more of its callers'
// accounts: a new scope, another provider or another audience
// (toolfleet.v1.ToolOptions.credential). Callers consented to the scopes a
// version declared; asking for more is a new version. credcheck compares two
// buf images (as scripts/breaking.sh builds them) method by method under the
// given path prefix and fails when a method of an unchanged toolkit version
// declares a wider credential than before. Narrowing and removing are fine.
//
//	go run ./credcheck -against base.binpb -path tools/ current.binpb
package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

func main() {
	against := flag.String("against", "", "buf image of the base (required)")
	prefix := flag.String("path", "tools/", "compare only files whose path starts with this")
	flag.Parse()
	if *against == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: credcheck -against BASE.binpb [-path tools/] CURRENT.binpb")
		os.Exit(2)
	}
	findings, err := compareFiles(*against, flag.Arg(0), *prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "credcheck:", err)
		os.Exit(1)
	}
	if report(os.Stderr, findings) {
		os.Exit(1)
	}
}

// report prints the findings and says whether there were any.
func report(w io.Writer, findings []string) bool {
	for _, f := range findings {
		fmt.Fprintln(w, f)
	}
	if len(findings) > 0 {
		fmt.Fprintln(w, "a served tool version may not ask its callers for more than they consented to: ship a new toolkit version (docs/credentials.md)")
	}
	return len(findings) > 0
}

func compareFiles(basePath, currentPath, prefix string) ([]string, error) {
	base, err := load(basePath, prefix)
	if err != nil {
		return nil, fmt.Errorf("base image: %w", err)
	}
	current, err := load(currentPath, prefix)
	if err != nil {
		return nil, fmt.Errorf("current image: %w", err)
	}
	return compare(base, current), nil
}

// credential is what a method declares; version is its toolkit's version.
type credential struct {
	provider, audience, version string
	scopes                      []string
}

// compare lists, in a stable order, every method of current whose credential
// widens the one it had in base under the same toolkit version.
func compare(base, current map[string]credential) []string {
	var out []string
	for _, m := range slices.Sorted(maps.Keys(current)) {
		now := current[m]
		before, served := base[m]
		if !served || before.version != now.version || now.provider == "" {
			continue
		}
		switch {
		case before.provider == "":
			out = append(out, fmt.Sprintf("%s@%s: now acts with the caller's %q account (it acted as itself)", m, now.version, now.provider))
		case before.provider != now.provider || before.audience != now.audience:
			out = append(out, fmt.Sprintf("%s@%s: credential moves from %q %q to %q %q", m, now.version, before.provider, before.audience, now.provider, now.audience))
		default:
			var added []string
			for _, s := range now.scopes {
				if !slices.Contains(before.scopes, s) {
					added = append(added, s)
				}
			}
			if len(added) > 0 {
				out = append(out, fmt.Sprintf("%s@%s: credential %q widens by scopes %s", m, now.version, now.provider, strings.Join(added, " ")))
			}
		}
	}
	return out
}

// load reads a buf image (a FileDescriptorSet with imports) and returns the
// credential of every method in files under prefix, keyed by
// "package.Service/Method". The toolfleet options are resolved from the
// image itself, so the check needs no generated code.
func load(path, prefix string) (map[string]credential, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	types := dynamicpb.NewTypes(files)
	toolExt, err := types.FindExtensionByName("toolfleet.v1.tool")
	if err != nil {
		// No file imports the toolfleet options: no tool declares anything.
		return map[string]credential{}, nil
	}
	kitExt, err := types.FindExtensionByName("toolfleet.v1.toolkit")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]credential{}
	var failed error
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(fd.Path(), prefix) {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			version := stringField(reparse(sd.Options(), types, &failed), kitExt, "version")
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				opts := reparse(md.Options(), types, &failed)
				c := credential{version: version}
				if opts != nil && opts.Has(toolExt.TypeDescriptor()) {
					tool := opts.Get(toolExt.TypeDescriptor()).Message()
					if f := tool.Descriptor().Fields().ByName("credential"); f != nil && tool.Has(f) {
						cm := tool.Get(f).Message()
						c.provider = cm.Get(cm.Descriptor().Fields().ByName("provider")).String()
						c.audience = cm.Get(cm.Descriptor().Fields().ByName("audience")).String()
						list := cm.Get(cm.Descriptor().Fields().ByName("scopes")).List()
						for k := range list.Len() {
							c.scopes = append(c.scopes, list.Get(k).String())
						}
					}
				}
				out[string(sd.FullName())+"/"+string(md.Name())] = c
			}
		}
		return true
	})
	return out, failed
}

// reparse reads options again with the image's own extension types (they
// arrive as unknown fields: the extensions are not linked into this program).
func reparse(opts proto.Message, types *dynamicpb.Types, failed *error) protoreflect.Message {
	if opts == nil {
		return nil
	}
	b, err := proto.Marshal(opts)
	if err != nil {
		*failed = err
		return nil
	}
	m := dynamicpb.NewMessage(opts.ProtoReflect().Descriptor())
	if err := (proto.UnmarshalOptions{Resolver: types}).Unmarshal(b, m); err != nil {
		*failed = err
		return nil
	}
	return m
}

// stringField returns field name of the message extension ext on opts, or "".
func stringField(opts protoreflect.Message, ext protoreflect.ExtensionType, name protoreflect.Name) string {
	if opts == nil || !opts.Has(ext.TypeDescriptor()) {
		return ""
	}
	m := opts.Get(ext.TypeDescriptor()).Message()
	f := m.Descriptor().Fields().ByName(name)
	if f == nil {
		return ""
	}
	return m.Get(f).String()
}
