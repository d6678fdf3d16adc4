package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/schema"
)

// Errors of definition building; match them with errors.Is.
var (
	// ErrInvalidName is returned for a toolkit or tool name that cannot be shown to
	// models (see [ModelName]).
	ErrInvalidName = errors.New("contract: invalid tool name")
	// ErrNameCollision is returned when two different tools would be shown to models
	// under the same name, or two methods claim the same tool id.
	ErrNameCollision = errors.New("contract: tool name collision")
	// ErrInvalidContract is returned for options that cannot be used, e.g. an
	// example that is not a JSON object or a version that is not x.y.z.
	ErrInvalidContract = errors.New("contract: invalid contract")
)

var (
	modelNameRe   = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	toolkitNameRe = regexp.MustCompile(`^[a-zA-Z0-9-]+$`) // no "_": it separates toolkit and tool
	toolNameRe    = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	mcpNameRe     = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)
)

// contentMessage is the message whose blocks MCP shows as content.
const contentMessage = "toolfleet.v1.ToolContent"

// IsContentResult reports whether out, a tool's output message, is a content
// result: exactly one field, a singular toolfleet.v1.ToolContent. MCP shows
// that field's blocks as the call's content.
func IsContentResult(out protoreflect.MessageDescriptor) bool {
	if out.Fields().Len() != 1 {
		return false
	}
	f := out.Fields().Get(0)
	return f.Kind() == protoreflect.MessageKind && f.Cardinality() != protoreflect.Repeated && f.Message().FullName() == contentMessage
}

// MCPName returns the name MCP clients see for d: its contract's mcp_name
// (ToolOptions.mcp_name), else its model name.
func MCPName(d *toolfleetv1.ToolDefinition) string {
	if n := d.GetMcpName(); n != "" {
		return n
	}
	return d.GetModelName()
}

// CheckMCPName fails with ErrInvalidName unless name is a valid MCP tool name:
// 1 to 128 characters of [A-Za-z0-9_.-].
func CheckMCPName(name string) error {
	if !mcpNameRe.MatchString(name) {
		return fmt.Errorf("%w: MCP name %q must match %s (1 to 128 characters)", ErrInvalidName, name, mcpNameRe)
	}
	return nil
}

// ModelName returns the name models see for a tool, "Toolkit_Tool". Toolkit names
// may not contain "_", so [SplitModelName] reverses it; the result must match
// ^[a-zA-Z0-9_-]{1,64}$ (OpenAI and Anthropic).
func ModelName(toolkit, tool string) (string, error) {
	if !toolkitNameRe.MatchString(toolkit) {
		return "", fmt.Errorf("%w: toolkit %q must match %s", ErrInvalidName, toolkit, toolkitNameRe)
	}
	if !toolNameRe.MatchString(tool) {
		return "", fmt.Errorf("%w: tool %q must match %s", ErrInvalidName, tool, toolNameRe)
	}
	n := toolkit + "_" + tool
	if !modelNameRe.MatchString(n) {
		return "", fmt.Errorf("%w: %q is longer than 64 characters", ErrInvalidName, n)
	}
	return n, nil
}

// SplitModelName reverses [ModelName].
func SplitModelName(name string) (toolkit, tool string, ok bool) {
	toolkit, tool, ok = strings.Cut(name, "_")
	if !ok || !toolkitNameRe.MatchString(toolkit) || !toolNameRe.MatchString(tool) {
		return "", "", false
	}
	return toolkit, tool, true
}

// ID returns the tool id "Toolkit.Tool@x.y.z".
func ID(toolkit, tool, version string) string { return toolkit + "." + tool + "@" + version }

// GRPCMethod returns the full gRPC method name of md, e.g.
// "/tools.calculator.v1.CalculatorService/Add".
func GRPCMethod(md protoreflect.MethodDescriptor) string {
	return "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
}

// Definitions derives the tool definitions of services: one per unary method
// (streaming methods are not tools). A service without toolfleet options still
// yields tools, named after its methods, with the MCP default hints. It fails on
// invalid names, versions or examples and on model-name collisions among the
// result (see [CheckCollisions]).
func Definitions(services ...protoreflect.ServiceDescriptor) ([]*toolfleetv1.ToolDefinition, error) {
	var defs []*toolfleetv1.ToolDefinition
	for _, sd := range services {
		tk := ToolkitOf(sd)
		if _, err := ParseVersion(tk.Version); err != nil {
			return nil, fmt.Errorf("%w: toolkit %s: %w", ErrInvalidContract, sd.FullName(), err)
		}
		ms := sd.Methods()
		for i := range ms.Len() {
			m := ms.Get(i)
			if m.IsStreamingClient() || m.IsStreamingServer() {
				continue
			}
			d, err := Definition(tk, m)
			if err != nil {
				return nil, err
			}
			defs = append(defs, d)
		}
	}
	if err := CheckCollisions(defs); err != nil {
		return nil, err
	}
	return defs, nil
}

// Definition derives the definition of one method of toolkit tk.
func Definition(tk Toolkit, m protoreflect.MethodDescriptor) (*toolfleetv1.ToolDefinition, error) {
	opts := toolOptions(m)
	name := opts.GetName()
	if name == "" {
		name = string(m.Name())
	}
	modelName, err := ModelName(tk.Name, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", GRPCMethod(m), err)
	}
	if n := opts.GetMcpName(); n != "" {
		if err := CheckMCPName(n); err != nil {
			return nil, fmt.Errorf("%s: %w", GRPCMethod(m), err)
		}
	}
	in, err := schemaStruct(m.Input())
	if err != nil {
		return nil, fmt.Errorf("%s input: %w", GRPCMethod(m), err)
	}
	out, err := schemaStruct(m.Output())
	if err != nil {
		return nil, fmt.Errorf("%s output: %w", GRPCMethod(m), err)
	}
	cred, err := credentialOf(opts.GetCredential())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", GRPCMethod(m), err)
	}
	for _, ex := range opts.GetExamples() {
		var obj map[string]any
		if err := json.Unmarshal([]byte(ex.GetInputJson()), &obj); err != nil {
			return nil, fmt.Errorf("%w: %s: example %q is not a JSON object: %w", ErrInvalidContract, GRPCMethod(m), ex.GetDescription(), err)
		}
	}
	desc := opts.GetDescription()
	if desc == "" {
		desc = comment(m.ParentFile().SourceLocations().ByDescriptor(m))
	}
	if desc == "" {
		desc = fmt.Sprintf("%s of the %s toolkit (gRPC %s).", name, tk.Name, GRPCMethod(m))
	}
	title := opts.GetTitle()
	if title == "" {
		title = name
	}
	var examples []*toolfleetv1.ToolExample
	for _, ex := range opts.GetExamples() {
		examples = append(examples, proto.CloneOf(ex))
	}
	return &toolfleetv1.ToolDefinition{
		Id:           ID(tk.Name, name, tk.Version),
		Toolkit:      tk.Name,
		Name:         name,
		ModelName:    modelName,
		Version:      tk.Version,
		Description:  desc,
		InputSchema:  in,
		OutputSchema: out,
		Hints:        ResolveHints(opts.GetHints()),
		Requirements: &toolfleetv1.ToolRequirements{
			Scopes:              append([]string(nil), opts.GetRequiredScopes()...),
			RequiresApproval:    opts.GetRequiresApproval(),
			Timeout:             proto.CloneOf(opts.GetTimeout()),
			Retry:               proto.CloneOf(opts.GetRetry()),
			MaxResultBytes:      opts.GetMaxResultBytes(),
			ClientInput:         append([]toolfleetv1.ClientCapability(nil), opts.GetClientInput()...),
			ClientInputOptional: append([]toolfleetv1.ClientCapability(nil), opts.GetClientInputOptional()...),
			Credential:          cred,
		},
		Title:              title,
		GrpcMethod:         GRPCMethod(m),
		Examples:           examples,
		McpName:            opts.GetMcpName(),
		ContentResult:      IsContentResult(m.Output()),
		McpTaskRequired:    opts.GetMcpTaskRequired(),
		DeduplicatesCallId: opts.GetDeduplicatesCallId(),
	}, nil
}

// ResolveHints applies the MCP defaults to hints: not read-only, destructive, not
// idempotent, open world. A read-only tool is never destructive unless it says so.
func ResolveHints(h *toolfleetv1.ToolHints) *toolfleetv1.ResolvedHints {
	r := &toolfleetv1.ResolvedHints{
		ReadOnly:    h.GetReadOnly(),
		Destructive: !h.GetReadOnly(),
		Idempotent:  h.GetIdempotent(),
		OpenWorld:   true,
	}
	if h != nil && h.Destructive != nil {
		r.Destructive = h.GetDestructive()
	}
	if h != nil && h.OpenWorld != nil {
		r.OpenWorld = h.GetOpenWorld()
	}
	return r
}

// CheckCollisions fails when two definitions would confuse a caller: the same id
// from two gRPC methods, or model names or MCP names (see [MCPName]) equal up
// to case for different tools.
func CheckCollisions(defs []*toolfleetv1.ToolDefinition) error {
	ids := map[string]string{}
	names := map[string]string{} // lower-cased model name -> Toolkit.Tool
	if err := CheckMCPCollisions(nil, defs); err != nil {
		return err
	}
	for _, d := range defs {
		if prev, ok := ids[d.GetId()]; ok && prev != d.GetGrpcMethod() {
			return fmt.Errorf("%w: %s is served by both %s and %s", ErrNameCollision, d.GetId(), prev, d.GetGrpcMethod())
		}
		ids[d.GetId()] = d.GetGrpcMethod()
		key := strings.ToLower(d.GetModelName())
		tool := d.GetToolkit() + "." + d.GetName()
		if prev, ok := names[key]; ok && prev != tool {
			return fmt.Errorf("%w: %s and %s are both shown to models as %q", ErrNameCollision, prev, tool, d.GetModelName())
		}
		names[key] = tool
	}
	return nil
}

// CheckMCPCollisions fails with ErrNameCollision when a tool of defs would be
// shown to MCP clients under the name (see [MCPName], compared up to case) of
// another tool, of defs or of served (the catalog defs join). Versions of one
// tool share a name without a clash.
func CheckMCPCollisions(served, defs []*toolfleetv1.ToolDefinition) error {
	names := make(map[string]*toolfleetv1.ToolDefinition, len(served)+len(defs))
	for _, d := range served {
		names[strings.ToLower(MCPName(d))] = d
	}
	for _, d := range defs {
		key := strings.ToLower(MCPName(d))
		if prev, ok := names[key]; ok && (prev.GetToolkit() != d.GetToolkit() || prev.GetName() != d.GetName()) {
			return fmt.Errorf("%w: %s and %s are both shown to MCP clients as %q; give one of them another mcp_name",
				ErrNameCollision, prev.GetId(), d.GetId(), MCPName(d))
		}
		names[key] = d
	}
	return nil
}

func schemaStruct(md protoreflect.MessageDescriptor) (*structpb.Struct, error) {
	s, err := schema.For(md)
	if err != nil {
		return nil, err
	}
	st, err := structpb.NewStruct(s)
	if err != nil {
		return nil, fmt.Errorf("contract: schema of %s as Struct: %w", md.FullName(), err)
	}
	return st, nil
}
