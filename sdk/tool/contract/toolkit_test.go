package contract_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

func TestToolkitOfDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pkg, service string
		opts         *toolfleetv1.ToolkitOptions
		want         contract.Toolkit
	}{
		{"acme.billing.v2", "InvoiceService", nil, contract.Toolkit{Name: "Invoice", Version: "2.0.0", Service: "acme.billing.v2.InvoiceService"}},
		{"acme.v10beta1", "Search", nil, contract.Toolkit{Name: "Search", Version: "10.0.0", Service: "acme.v10beta1.Search"}},
		{"acme", "Service", nil, contract.Toolkit{Name: "Service", Version: "0.0.0", Service: "acme.Service"}},
		{"acme.v1", "MapsService", &toolfleetv1.ToolkitOptions{Name: "Geo", Version: "1.4.2", Description: "Maps."},
			contract.Toolkit{Name: "Geo", Version: "1.4.2", Description: "Maps.", Service: "acme.v1.MapsService"}},
		{"acme.v3", "MapsService", &toolfleetv1.ToolkitOptions{Description: "Only a description."},
			contract.Toolkit{Name: "Maps", Version: "3.0.0", Description: "Only a description.", Service: "acme.v3.MapsService"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg+"."+tt.service, func(t *testing.T) {
			t.Parallel()
			svc := &descriptorpb.ServiceDescriptorProto{Name: proto.String(tt.service)}
			deps := []string(nil)
			if tt.opts != nil {
				svc.Options = &descriptorpb.ServiceOptions{}
				proto.SetExtension(svc.Options, toolfleetv1.E_Toolkit, tt.opts)
				deps = []string{"toolfleet/v1/options.proto"}
			}
			fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
				Name: proto.String("t.proto"), Package: proto.String(tt.pkg), Syntax: proto.String("proto3"),
				Dependency: deps, Service: []*descriptorpb.ServiceDescriptorProto{svc},
			}, protoregistry.GlobalFiles)
			if err != nil {
				t.Fatal(err)
			}
			if got := contract.ToolkitOf(fd.Services().Get(0)); got != tt.want {
				t.Fatalf("ToolkitOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestToolkitOfUnknownExtension reads options that were parsed without the
// toolfleet extension types, as raw unknown fields.
func TestToolkitOfUnknownExtension(t *testing.T) {
	t.Parallel()
	opts := &descriptorpb.ServiceOptions{}
	proto.SetExtension(opts, toolfleetv1.E_Toolkit, &toolfleetv1.ToolkitOptions{Name: "Raw", Version: "4.5.6"})
	b, err := proto.Marshal(opts)
	if err != nil {
		t.Fatal(err)
	}
	raw := &descriptorpb.ServiceOptions{}
	if err := (proto.UnmarshalOptions{Resolver: new(protoregistry.Types)}).Unmarshal(b, raw); err != nil {
		t.Fatal(err)
	}
	if proto.HasExtension(raw, toolfleetv1.E_Toolkit) || len(raw.ProtoReflect().GetUnknown()) == 0 {
		t.Fatal("setup: the extension should be unknown bytes")
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("raw.proto"), Package: proto.String("raw.v1"), Syntax: proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("RawService"), Options: raw}},
	}, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	if got := contract.ToolkitOf(fd.Services().Get(0)); got.Name != "Raw" || got.Version != "4.5.6" {
		t.Fatalf("ToolkitOf = %+v", got)
	}
}
