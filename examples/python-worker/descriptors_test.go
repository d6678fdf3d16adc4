// Package pythonworker_test checks the Python example worker (worker.py): its
// descriptor set is the one the Go side compiles from proto/, and the worker,
// started as a subprocess, joins a real gateway over NATS and answers calls on
// gRPC and MCP.
package pythonworker_test

import (
	"bytes"
	"flag"
	"os"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
)

var update = flag.Bool("update", false, "rewrite descriptors.binpb from the contracts compiled into this test")

// descriptorsFile is what worker.py loads: the calculator contract, the files the
// worker needs to serve reflection, health, tool errors and the call journal,
// and their imports.
const descriptorsFile = "descriptors.binpb"

// descriptorSet builds the set from the Go packages generated from proto/ (and
// grpc-go's reflection and health protos), imports first, in a stable order.
func descriptorSet() ([]byte, error) {
	// google.rpc.Status (grpc-status-details-bin) is linked in by grpc-go's status package.
	status, err := protoregistry.GlobalFiles.FindFileByPath("google/rpc/status.proto")
	if err != nil {
		return nil, err
	}
	roots := []protoreflect.FileDescriptor{
		calculatorv1.File_tools_calculator_v1_calculator_proto,
		toolfleetv1.File_toolfleet_v1_tool_proto,    // ToolError
		toolfleetv1.File_toolfleet_v1_journal_proto, // WorkerCallOutcome (the call journal's F record)
		status,
		healthpb.File_grpc_health_v1_health_proto,
		rpb.File_grpc_reflection_v1_reflection_proto,
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	for _, fd := range roots {
		add(fd)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(set)
}

// TestDescriptorsUpToDate fails when descriptors.binpb differs from the contracts
// in proto/ (regenerate with `go test ./examples/python-worker -run
// TestDescriptorsUpToDate -update`, or `make python-worker-descriptors`).
func TestDescriptorsUpToDate(t *testing.T) {
	want, err := descriptorSet()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(descriptorsFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(descriptorsFile)
	if err != nil {
		t.Fatalf("%v (generate it with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: the contracts changed; run `make python-worker-descriptors` and commit it", descriptorsFile)
	}
}
