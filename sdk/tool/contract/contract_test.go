package contract_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
	rpbalpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

func linked(t *testing.T, services ...string) []*toolfleetv1.ToolDefinition {
	t.Helper()
	c, err := contract.LinkedContracts(services...)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := c.Definitions()
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

func byID(defs []*toolfleetv1.ToolDefinition) map[string]*toolfleetv1.ToolDefinition {
	m := map[string]*toolfleetv1.ToolDefinition{}
	for _, d := range defs {
		m[d.GetId()] = d
	}
	return m
}

func TestDefinitionsOfCalculator(t *testing.T) {
	t.Parallel()
	defs := byID(linked(t, calculatorv1.CalculatorService_ServiceDesc.ServiceName))
	want := []string{"Calculator.Add@1.0.0", "Calculator.Subtract@1.0.0", "Calculator.Multiply@1.0.0",
		"Calculator.Divide@1.0.0", "Calculator.Evaluate@1.0.0"}
	if len(defs) != len(want) {
		t.Fatalf("got %d definitions, want %d", len(defs), len(want))
	}
	for _, id := range want {
		if defs[id] == nil {
			t.Fatalf("missing %s", id)
		}
	}
	add := defs["Calculator.Add@1.0.0"]
	if add.GetModelName() != "Calculator_Add" || add.GetToolkit() != "Calculator" || add.GetName() != "Add" ||
		add.GetVersion() != "1.0.0" || add.GetGrpcMethod() != "/tools.calculator.v1.CalculatorService/Add" ||
		add.GetTitle() != "Add" || len(add.GetExamples()) != 1 {
		t.Fatalf("Add = %v", add)
	}
	wantHints := &toolfleetv1.ResolvedHints{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false}
	if !proto.Equal(add.GetHints(), wantHints) {
		t.Fatalf("hints = %v, want %v", add.GetHints(), wantHints)
	}
	if got := add.GetInputSchema().GetFields()["properties"].GetStructValue().GetFields()["a"].GetStructValue().GetFields()["type"].GetStringValue(); got != "number" {
		t.Fatalf("input schema a.type = %q", got)
	}
	if got := defs["Calculator.Evaluate@1.0.0"].GetRequirements().GetTimeout().AsDuration(); got != 2*time.Second {
		t.Fatalf("Evaluate timeout = %v", got)
	}
}

func TestDefinitionsDefaultsAndPolicy(t *testing.T) {
	t.Parallel()
	defs := byID(linked(t, schematestv1.SchemaTestService_ServiceDesc.ServiceName))
	types := defs["SchemaTest.Types@0.3.1"]
	if types == nil {
		t.Fatalf("no Types in %v", defs)
	}
	wantReq := &toolfleetv1.ToolRequirements{
		Scopes:           []string{"schematest:read"},
		RequiresApproval: true,
		Timeout:          &durationpb3s,
		Retry:            &toolfleetv1.RetryPolicy{MaxAttempts: 3, InitialBackoff: &durationpb100ms},
		MaxResultBytes:   4096,
	}
	if diff := cmpDiff(wantReq, types.GetRequirements()); diff != "" {
		t.Fatalf("requirements (-want +got):\n%s", diff)
	}
	if types.GetTitle() != "Every type" {
		t.Fatalf("title = %q", types.GetTitle())
	}
	// Hints: read_only and idempotent set, the rest from the MCP defaults.
	if h := types.GetHints(); !h.GetReadOnly() || h.GetDestructive() || !h.GetIdempotent() || !h.GetOpenWorld() {
		t.Fatalf("Types hints = %v", h)
	}
	// The name option renames the tool, not the gRPC method.
	if c := defs["SchemaTest.CheckConstraints@0.3.1"]; c == nil || c.GetModelName() != "SchemaTest_CheckConstraints" ||
		c.GetGrpcMethod() != "/tools.schematest.v1.SchemaTestService/Constraints" {
		t.Fatalf("renamed tool = %v", c)
	}
	// No options at all: MCP defaults and a generated description.
	p := defs["SchemaTest.Panic@0.3.1"]
	if h := p.GetHints(); h.GetReadOnly() || !h.GetDestructive() || h.GetIdempotent() || !h.GetOpenWorld() {
		t.Fatalf("Panic hints = %v, want the MCP defaults", h)
	}
	if p.GetDescription() == "" || p.GetTitle() != "Panic" {
		t.Fatalf("Panic = %v", p)
	}
}

func cmpDiff(want, got proto.Message) string {
	if proto.Equal(want, got) {
		return ""
	}
	return "want " + prototext.Format(want) + "\ngot  " + prototext.Format(got)
}

// serve runs a plain grpc-go server (no toolfleet SDK) with reflection on loopback.
func serve(t *testing.T, register func(s *grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	reflection.Register(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

type plainTestService struct {
	testgrpc.UnimplementedTestServiceServer
}

func TestFetchPlainServiceYieldsTools(t *testing.T) {
	t.Parallel()
	conn := serve(t, func(s *grpc.Server) { testgrpc.RegisterTestServiceServer(s, plainTestService{}) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := contract.Fetch(ctx, conn)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if len(c.Services) != 1 || c.Services[0].FullName() != "grpc.testing.TestService" {
		t.Fatalf("services = %v", c.Services)
	}
	defs, err := c.Definitions()
	if err != nil {
		t.Fatalf("Definitions: %v", err)
	}
	got := byID(defs)
	// Only the unary methods become tools; the package has no version suffix.
	for _, id := range []string{"Test.EmptyCall@0.0.0", "Test.UnaryCall@0.0.0", "Test.CacheableUnaryCall@0.0.0", "Test.UnimplementedCall@0.0.0"} {
		d := got[id]
		if d == nil {
			t.Fatalf("missing %s in %v", id, defs)
		}
		if h := d.GetHints(); h.GetReadOnly() || !h.GetDestructive() || h.GetIdempotent() || !h.GetOpenWorld() {
			t.Fatalf("%s hints = %v, want MCP defaults", id, h)
		}
		if d.GetInputSchema() == nil || d.GetDescription() == "" {
			t.Fatalf("%s incomplete: %v", id, d)
		}
	}
	if len(defs) != 4 {
		t.Fatalf("got %d tools, want 4 (streaming methods are not tools)", len(defs))
	}
	if md, ok := c.Method("/grpc.testing.TestService/UnaryCall"); !ok || md.Input().FullName() != "grpc.testing.SimpleRequest" {
		t.Fatalf("Method lookup = %v, %v", md, ok)
	}
}

// TestFetchMatchesLinked shows that contracts loaded by reflection yield exactly the
// definitions of the linked contracts, options and rules included.
func TestFetchMatchesLinked(t *testing.T) {
	t.Parallel()
	conn := serve(t, func(s *grpc.Server) {
		calculatorv1.RegisterCalculatorServiceServer(s, calculatorv1.UnimplementedCalculatorServiceServer{})
		schematestv1.RegisterSchemaTestServiceServer(s, schematestv1.UnimplementedSchemaTestServiceServer{})
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := contract.Fetch(ctx, conn)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	fetched, err := c.Definitions()
	if err != nil {
		t.Fatal(err)
	}
	want := byID(linked(t, calculatorv1.CalculatorService_ServiceDesc.ServiceName, schematestv1.SchemaTestService_ServiceDesc.ServiceName))
	if len(fetched) != len(want) {
		t.Fatalf("fetched %d definitions, want %d", len(fetched), len(want))
	}
	for _, d := range fetched {
		if !proto.Equal(d, want[d.GetId()]) {
			t.Fatalf("%s differs:\nfetched %v\nlinked  %v", d.GetId(), d, want[d.GetId()])
		}
	}
}

// TestFetchV1Alpha reads contracts from a server that only has the older
// v1alpha reflection service.
func TestFetchV1Alpha(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	calculatorv1.RegisterCalculatorServiceServer(s, calculatorv1.UnimplementedCalculatorServiceServer{})
	rpbalpha.RegisterServerReflectionServer(s, reflection.NewServer(reflection.ServerOptions{Services: s}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := contract.Fetch(ctx, conn)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	defs, err := c.Definitions()
	if err != nil || len(defs) != 5 {
		t.Fatalf("definitions: %d, %v", len(defs), err)
	}
}

func TestFetchWithoutReflection(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer() // no reflection
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := contract.Fetch(ctx, conn); !errors.Is(err, contract.ErrReflection) {
		t.Fatalf("Fetch = %v, want ErrReflection", err)
	}
}
