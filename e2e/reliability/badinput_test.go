package reliability

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// full reports whether the suite runs its full form (make reliability).
func full() bool { return os.Getenv("TOOLFLEET_RELIABILITY") == "full" }

// badRequest is one malformed request and where it goes.
type badRequest struct {
	surface string // grpc, connect, oxp, mcp
	kind    string // what is wrong with it
	send    func(ctx context.Context) outcome
}

// outcome is how the gateway answered.
type outcome struct {
	serverFault bool   // 5xx, Internal or Unknown: the gateway broke, not the caller
	message     string // what the answer says is wrong
	err         error  // the request could not be made at all
}

// TestBadInput sends generated malformed requests (1,000; 10,000 in the full
// form) across gRPC, Connect, OXP HTTP and MCP — bad and truncated JSON and
// protobuf, wrong types, 64 MiB bodies, 10,000-deep nesting, invalid UTF-8,
// unknown tools and versions, bad tokens, oversized batches — and checks
// that none is a server fault, every answer names the problem, no tool ran,
// and the process's heap returns to its baseline.
func TestBadInput(t *testing.T) {
	t.Parallel()
	n := 1000
	if full() {
		n = 10_000
	}
	fleet := e2e.Start(t, e2e.Options{NATS: true, Auth: true})
	token := fleet.Token(t, "tools:call", "tools:read")
	conn, err := grpc.NewClient(fleet.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gen := &generator{addr: fleet.Addr, token: token, conn: conn, rnd: rand.New(rand.NewPCG(14, 2026))}

	// Warm up (connections, caches), then take the heap baseline.
	for range 50 {
		gen.next().send(t.Context())
	}
	baseline := heapAfterGC()
	adds0 := fleet.Calculator.Adds.Load()

	counts := map[string]int{}
	began := time.Now()
	for i := range n {
		req := gen.next()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		got := req.send(ctx)
		cancel()
		counts[req.surface+"/"+req.kind]++
		switch {
		case got.err != nil:
			t.Fatalf("request %d (%s, %s) could not be made: %v", i, req.surface, req.kind, got.err)
		case got.serverFault:
			t.Fatalf("request %d (%s, %s): a server fault: %s", i, req.surface, req.kind, got.message)
		case strings.TrimSpace(got.message) == "":
			t.Fatalf("request %d (%s, %s): the answer does not say what is wrong", i, req.surface, req.kind)
		}
	}
	took := time.Since(began)
	if adds := fleet.Calculator.Adds.Load() - adds0; adds != 0 {
		t.Errorf("malformed requests ran Calculator.Add %d times", adds)
	}
	after := heapAfterGC()
	// The 64 MiB bodies are refused before they are read; a leak of request
	// buffers would show as tens of MiB here.
	if grown := int64(after) - int64(baseline); grown > 32<<20 {
		t.Errorf("heap grew by %d MiB over the run (baseline %d MiB, after %d MiB)", grown>>20, baseline>>20, after>>20)
	}
	t.Logf("%d malformed requests in %s: 0 server faults, 0 tool runs; heap %d KiB before, %d KiB after; by kind: %v",
		n, took.Round(time.Millisecond), baseline>>10, after>>10, counts)
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// generator makes malformed requests from a seeded source, so a failure is
// reproducible.
type generator struct {
	addr, token string
	conn        *grpc.ClientConn
	rnd         *rand.Rand
	n           int
	deep        []byte
}

// next picks a surface and a kind of damage; one request in a hundred is
// a 64 MiB body (they cost the client most of the time).
func (g *generator) next() badRequest {
	if g.n++; g.n%100 == 0 {
		return g.huge()
	}
	kinds := []func() badRequest{
		g.grpcRaw, g.grpcSemantic, g.grpcSemantic,
		g.connectJSON, g.connectJSON, g.oxpJSON, g.oxpJSON, g.mcpJSON, g.mcpJSON,
	}
	return kinds[g.rnd.IntN(len(kinds))]()
}

// jsonDamage returns a damaged JSON body around a CallToolRequest-like object,
// with the name of the damage.
func (g *generator) jsonDamage(wrap func(string) string) (string, []byte) {
	valid := wrap(`{"toolId": "Calculator.Add", "input": {"a": 1, "b": 2}}`)
	switch g.rnd.IntN(9) {
	case 0:
		return "truncated", []byte(valid[:g.rnd.IntN(len(valid)-1)])
	case 1:
		return "wrong types", []byte(wrap(`{"toolId": 5, "input": "a"}`))
	case 2:
		return "wrong input types", []byte(wrap(`{"toolId": "Calculator.Add", "input": {"a": "one", "b": [2]}}`))
	case 3:
		b := []byte(wrap(`{"toolId": "Calculator.Add", "input": {"a": 1, "b": 2, "note": "XX"}}`))
		i := bytes.Index(b, []byte("XX"))
		b[i], b[i+1] = 0xff, 0xfe // invalid UTF-8 inside a string
		return "invalid UTF-8", b
	case 4:
		depth := 10_000
		return "10,000-deep nesting", []byte(wrap(`{"toolId": "Calculator.Add", "input": {"a": ` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}`))
	case 5:
		return "unknown tool", []byte(wrap(fmt.Sprintf(`{"toolId": "Nope%d.Tool", "input": {}}`, g.rnd.IntN(1000))))
	case 6:
		return "bad version", []byte(wrap(`{"toolId": "Calculator.Add@` + []string{"x.y", "1.2.3.4", "99", "-1", "1.0.0-"}[g.rnd.IntN(5)] + `", "input": {}}`))
	case 7:
		b := make([]byte, 1+g.rnd.IntN(200))
		for i := range b {
			b[i] = byte(g.rnd.IntN(256))
		}
		return "random bytes", b
	default:
		return "not an object", []byte(wrap(`["Calculator.Add", 1, 2]`))
	}
}

func (g *generator) post(ctx context.Context, path, contentType string, body io.Reader, size int64, header http.Header) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.addr+path, body)
	if err != nil {
		return outcome{err: err}
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+g.token)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return outcome{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := string(b)
	if resp.StatusCode < 300 && !strings.Contains(strings.ToLower(msg), "error") {
		msg = "" // a success is not an answer to a malformed request
	}
	return outcome{serverFault: resp.StatusCode >= 500, message: msg}
}

func (g *generator) connectJSON() badRequest {
	kind, body := g.jsonDamage(func(s string) string { return s })
	if g.rnd.IntN(10) == 0 {
		kind = "bad token"
		return badRequest{"connect", kind, func(ctx context.Context) outcome {
			return g.post(ctx, "/toolfleet.v1.ToolGatewayService/CallTool", "application/json", bytes.NewReader(body), int64(len(body)),
				http.Header{"Authorization": {"Bearer not-a-token." + fmt.Sprint(g.rnd.Int())}})
		}}
	}
	return badRequest{"connect", kind, func(ctx context.Context) outcome {
		return g.post(ctx, "/toolfleet.v1.ToolGatewayService/CallTool", "application/json", bytes.NewReader(body), int64(len(body)), nil)
	}}
}

func (g *generator) oxpJSON() badRequest {
	kind, body := g.jsonDamage(func(s string) string {
		return `{"request": ` + strings.Replace(strings.Replace(s, `"toolId"`, `"tool_id"`, 1), `"input"`, `"input"`, 1) + `}`
	})
	return badRequest{"oxp", kind, func(ctx context.Context) outcome {
		return g.post(ctx, "/tools/call", "application/json", bytes.NewReader(body), int64(len(body)), nil)
	}}
}

func (g *generator) mcpJSON() badRequest {
	kind, body := g.jsonDamage(func(s string) string {
		s = strings.Replace(s, `"toolId": "Calculator.Add"`, `"name": "Calculator_Add"`, 1)
		s = strings.Replace(s, `"input"`, `"arguments"`, 1)
		return `{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ` + s + `}`
	})
	return badRequest{"mcp", kind, func(ctx context.Context) outcome {
		return g.post(ctx, "/mcp", "application/json", bytes.NewReader(body), int64(len(body)),
			http.Header{"Accept": {"application/json, text/event-stream"}})
	}}
}

// huge is a 64 MiB body on an HTTP surface, streamed: it must be refused
// by its declared length or while read, not buffered.
func (g *generator) huge() badRequest {
	path := []string{"/toolfleet.v1.ToolGatewayService/CallTool", "/tools/call", "/mcp"}[g.rnd.IntN(3)]
	surface := map[string]string{"/tools/call": "oxp", "/mcp": "mcp"}[path]
	if surface == "" {
		surface = "connect"
	}
	return badRequest{surface, "64 MiB body", func(ctx context.Context) outcome {
		const size = 64 << 20
		body := io.LimitReader(repeat('['), size)
		return g.post(ctx, path, "application/json", body, size, http.Header{"Accept": {"application/json, text/event-stream"}})
	}}
}

type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// rawCodec sends and receives protobuf bytes as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

// grpcRaw sends damaged protobuf bytes.
func (g *generator) grpcRaw() badRequest {
	valid, _ := proto.Marshal(&toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: mustStruct(map[string]any{"a": 1, "b": 2})})
	var kind string
	var body []byte
	switch g.rnd.IntN(4) {
	case 0:
		kind, body = "truncated", valid[:1+g.rnd.IntN(len(valid)-1)]
	case 1:
		kind = "random bytes"
		body = make([]byte, 1+g.rnd.IntN(200))
		for i := range body {
			body[i] = byte(g.rnd.IntN(256))
		}
	case 2:
		kind = "invalid UTF-8"
		body = protowire.AppendTag(nil, 1, protowire.BytesType) // tool_id
		body = protowire.AppendBytes(body, []byte{'C', 0xff, 0xfe, 'x'})
	default:
		if g.deep == nil {
			g.deep = deepStruct(10_000) // quadratic to build: once
		}
		kind, body = "10,000-deep nesting", g.deep
	}
	return badRequest{"grpc", kind, func(ctx context.Context) outcome {
		var reply []byte
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+g.token)
		err := g.conn.Invoke(ctx, "/toolfleet.v1.ToolGatewayService/CallTool", body, &reply, grpc.ForceCodec(rawCodec{}))
		return grpcOutcome(err, nil)
	}}
}

// deepStruct is a CallToolRequest whose input nests depth Struct values.
func deepStruct(depth int) []byte {
	// Innermost first: Value{struct_value: Struct{fields: {"a": Value{…}}}}.
	inner := []byte{}
	for range depth {
		var entry []byte
		entry = protowire.AppendTag(entry, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, "a")
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendBytes(entry, inner) // the Value
		var st []byte
		st = protowire.AppendTag(st, 1, protowire.BytesType) // Struct.fields
		st = protowire.AppendBytes(st, entry)
		var val []byte
		val = protowire.AppendTag(val, 5, protowire.BytesType) // Value.struct_value
		inner = protowire.AppendBytes(val, st)
	}
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendString(req, "Calculator.Add")
	// CallToolRequest.input is a Struct: unwrap the outermost Value.
	_, _, n := protowire.ConsumeField(inner)
	st, _ := protowire.ConsumeBytes(inner[protowire.SizeTag(5):n])
	req = protowire.AppendTag(req, inputField(), protowire.BytesType)
	return protowire.AppendBytes(req, st)
}

// inputField is CallToolRequest.input's field number.
func inputField() protowire.Number {
	return protowire.Number((&toolfleetv1.CallToolRequest{}).ProtoReflect().Descriptor().Fields().ByName("input").Number())
}

// grpcSemantic sends well-formed requests that are wrong in meaning.
func (g *generator) grpcSemantic() badRequest {
	c := toolfleetv1.NewToolGatewayServiceClient(g.conn)
	auth := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+g.token)
	}
	switch g.rnd.IntN(5) {
	case 0:
		id := fmt.Sprintf("Nope%d.Tool@%d.0.0", g.rnd.IntN(1000), g.rnd.IntN(9))
		return badRequest{"grpc", "unknown tool", func(ctx context.Context) outcome {
			resp, err := c.CallTool(auth(ctx), &toolfleetv1.CallToolRequest{ToolId: id})
			return grpcOutcome(err, resp)
		}}
	case 1:
		return badRequest{"grpc", "wrong input types", func(ctx context.Context) outcome {
			resp, err := c.CallTool(auth(ctx), &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add",
				Input: mustStruct(map[string]any{"a": "one", "b": []any{2}, "c": map[string]any{}})})
			return grpcOutcome(err, resp)
		}}
	case 2:
		calls := make([]*toolfleetv1.CallToolRequest, 101+g.rnd.IntN(50))
		for i := range calls {
			calls[i] = &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: mustStruct(map[string]any{"a": 1, "b": 2})}
		}
		return badRequest{"grpc", "oversized batch", func(ctx context.Context) outcome {
			_, err := c.CallTools(auth(ctx), &toolfleetv1.CallToolsRequest{Calls: calls})
			return grpcOutcome(err, nil)
		}}
	case 3:
		return badRequest{"grpc", "bad token", func(ctx context.Context) outcome {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer eyJhbGciOiJub25lIn0.e30.")
			resp, err := c.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add"})
			return grpcOutcome(err, resp)
		}}
	default:
		v := []string{"Calculator.Add@x.y", "Calculator.Add@1.2.3.4", "Calculator.Add@", "Calculator.", ".Add", strings.Repeat("A", 300)}[g.rnd.IntN(6)]
		return badRequest{"grpc", "bad tool id", func(ctx context.Context) outcome {
			resp, err := c.CallTool(auth(ctx), &toolfleetv1.CallToolRequest{ToolId: v})
			return grpcOutcome(err, resp)
		}}
	}
}

// grpcOutcome reads a gRPC answer: an error status, or a call that failed
// as a result (validation errors come back as results with a message).
func grpcOutcome(err error, resp *toolfleetv1.CallToolResponse) outcome {
	if err != nil {
		st, ok := status.FromError(err)
		if !ok {
			return outcome{err: err}
		}
		fault := st.Code() == codes.Internal || st.Code() == codes.Unknown || st.Code() == codes.DataLoss
		return outcome{serverFault: fault, message: st.Message()}
	}
	if resp.GetSuccess() {
		return outcome{} // a success has no message: the check fails loudly
	}
	return outcome{message: resp.GetError().GetMessage()}
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}
