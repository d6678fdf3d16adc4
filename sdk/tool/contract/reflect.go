package contract

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	rpbalpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// DefaultFetchTimeout bounds [Fetch] when ctx has no deadline.
const DefaultFetchTimeout = 10 * time.Second

// ErrReflection is wrapped by errors of the reflection exchange with a server.
var ErrReflection = errors.New("contract: server reflection failed")

// Contracts are the services a server exposes, with the files that define them.
type Contracts struct {
	// Files holds the server's files and their dependencies, independent of what is
	// linked into this binary.
	Files *protoregistry.Files
	// Services are the served services other than reflection and health, in the
	// order the server listed them.
	Services []protoreflect.ServiceDescriptor
}

// Definitions derives the tool definitions of every service (see [Definitions]).
func (c *Contracts) Definitions() ([]*toolfleetv1.ToolDefinition, error) {
	return Definitions(c.Services...)
}

// Method finds a method by its full gRPC name, e.g. "/pkg.Service/Method".
func (c *Contracts) Method(grpcMethod string) (protoreflect.MethodDescriptor, bool) {
	svc, method, ok := strings.Cut(strings.TrimPrefix(grpcMethod, "/"), "/")
	if !ok {
		return nil, false
	}
	d, err := c.Files.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, false
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, false
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	return md, md != nil
}

// LinkedContracts returns the contracts of services linked into this binary, by
// full name (e.g. "tools.calculator.v1.CalculatorService").
func LinkedContracts(services ...string) (*Contracts, error) {
	c := &Contracts{Files: protoregistry.GlobalFiles}
	for _, s := range services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(s))
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if err != nil || !ok {
			return nil, fmt.Errorf("%w: service %s is not linked", ErrInvalidContract, s)
		}
		c.Services = append(c.Services, sd)
	}
	return c, nil
}

// infrastructure services are not toolkits.
func infrastructure(name string) bool {
	return strings.HasPrefix(name, "grpc.reflection.") || name == "grpc.health.v1.Health"
}

// Fetch loads the contracts of every service a server exposes through gRPC server
// reflection (v1, falling back to v1alpha). It works with any server that has
// reflection, not only toolfleet workers. Without a deadline on ctx it gives up
// after [DefaultFetchTimeout].
func Fetch(ctx context.Context, cc grpc.ClientConnInterface) (*Contracts, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultFetchTimeout)
		defer cancel()
	}
	c, err := fetch(ctx, newV1Stream(cc))
	if status.Code(err) == codes.Unimplemented { // status.Code sees through the wrapping
		c, err = fetch(ctx, newV1AlphaStream(cc))
	}
	return c, err
}

// reflectionStream hides the v1 / v1alpha difference: both carry the same messages.
type reflectionStream interface {
	open(ctx context.Context) error
	send(req *rpb.ServerReflectionRequest) error
	recv() (*rpb.ServerReflectionResponse, error)
	close()
}

func fetch(ctx context.Context, rs reflectionStream) (*Contracts, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream on every return
	if err := rs.open(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReflection, err)
	}
	defer rs.close()
	ask := func(req *rpb.ServerReflectionRequest) (*rpb.ServerReflectionResponse, error) {
		if err := rs.send(req); err != nil {
			return nil, fmt.Errorf("%w: send: %w", ErrReflection, recvErr(rs, err))
		}
		resp, err := rs.recv()
		if err != nil {
			return nil, fmt.Errorf("%w: receive: %w", ErrReflection, err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			return nil, fmt.Errorf("%w: %s (code %d)", ErrReflection, e.GetErrorMessage(), e.GetErrorCode())
		}
		return resp, nil
	}

	resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		if !infrastructure(s.GetName()) {
			names = append(names, s.GetName())
		}
	}

	files := map[string]*descriptorpb.FileDescriptorProto{}
	add := func(resp *rpb.ServerReflectionResponse) error {
		for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
			fd := &descriptorpb.FileDescriptorProto{}
			if err := proto.Unmarshal(b, fd); err != nil {
				return fmt.Errorf("%w: bad file descriptor: %w", ErrReflection, err)
			}
			files[fd.GetName()] = fd
		}
		return nil
	}
	for _, n := range names {
		resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: n}})
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", n, err)
		}
		if err := add(resp); err != nil {
			return nil, err
		}
	}
	// Servers may leave out dependencies they sent before or never send them: ask.
	for {
		var missing []string
		for _, fd := range files {
			for _, dep := range fd.GetDependency() {
				if _, ok := files[dep]; !ok && !slices.Contains(missing, dep) {
					missing = append(missing, dep)
				}
			}
		}
		if len(missing) == 0 {
			break
		}
		for _, dep := range missing {
			resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileByFilename{FileByFilename: dep}})
			if err != nil {
				return nil, fmt.Errorf("file %s: %w", dep, err)
			}
			if err := add(resp); err != nil {
				return nil, err
			}
			if _, ok := files[dep]; !ok {
				return nil, fmt.Errorf("%w: server did not send %s", ErrReflection, dep)
			}
		}
	}

	set := &descriptorpb.FileDescriptorSet{}
	for _, fd := range files {
		set.File = append(set.File, fd)
	}
	slices.SortFunc(set.File, func(a, b *descriptorpb.FileDescriptorProto) int { return strings.Compare(a.GetName(), b.GetName()) })
	reg, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("%w: build descriptors: %w", ErrReflection, err)
	}
	c := &Contracts{Files: reg}
	for _, n := range names {
		d, err := reg.FindDescriptorByName(protoreflect.FullName(n))
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if err != nil || !ok {
			return nil, fmt.Errorf("%w: service %s not in the files the server sent", ErrReflection, n)
		}
		c.Services = append(c.Services, sd)
	}
	return c, nil
}

// recvErr returns the stream's status when Send failed with io.EOF (the real
// error is only visible on Recv).
func recvErr(rs reflectionStream, err error) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := rs.recv(); rerr != nil {
			return rerr
		}
	}
	return err
}

type v1Stream struct {
	cc grpc.ClientConnInterface
	s  rpb.ServerReflection_ServerReflectionInfoClient
}

func newV1Stream(cc grpc.ClientConnInterface) *v1Stream { return &v1Stream{cc: cc} }

func (v *v1Stream) open(ctx context.Context) (err error) {
	v.s, err = rpb.NewServerReflectionClient(v.cc).ServerReflectionInfo(ctx)
	return err
}
func (v *v1Stream) send(req *rpb.ServerReflectionRequest) error  { return v.s.Send(req) }
func (v *v1Stream) recv() (*rpb.ServerReflectionResponse, error) { return v.s.Recv() }
func (v *v1Stream) close()                                       { _ = v.s.CloseSend() }

// v1AlphaStream converts messages to and from v1alpha, which is wire-identical.
type v1AlphaStream struct {
	cc grpc.ClientConnInterface
	s  rpbalpha.ServerReflection_ServerReflectionInfoClient
}

func newV1AlphaStream(cc grpc.ClientConnInterface) *v1AlphaStream { return &v1AlphaStream{cc: cc} }

func (v *v1AlphaStream) open(ctx context.Context) (err error) {
	v.s, err = rpbalpha.NewServerReflectionClient(v.cc).ServerReflectionInfo(ctx)
	return err
}

func (v *v1AlphaStream) send(req *rpb.ServerReflectionRequest) error {
	var alpha rpbalpha.ServerReflectionRequest
	if err := convert(req, &alpha); err != nil {
		return err
	}
	return v.s.Send(&alpha)
}

func (v *v1AlphaStream) recv() (*rpb.ServerReflectionResponse, error) {
	alpha, err := v.s.Recv()
	if err != nil {
		return nil, err
	}
	var out rpb.ServerReflectionResponse
	if err := convert(alpha, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (v *v1AlphaStream) close() { _ = v.s.CloseSend() }

func convert(from, to proto.Message) error {
	b, err := proto.Marshal(from)
	if err != nil {
		return err
	}
	return proto.Unmarshal(b, to)
}
