package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/gatewaytest"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
	"github.com/toolfleet/toolfleet/services/gateway/results"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

const testSecret = "test-secret-test-secret-test-secret"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// countingCalculator is the bundled calculator with a side-effect counter on Add;
// an Add with a = slowA takes slowFor, so a repeat can arrive while it runs.
type countingCalculator struct {
	*calculator.Service
	adds atomic.Int64
	// principal is the last Add's tool.Principal, as "subject via".
	principal atomic.Value
}

const (
	slowA   = 424242
	slowFor = 700 * time.Millisecond
)

func (c *countingCalculator) Add(ctx context.Context, req *calculatorv1.AddRequest) (*calculatorv1.AddResponse, error) {
	c.adds.Add(1)
	sub, via := tool.Principal(ctx)
	c.principal.Store(sub + " " + via)
	if req.GetA() == slowA {
		select {
		case <-time.After(slowFor):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.Service.Add(ctx, req)
}

// schemaTest serves the SchemaTest toolkit: Types echoes (over its 4096-byte
// result limit for long strings), Sleep sleeps, Panic panics.
type schemaTest struct {
	schematestv1.UnimplementedSchemaTestServiceServer
	types atomic.Int64
}

func (s *schemaTest) Types(_ context.Context, req *schematestv1.TypesRequest) (*schematestv1.TypesResponse, error) {
	s.types.Add(1)
	if req.GetS() == "fail" {
		return nil, tool.NewError("cannot do that", tool.WithDeveloperMessage("dev detail"))
	}
	if req.GetS() == "retry" {
		return nil, tool.NewError("busy", tool.WithRetry(time.Second))
	}
	return &schematestv1.TypesResponse{Echo: req}, nil
}

func (*schemaTest) Sleep(ctx context.Context, req *schematestv1.SleepRequest) (*schematestv1.SleepResponse, error) {
	select {
	case <-time.After(req.GetDuration().AsDuration()):
		return &schematestv1.SleepResponse{Slept: true}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (*schemaTest) Panic(ctx context.Context, req *schematestv1.PanicRequest) (*schematestv1.PanicResponse, error) {
	if req.GetPanic() {
		panic("boom")
	}
	return &schematestv1.PanicResponse{CallId: tool.CallID(ctx)}, nil
}

// startWorker runs a toolfleet worker on loopback (announcing on natsURL when set)
// until the test ends, or until the returned stop is called.
func startWorker(t *testing.T, natsURL string, register func(w *tool.Worker)) (*tool.Worker, func()) {
	t.Helper()
	w, stop := tooltest.Start(t, tool.Config{Name: "test", NATSURL: natsURL,
		AnnounceInterval: 100 * time.Millisecond, ShutdownTimeout: 2 * time.Second}, register)
	return w, func() {
		if err := stop(); err != nil {
			t.Errorf("worker Run: %v", err)
		}
	}
}

func calculatorWorker(t *testing.T, natsURL string) (*countingCalculator, string, func()) {
	t.Helper()
	c := &countingCalculator{Service: calculator.New()}
	w, stop := startWorker(t, natsURL, func(w *tool.Worker) { calculatorv1.RegisterCalculatorServiceServer(w, c) })
	return c, w.Addr(), stop
}

func schemaTestWorker(t *testing.T, natsURL string) string {
	t.Helper()
	addr, _ := countingSchemaTestWorker(t, natsURL)
	return addr
}

func countingSchemaTestWorker(t *testing.T, natsURL string) (string, *schemaTest) {
	t.Helper()
	st := &schemaTest{}
	w, _ := startWorker(t, natsURL, func(w *tool.Worker) { schematestv1.RegisterSchemaTestServiceServer(w, st) })
	return w.Addr(), st
}

// plainCalculator serves Calculator at another version as a plain grpc-go server
// with reflection (any such server can join the fleet). Add answers a+b and
// counts; kill stops it abruptly, like a crashed process.
type plainCalculator struct {
	addr string
	adds atomic.Int64
	kill func()
	// onAdd, when set, runs inside every Add with its a; an error fails the call.
	onAdd atomic.Pointer[func(a float64) error]
	// onAddCtx, when set, runs inside every Add with the call's context.
	onAddCtx atomic.Pointer[func(ctx context.Context, a float64) error]
	// draining makes Add refuse as a draining worker does: UNAVAILABLE with
	// tool.DrainingTrailer, without counting the call.
	draining atomic.Bool
}

func startPlainCalculator(t *testing.T, major int, opts ...func(*toolfleetv1.ToolOptions)) *plainCalculator {
	t.Helper()
	return startPlainCalculatorAt(t, "127.0.0.1:0", major, opts...)
}

func startPlainCalculatorAt(t *testing.T, listen string, major int, opts ...func(*toolfleetv1.ToolOptions)) *plainCalculator {
	t.Helper()
	files, sd := calculatorVersion(t, major, opts...)
	return startPlainCalculatorFrom(t, listen, files, sd)
}

// startPlainCalculatorFrom serves sd's Add (and only Add) from files.
func startPlainCalculatorFrom(t *testing.T, listen string, files *protoregistry.Files, sd protoreflect.ServiceDescriptor) *plainCalculator {
	t.Helper()
	md := sd.Methods().ByName("Add")
	pc := &plainCalculator{}
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: string(sd.FullName()),
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Add", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := dynamicpb.NewMessage(md.Input())
			if err := dec(in); err != nil {
				return nil, err
			}
			if pc.draining.Load() {
				_ = grpc.SetTrailer(ctx, metadata.Pairs(tool.DrainingTrailer, "1"))
				return nil, status.Error(codes.Unavailable, "draining")
			}
			pc.adds.Add(1)
			f := md.Input().Fields()
			if hook := pc.onAddCtx.Load(); hook != nil {
				if err := (*hook)(ctx, in.Get(f.ByName("a")).Float()); err != nil {
					return nil, err
				}
			}
			if hook := pc.onAdd.Load(); hook != nil {
				if err := (*hook)(in.Get(f.ByName("a")).Float()); err != nil {
					return nil, err
				}
			}
			sum := in.Get(f.ByName("a")).Float() + in.Get(f.ByName("b")).Float()
			out := dynamicpb.NewMessage(md.Output())
			out.Set(md.Output().Fields().ByName("result"), protoreflect.ValueOfFloat64(sum))
			return out, nil
		}}},
	}, struct{}{})
	rpb.RegisterServerReflectionServer(srv, reflection.NewServerV1(reflection.ServerOptions{Services: srv, DescriptorResolver: files}))
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	pc.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	var killed atomic.Bool
	pc.kill = func() {
		if killed.CompareAndSwap(false, true) {
			srv.Stop()
			<-done
		}
	}
	t.Cleanup(pc.kill)
	return pc
}

// withMaxResultBytes sets every tool's result limit.
func withMaxResultBytes(n int64) func(*toolfleetv1.ToolOptions) {
	return func(o *toolfleetv1.ToolOptions) { o.MaxResultBytes = n }
}

// withSideEffects marks every tool as neither read-only nor idempotent.
func withSideEffects() func(*toolfleetv1.ToolOptions) {
	return func(o *toolfleetv1.ToolOptions) {
		o.Hints = &toolfleetv1.ToolHints{ReadOnly: proto.Bool(false), Idempotent: proto.Bool(false)}
	}
}

// calculatorVersion rewrites the calculator contract as tools.calculator.v<major>
// with toolkit version <major>.0.0.
func calculatorVersion(t *testing.T, major int, toolOpts ...func(*toolfleetv1.ToolOptions)) (*protoregistry.Files, protoreflect.ServiceDescriptor) {
	t.Helper()
	fdp := protodesc.ToFileDescriptorProto(calculatorv1.File_tools_calculator_v1_calculator_proto)
	v := string(rune('0' + major))
	fdp.Name = proto.String("tools/calculator/v" + v + "/calculator.proto")
	fdp.Package = proto.String("tools.calculator.v" + v)
	svc := fdp.GetService()[0]
	opts := proto.Clone(svc.GetOptions()).(*descriptorpb.ServiceOptions)
	tk := proto.GetExtension(opts, toolfleetv1.E_Toolkit).(*toolfleetv1.ToolkitOptions)
	tk = proto.Clone(tk).(*toolfleetv1.ToolkitOptions)
	tk.Version = v + ".0.0"
	proto.SetExtension(opts, toolfleetv1.E_Toolkit, tk)
	svc.Options = opts
	for _, m := range svc.GetMethod() {
		mo := proto.Clone(m.GetOptions()).(*descriptorpb.MethodOptions)
		to := proto.Clone(proto.GetExtension(mo, toolfleetv1.E_Tool).(*toolfleetv1.ToolOptions)).(*toolfleetv1.ToolOptions)
		for _, o := range toolOpts {
			o(to)
		}
		proto.SetExtension(mo, toolfleetv1.E_Tool, to)
		m.Options = mo
	}
	fixTypes(fdp, ".tools.calculator.v1.", ".tools.calculator.v"+v+".")
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatalf("build v%d contract: %v", major, err)
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

func fixTypes(fdp *descriptorpb.FileDescriptorProto, from, to string) {
	for _, s := range fdp.GetService() {
		for _, m := range s.GetMethod() {
			m.InputType = proto.String(strings.Replace(m.GetInputType(), from, to, 1))
			m.OutputType = proto.String(strings.Replace(m.GetOutputType(), from, to, 1))
		}
	}
}

// startGateway runs a gateway on loopback until the test ends.
func startGateway(t *testing.T, cfg gateway.Config) *gateway.Gateway {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if !cfg.Auth.Disabled && cfg.Auth.JWKSFile == "" && cfg.Auth.JWKSURL == "" && cfg.Auth.HS256Secret == nil {
		cfg.Auth.HS256Secret = []byte(testSecret)
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	if cfg.WarmUp == 0 {
		// The tests' workers announce on a local NATS: a short warm-up keeps
		// them fast (waitTool waits for it; see TestColdStartNeverNotFound).
		cfg.WarmUp = 50 * time.Millisecond
	}
	g, err := gateway.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	gatewaytest.Run(t, g)
	return g
}

// waitFor polls cond until it holds, failing the test after 20s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitTool waits until the gateway serves toolID (resolution rules apply) and
// its registry is warm (an unknown tool is NOT_FOUND from then on).
func waitTool(t *testing.T, g *gateway.Gateway, toolID string) {
	t.Helper()
	waitFor(t, toolID, func() bool {
		_, err := g.GetTool(&toolfleetv1.GetToolRequest{ToolId: toolID})
		return err == nil && gateway.WarmForTest(g)
	})
}

// token mints an HS256 token with the given scopes, valid for ten minutes: a
// table test mints its tokens once, and its parallel rows may wait minutes for a
// slot on a 2-core machine (-parallel 2) behind the package's other tests.
func token(t *testing.T, scopes ...string) string {
	t.Helper()
	return signHS(t, jwt.MapClaims{"sub": "tester", "scope": strings.Join(scopes, " "), "exp": time.Now().Add(10 * time.Minute).Unix()})
}

// signHS signs claims with the test secret; a token names the subject "tester"
// unless the claims set a sub (an empty one included).
func signHS(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	if _, ok := claims["sub"]; !ok {
		claims["sub"] = "tester"
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func grpcClient(t *testing.T, addr string) toolfleetv1.ToolGatewayServiceClient {
	t.Helper()
	return toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(t, addr))
}

// h2c is an HTTP client speaking HTTP/2 without TLS (needed for gRPC-Web streaming
// and to check the gRPC routing).
func h2c() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

func connectClient(addr string, opts ...connect.ClientOption) toolfleetv1connect.ToolGatewayServiceClient {
	return toolfleetv1connect.NewToolGatewayServiceClient(http.DefaultClient, "http://"+addr, append([]connect.ClientOption{connect.WithProtoJSON()}, opts...)...)
}

// memResults and memIdempotency keep a test gateway's stores in memory.
var (
	memResults     = results.Config{BucketConfig: jsassets.BucketConfig{MemoryStorage: true}}
	memIdempotency = idempotency.Config{BucketConfig: jsassets.BucketConfig{MemoryStorage: true}}
)
