package tool_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

// overlay resolves one file built at run time, then the linked ones (its imports).
type overlay struct{ files *protoregistry.Files }

func (o overlay) FindFileByPath(p string) (protoreflect.FileDescriptor, error) {
	if fd, err := o.files.FindFileByPath(p); err == nil {
		return fd, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(p)
}

func (o overlay) FindDescriptorByName(n protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := o.files.FindDescriptorByName(n); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(n)
}

// greeterBuild builds one version of the test toolkit "Greeter": version 1.1.0
// adds the field "language" to the input, as a rolling upgrade would.
func greeterBuild(t *testing.T, version string, withLanguage bool) (overlay, protoreflect.ServiceDescriptor) {
	t.Helper()
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	nameOpts := &descriptorpb.FieldOptions{}
	proto.SetExtension(nameOpts, validate.E_Field, validate.FieldRules_builder{
		String: validate.StringRules_builder{MinLen: proto.Uint64(1)}.Build(),
	}.Build())
	in := &descriptorpb.DescriptorProto{Name: proto.String("GreetRequest"), Field: []*descriptorpb.FieldDescriptorProto{
		{Name: proto.String("name"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("name"), Options: nameOpts},
	}}
	if withLanguage {
		in.Field = append(in.Field, &descriptorpb.FieldDescriptorProto{
			Name: proto.String("language"), Number: proto.Int32(2), Type: str, Label: opt, JsonName: proto.String("language"),
		})
	}
	out := &descriptorpb.DescriptorProto{Name: proto.String("GreetResponse"), Field: []*descriptorpb.FieldDescriptorProto{
		{Name: proto.String("message"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("message")},
	}}
	svcOpts := &descriptorpb.ServiceOptions{}
	proto.SetExtension(svcOpts, toolfleetv1.E_Toolkit, &toolfleetv1.ToolkitOptions{Name: "Greeter", Version: version})
	mOpts := &descriptorpb.MethodOptions{}
	proto.SetExtension(mOpts, toolfleetv1.E_Tool, &toolfleetv1.ToolOptions{Description: "Greet someone."})
	fdp := &descriptorpb.FileDescriptorProto{
		Name:        proto.String("tools/greeter/v1/greeter.proto"),
		Package:     proto.String("tools.greeter.v1"),
		Syntax:      proto.String("proto3"),
		Dependency:  []string{"buf/validate/validate.proto", "toolfleet/v1/options.proto"},
		MessageType: []*descriptorpb.DescriptorProto{in, out},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:    proto.String("GreeterService"),
			Options: svcOpts,
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name: proto.String("Greet"), InputType: proto.String(".tools.greeter.v1.GreetRequest"),
				OutputType: proto.String(".tools.greeter.v1.GreetResponse"), Options: mOpts,
			}},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatalf("build %s: %v", version, err)
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(fd); err != nil {
		t.Fatal(err)
	}
	return overlay{files}, fd.Services().Get(0)
}

// greeterDesc serves Greet with dynamic messages; the reply names the version.
func greeterDesc(sd protoreflect.ServiceDescriptor, version string) *grpc.ServiceDesc {
	md := sd.Methods().Get(0)
	full := contract.GRPCMethod(md)
	return &grpc.ServiceDesc{
		ServiceName: string(sd.FullName()),
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: string(md.Name()),
			Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := dynamicpb.NewMessage(md.Input())
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(_ context.Context, req any) (any, error) {
					r := req.(*dynamicpb.Message)
					msg := "Hello, " + r.Get(md.Input().Fields().ByName("name")).String()
					if f := md.Input().Fields().ByName("language"); f != nil && r.Has(f) {
						msg += " (" + r.Get(f).String() + ")"
					}
					out := dynamicpb.NewMessage(md.Output())
					out.Set(md.Output().Fields().ByName("message"), protoreflect.ValueOfString(msg+" from "+version))
					return out, nil
				}
				if icpt == nil {
					return h(ctx, in)
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
			},
		}},
		Metadata: sd.ParentFile().Path(),
	}
}

type served struct {
	conn      *grpc.ClientConn
	contracts *contract.Contracts
}

// TestVersionRouting serves Greeter 1.0.0 and 1.1.0 at once, loads both by
// reflection, derives their definitions side by side and routes calls by version.
func TestVersionRouting(t *testing.T) {
	t.Parallel()
	byVersion := map[string]served{}
	var defs []*toolfleetv1.ToolDefinition
	for _, b := range []struct {
		version  string
		language bool
	}{{"1.0.0", false}, {"1.1.0", true}} {
		res, sd := greeterBuild(t, b.version, b.language)
		w, _ := tooltest.Start(t, tool.Config{Descriptors: res}, func(w *tool.Worker) {
			w.RegisterService(greeterDesc(sd, b.version), struct{}{})
		})
		if tks := w.Toolkits(); len(tks) != 1 || tks[0].Version != b.version {
			t.Fatalf("toolkits = %v", tks)
		}
		conn := tooltest.Dial(t, w.Addr())
		c, err := contract.Fetch(callCtx(t), conn)
		if err != nil {
			t.Fatalf("Fetch %s: %v", b.version, err)
		}
		d, err := c.Definitions()
		if err != nil {
			t.Fatal(err)
		}
		defs = append(defs, d...)
		byVersion[b.version] = served{conn, c}
	}
	if err := contract.CheckCollisions(defs); err != nil {
		t.Fatalf("two versions side by side: %v", err)
	}
	props := func(d *toolfleetv1.ToolDefinition) []string {
		var out []string
		for k := range d.GetInputSchema().GetFields()["properties"].GetStructValue().GetFields() {
			out = append(out, k)
		}
		return out
	}
	ids := map[string][]string{}
	for _, d := range defs {
		if d.GetModelName() != "Greeter_Greet" {
			t.Fatalf("model name %q", d.GetModelName())
		}
		ids[d.GetId()] = props(d)
	}
	if len(ids["Greeter.Greet@1.0.0"]) != 1 || len(ids["Greeter.Greet@1.1.0"]) != 2 {
		t.Fatalf("input properties by id = %v", ids)
	}

	tests := []struct {
		ref, input, want string
		wantErr          error
		wantParams       map[string]string
	}{
		{ref: "Greeter.Greet", input: `{"name": "Ada", "language": "fr"}`, want: "Hello, Ada (fr) from 1.1.0"},
		{ref: "Greeter_Greet", input: `{"name": "Ada"}`, want: "Hello, Ada from 1.1.0"},
		{ref: "Greeter.Greet@1", input: `{"name": "Ada"}`, want: "Hello, Ada from 1.0.0"},
		{ref: "Greeter.Greet@1.1.0", input: `{"name": "Ada"}`, want: "Hello, Ada from 1.1.0"},
		{ref: "Greeter.Greet@1.0.0", input: `{"name": "Ada", "language": "fr"}`,
			wantParams: map[string]string{"language": "is not a known field; known fields: name"}},
		{ref: "Greeter.Greet@1.0.0", input: `{"name": ""}`, wantParams: map[string]string{"name": "must be at least 1 character"}},
		{ref: "Greeter.Greet@1.2.0", wantErr: contract.ErrVersionNotFound},
		{ref: "Greeter.Wave", wantErr: contract.ErrToolNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.ref+" "+tt.input, func(t *testing.T) {
			t.Parallel()
			ref, err := contract.ParseToolRef(tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			d, err := contract.Resolve(ref, defs)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Resolve = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			s := byVersion[d.GetVersion()]
			md, ok := s.contracts.Method(d.GetGrpcMethod())
			if !ok {
				t.Fatalf("no method %s", d.GetGrpcMethod())
			}
			in, ve, err := tool.DecodeInput(md.Input(), []byte(tt.input))
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantParams != nil {
				if ve == nil || !maps.Equal(ve.GetParameterErrors(), tt.wantParams) {
					t.Fatalf("parameter_errors = %v, want %v", ve.GetParameterErrors(), tt.wantParams)
				}
				return
			}
			if ve != nil {
				t.Fatalf("rejected: %v", ve)
			}
			out := dynamicpb.NewMessage(md.Output())
			if err := s.conn.Invoke(callCtx(t), d.GetGrpcMethod(), in, out); err != nil {
				t.Fatalf("invoke: %v", err)
			}
			if got := out.Get(md.Output().Fields().ByName("message")).String(); got != tt.want {
				t.Fatalf("reply %q, want %q", got, tt.want)
			}
		})
	}

	// The worker validates dynamic requests too, before the handler.
	s := byVersion["1.0.0"]
	md, _ := s.contracts.Method("/tools.greeter.v1.GreeterService/Greet")
	err := s.conn.Invoke(callCtx(t), "/tools.greeter.v1.GreeterService/Greet", dynamicpb.NewMessage(md.Input()), dynamicpb.NewMessage(md.Output()))
	if ve, ok := tool.AsValidationError(err); status.Code(err) != codes.InvalidArgument || !ok || ve.GetParameterErrors()["name"] == "" {
		t.Fatalf("empty name on the worker = %v", err)
	}
}
