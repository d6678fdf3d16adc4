package contract_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

func TestMCPNameAndContentResult(t *testing.T) {
	t.Parallel()
	defs := byID(linked(t, "tools.conformance.v1.ConformanceService", "tools.calculator.v1.CalculatorService"))
	st := defs["Conformance.SimpleText@1.0.0"]
	if st.GetMcpName() != "test_simple_text" || contract.MCPName(st) != "test_simple_text" || st.GetModelName() != "Conformance_SimpleText" || !st.GetContentResult() {
		t.Errorf("SimpleText: mcp_name %q, MCPName %q, model name %q, content %v", st.GetMcpName(), contract.MCPName(st), st.GetModelName(), st.GetContentResult())
	}
	add := defs["Calculator.Add@1.0.0"]
	if add.GetMcpName() != "" || contract.MCPName(add) != "Calculator_Add" || add.GetContentResult() {
		t.Errorf("Add: mcp_name %q, MCPName %q, content %v", add.GetMcpName(), contract.MCPName(add), add.GetContentResult())
	}
}

// mcp_task_required reaches the definition; a tool without it is not task-only.
func TestMCPTaskRequired(t *testing.T) {
	t.Parallel()
	defs := byID(linked(t, "tools.conformance.v1.ConformanceService"))
	for id, want := range map[string]bool{"Conformance.FailingJob@1.0.0": true, "Conformance.ProtocolErrorJob@1.0.0": true,
		"Conformance.SlowCompute@1.0.0": false, "Conformance.Greet@1.0.0": false} {
		d, ok := defs[id]
		if !ok || d.GetMcpTaskRequired() != want {
			t.Errorf("%s: listed %v, mcp_task_required %v, want %v", id, ok, d.GetMcpTaskRequired(), want)
		}
	}
}

// deduplicates_call_id reaches the definition of the tool that declares it
// and of no other.
func TestDeduplicatesCallID(t *testing.T) {
	t.Parallel()
	defs, err := conformanceWith(t, func(f, _ *toolfleetv1.ToolOptions) { f.DeduplicatesCallId = true })
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) < 2 || !defs[0].GetDeduplicatesCallId() || defs[1].GetDeduplicatesCallId() {
		t.Fatalf("deduplicates_call_id of the first two tools: %v, %v", defs[0].GetDeduplicatesCallId(), defs[1].GetDeduplicatesCallId())
	}
	for _, d := range linked(t, "tools.conformance.v1.ConformanceService") {
		if d.GetDeduplicatesCallId() {
			t.Errorf("%s: deduplicates_call_id without the option", d.GetId())
		}
	}
}

// conformanceWith builds the Conformance service with edit applied to the
// tool options of its first two methods.
func conformanceWith(t *testing.T, edit func(first, second *toolfleetv1.ToolOptions)) ([]*toolfleetv1.ToolDefinition, error) {
	t.Helper()
	fdp := protodesc.ToFileDescriptorProto(conformancev1.File_tools_conformance_v1_conformance_proto)
	fdp.Package = proto.String("tools.conformanceedit.v1")
	ms := fdp.GetService()[0].GetMethod()
	opts := func(m *descriptorpb.MethodDescriptorProto) *toolfleetv1.ToolOptions {
		return proto.CloneOf(proto.GetExtension(m.GetOptions(), toolfleetv1.E_Tool).(*toolfleetv1.ToolOptions))
	}
	first, second := opts(ms[0]), opts(ms[1])
	edit(first, second)
	proto.SetExtension(ms[0].GetOptions(), toolfleetv1.E_Tool, first)
	proto.SetExtension(ms[1].GetOptions(), toolfleetv1.E_Tool, second)
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return contract.Definitions(fd.Services().Get(0))
}

func TestMCPNameRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(first, second *toolfleetv1.ToolOptions)
		want error
		msg  string
	}{
		{"space", func(f, _ *toolfleetv1.ToolOptions) { f.McpName = "simple text" }, contract.ErrInvalidName, `"simple text"`},
		{"slash", func(f, _ *toolfleetv1.ToolOptions) { f.McpName = "a/b" }, contract.ErrInvalidName, `"a/b"`},
		{"too long", func(f, _ *toolfleetv1.ToolOptions) { f.McpName = strings.Repeat("x", 129) }, contract.ErrInvalidName, "128"},
		{"twice in one toolkit", func(f, s *toolfleetv1.ToolOptions) { f.McpName, s.McpName = "same", "same" }, contract.ErrNameCollision, `"same"`},
		{"up to case", func(f, s *toolfleetv1.ToolOptions) { f.McpName, s.McpName = "Same", "same" }, contract.ErrNameCollision, "give one of them another mcp_name"},
		{"another tool's MCP name", func(f, _ *toolfleetv1.ToolOptions) { f.McpName = "TEST_ERROR_HANDLING" }, contract.ErrNameCollision, "Conformance.ErrorHandling@1.0.0"},
		{"another tool's model name", func(f, s *toolfleetv1.ToolOptions) { f.McpName, s.McpName = "Conformance_ImageContent", "" }, contract.ErrNameCollision, "Conformance.ImageContent@1.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := conformanceWith(t, tt.edit)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %v, want %v naming %s", err, tt.want, tt.msg)
			}
		})
	}
	// Dots, dashes and 128 characters are fine.
	defs, err := conformanceWith(t, func(f, _ *toolfleetv1.ToolOptions) { f.McpName = "a.b-c_" + strings.Repeat("d", 122) })
	if err != nil || contract.MCPName(defs[0]) != "a.b-c_"+strings.Repeat("d", 122) {
		t.Errorf("valid name refused: %v", err)
	}
}

func TestCheckMCPCollisionsAcrossTheCatalog(t *testing.T) {
	t.Parallel()
	def := func(toolkit, name, version, mcp string) *toolfleetv1.ToolDefinition {
		return &toolfleetv1.ToolDefinition{Id: contract.ID(toolkit, name, version), Toolkit: toolkit, Name: name, Version: version,
			ModelName: toolkit + "_" + name, McpName: mcp}
	}
	served := []*toolfleetv1.ToolDefinition{def("Calculator", "Add", "1.0.0", ""), def("Search", "Find", "1.0.0", "search")}
	tests := []struct {
		name string
		def  *toolfleetv1.ToolDefinition
		ok   bool
	}{
		{"a new name", def("Web", "Fetch", "1.0.0", "fetch"), true},
		{"a new version of a served tool keeps its name", def("Search", "Find", "2.0.0", "search"), true},
		{"another tool's explicit name", def("Web", "Fetch", "1.0.0", "Search"), false},
		{"another tool's model name", def("Web", "Fetch", "1.0.0", "calculator_add"), false},
	}
	for _, tt := range tests {
		err := contract.CheckMCPCollisions(served, []*toolfleetv1.ToolDefinition{tt.def})
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, contract.ErrNameCollision)) {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}
