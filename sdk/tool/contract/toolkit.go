package contract

import (
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Toolkit identifies one served version of a toolkit.
type Toolkit struct {
	// Name as tools are addressed, e.g. "Calculator".
	Name string
	// Version is the full semantic version, e.g. "1.0.0".
	Version string
	// Description of the toolkit.
	Description string
	// Service is the fully qualified proto service, e.g. "tools.calculator.v1.CalculatorService".
	Service string
}

var majorSuffix = regexp.MustCompile(`\.v(\d+)(?:(?:alpha|beta)\d*)?$`)

// ToolkitOf reads a service's toolkit identity, applying the defaults of
// toolfleet.v1.ToolkitOptions: the name is the service name without a "Service"
// suffix, the version "<major of the package>.0.0" (or "0.0.0").
func ToolkitOf(sd protoreflect.ServiceDescriptor) Toolkit {
	opts := toolkitOptions(sd)
	tk := Toolkit{
		Name:        opts.GetName(),
		Version:     opts.GetVersion(),
		Description: opts.GetDescription(),
		Service:     string(sd.FullName()),
	}
	if tk.Name == "" {
		tk.Name = strings.TrimSuffix(string(sd.Name()), "Service")
		if tk.Name == "" {
			tk.Name = string(sd.Name())
		}
	}
	if tk.Version == "" {
		tk.Version = "0.0.0"
		if m := majorSuffix.FindStringSubmatch(string(sd.ParentFile().Package())); m != nil {
			tk.Version = strings.TrimLeft(m[1], "0")
			if tk.Version == "" {
				tk.Version = "0"
			}
			tk.Version += ".0.0"
		}
	}
	if tk.Description == "" {
		tk.Description = comment(sd.ParentFile().SourceLocations().ByDescriptor(sd))
	}
	return tk
}

func toolkitOptions(sd protoreflect.ServiceDescriptor) *toolfleetv1.ToolkitOptions {
	var out toolfleetv1.ToolkitOptions
	extension(sd.Options(), toolfleetv1.E_Toolkit, &out)
	return &out
}

// ToolOptionsOf returns the toolfleet.v1.tool options of a method (empty when unset).
func ToolOptionsOf(md protoreflect.MethodDescriptor) *toolfleetv1.ToolOptions { return toolOptions(md) }

func toolOptions(md protoreflect.MethodDescriptor) *toolfleetv1.ToolOptions {
	var out toolfleetv1.ToolOptions
	extension(md.Options(), toolfleetv1.E_Tool, &out)
	return &out
}

// FieldOptions returns the toolfleet.v1.field options of a field (empty when unset).
func FieldOptions(fd protoreflect.FieldDescriptor) *toolfleetv1.FieldOptions {
	var out toolfleetv1.FieldOptions
	extension(fd.Options(), toolfleetv1.E_Field, &out)
	return &out
}

// extension copies the extension xt of opts into out. It works for linked options,
// options whose extension was parsed as a dynamic message, and options where the
// extension is still unknown bytes (descriptors built at run time, e.g. from
// reflection, before the extension type was known).
func extension(opts proto.Message, xt protoreflect.ExtensionType, out proto.Message) {
	if opts == nil || !opts.ProtoReflect().IsValid() {
		return
	}
	if proto.HasExtension(opts, xt) {
		if v, ok := proto.GetExtension(opts, xt).(proto.Message); ok {
			if v.ProtoReflect().Descriptor().FullName() == out.ProtoReflect().Descriptor().FullName() {
				if b, err := proto.Marshal(v); err == nil {
					_ = proto.Unmarshal(b, out)
				}
			}
		}
		return
	}
	// Re-read the raw options with the linked extension types.
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(opts)
	if err != nil || len(b) == 0 {
		return
	}
	var fresh proto.Message
	switch opts.(type) {
	case *descriptorpb.ServiceOptions:
		fresh = &descriptorpb.ServiceOptions{}
	case *descriptorpb.MethodOptions:
		fresh = &descriptorpb.MethodOptions{}
	case *descriptorpb.FieldOptions:
		fresh = &descriptorpb.FieldOptions{}
	case *descriptorpb.MessageOptions:
		fresh = &descriptorpb.MessageOptions{}
	default:
		fresh = opts.ProtoReflect().Type().New().Interface()
	}
	if err := proto.Unmarshal(b, fresh); err != nil || !proto.HasExtension(fresh, xt) {
		return
	}
	if v, ok := proto.GetExtension(fresh, xt).(proto.Message); ok {
		if b, err := proto.Marshal(v); err == nil {
			_ = proto.Unmarshal(b, out)
		}
	}
}

// comment returns the leading comment of a declaration, trimmed, or "".
func comment(loc protoreflect.SourceLocation) string {
	return strings.TrimSpace(loc.LeadingComments)
}
