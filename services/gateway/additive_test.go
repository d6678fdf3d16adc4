package gateway_test

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// calculatorEdited is Calculator@1.0.0 with only the tools named in keep,
// after edit (nil: none) changed its file.
func calculatorEdited(t *testing.T, keep []string, edit func(*descriptorpb.FileDescriptorProto)) (*protoregistry.Files, protoreflect.ServiceDescriptor) {
	t.Helper()
	full, sd := calculatorVersion(t, 1)
	fdp := protodesc.ToFileDescriptorProto(sd.ParentFile())
	svc := fdp.GetService()[0]
	svc.Method = slices.DeleteFunc(svc.Method, func(m *descriptorpb.MethodDescriptorProto) bool { return !slices.Contains(keep, m.GetName()) })
	if edit != nil {
		edit(fdp)
	}
	fd, err := protodesc.NewFile(fdp, full)
	if err != nil {
		t.Fatal(err)
	}
	files := new(protoregistry.Files)
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if _, err := files.FindFileByPath(f.Path()); err == nil {
			return
		}
		imps := f.Imports()
		for i := range imps.Len() {
			add(imps.Get(i).FileDescriptor)
		}
		if err := files.RegisterFile(f); err != nil {
			t.Fatalf("register %s: %v", f.Path(), err)
		}
	}
	add(fd)
	return files, fd.Services().Get(0)
}

// TestReplicaThatOnlyAddsToolsJoins: with AcceptAdditiveContracts (as
// `toolfleet dev` runs it), a replica of Calculator@1.0.0 whose contract only
// adds tools to the registered one (a rebuild after `toolfleet add tool`)
// joins beside it: the shared tool gets both replicas,
// the new tools the new one only. A replica that then drops a tool again, or
// keeps the tools but renumbers a field of one, is refused: what a call
// means may only change with a new version.
func TestReplicaThatOnlyAddsToolsJoins(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	// A gateway with the default trust rule refuses it; the larger replica is
	// refused there while the smaller one keeps serving.
	strict := startGateway(t, gateway.Config{NATSURL: srv.URL(), Auth: gateway.AuthConfig{Disabled: true}})
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Auth: gateway.AuthConfig{Disabled: true}, AcceptAdditiveContracts: true})
	files, sd := calculatorEdited(t, []string{"Add"}, nil)
	small := startPlainCalculatorFrom(t, "127.0.0.1:0", files, sd)
	announce(t, srv.URL(), small.addr)
	waitTool(t, g, "Calculator.Add@1.0.0")
	waitTool(t, strict, "Calculator.Add@1.0.0")
	if n := gateway.ReplicasForTest(g, "Calculator.Subtract@1.0.0"); n != 0 {
		t.Fatalf("Calculator.Subtract served by %d replicas before the larger one joined", n)
	}

	larger := startPlainCalculator(t, 1) // Add, Subtract, Multiply, Divide, Evaluate
	announce(t, srv.URL(), larger.addr)
	waitFor(t, "the replica that adds tools to join", func() bool { joined, _ := g.WorkerAdmission(larger.addr); return joined })
	if n := gateway.ReplicasForTest(g, "Calculator.Add@1.0.0"); n != 2 {
		t.Fatalf("%d replicas of Calculator.Add@1.0.0; want the registered one and the one that adds tools", n)
	}
	if n := gateway.ReplicasForTest(g, "Calculator.Subtract@1.0.0"); n != 1 {
		t.Fatalf("%d replicas of the added Calculator.Subtract@1.0.0; want 1", n)
	}
	if joined, _ := g.WorkerAdmission(small.addr); !joined {
		t.Fatal("the registered replica no longer takes calls")
	}
	waitFor(t, "the default gateway to refuse the replica that adds tools", func() bool { _, refused := strict.WorkerAdmission(larger.addr); return refused })
	if n := gateway.ReplicasForTest(strict, "Calculator.Subtract@1.0.0"); n != 0 {
		t.Fatalf("the default gateway serves the added Calculator.Subtract on %d replicas", n)
	}

	for _, tc := range []struct {
		name string
		keep []string
		edit func(*descriptorpb.FileDescriptorProto)
	}{
		{"a tool dropped", []string{"Add", "Subtract", "Multiply", "Divide"}, nil},
		{"a field renumbered", []string{"Add", "Subtract", "Multiply", "Divide", "Evaluate"}, func(fdp *descriptorpb.FileDescriptorProto) {
			for _, m := range fdp.GetMessageType() {
				if m.GetName() == "AddRequest" {
					for _, f := range m.GetField() {
						f.Number = proto.Int32(f.GetNumber() + 10)
					}
				}
			}
		}},
	} {
		files, sd := calculatorEdited(t, tc.keep, tc.edit)
		other := startPlainCalculatorFrom(t, "127.0.0.1:0", files, sd)
		announce(t, srv.URL(), other.addr)
		waitFor(t, "the replica with "+tc.name+" to be refused", func() bool { _, refused := g.WorkerAdmission(other.addr); return refused })
		if joined, _ := g.WorkerAdmission(other.addr); joined {
			t.Fatalf("the replica with %s joined", tc.name)
		}
	}
	if n := gateway.ReplicasForTest(g, "Calculator.Add@1.0.0"); n != 2 {
		t.Fatalf("%d replicas of Calculator.Add@1.0.0 after the refusals; want 2", n)
	}
	for range 10 {
		if r, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@1.0.0", Input: addInput(1, 2)}); err != nil || !r.GetSuccess() {
			t.Fatalf("call: %v %v", r, err)
		}
	}
	if small.adds.Load() == 0 || larger.adds.Load() == 0 {
		t.Fatalf("calls ran %d on the registered replica and %d on the one that adds tools; want both used", small.adds.Load(), larger.adds.Load())
	}
}
