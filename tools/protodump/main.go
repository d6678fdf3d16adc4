// Command protodump prints .proto sources from file descriptors that Go modules embed.
//
// No buf.build registry is reachable where toolfleet is built, so the buf/validate
// contract that tool inputs import is printed from the descriptor compiled into
// buf.build/gen/go/bufbuild/protovalidate instead of fetched:
//
//	go run ./protodump -out ../build/protovalidate buf/validate/validate.proto
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jhump/protoreflect/desc"
	"github.com/jhump/protoreflect/desc/protoprint"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Registers buf/validate/validate.proto in the global registry.
	_ "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
)

func main() {
	out := flag.String("out", ".", "folder to write the .proto files into")
	flag.Parse()
	if err := run(*out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "protodump:", err)
		os.Exit(1)
	}
}

func run(out string, paths []string) error {
	if len(paths) == 0 {
		return fmt.Errorf("name at least one registered .proto path")
	}
	printer := &protoprint.Printer{Compact: false, SortElements: false}
	for _, path := range paths {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(path)
		if err != nil {
			return fmt.Errorf("find %s: %w", path, err)
		}
		d, err := desc.WrapFile(fd)
		if err != nil {
			return fmt.Errorf("wrap %s: %w", path, err)
		}
		target := filepath.Join(out, path)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		f, err := os.Create(target)
		if err != nil {
			return err
		}
		if err := printer.PrintProtoFile(d, f); err != nil {
			f.Close()
			return fmt.Errorf("print %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
