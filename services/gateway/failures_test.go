package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// outcome is what a caller saw, whatever the protocol.
type outcome struct {
	kind        string // "success", gateway.KindExecution, KindValidation or KindServer
	code        codes.Code
	http        int
	message     string
	developer   string
	paramErrors map[string]string
	value       map[string]any
}

type protocol struct {
	name string
	call func(t *testing.T, addr, toolID string, input map[string]any, bearer string) outcome
}

var protocols = []protocol{{"grpc", callGRPC}, {"connect", callConnect}, {"oxp-http", callHTTP}}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fromResponse(resp *toolfleetv1.CallToolResponse) outcome {
	if resp.GetSuccess() {
		return outcome{kind: "success", value: resp.GetValue().GetStructValue().AsMap()}
	}
	return outcome{kind: gateway.KindExecution, message: resp.GetError().GetMessage(), developer: resp.GetError().GetDeveloperMessage()}
}

// testApproval approves SchemaTest.Types, whose contract requires approval; the
// test tokens hold tools:approve.
var testApproval = &toolfleetv1.Approval{Approver: "tester"}

func callGRPC(t *testing.T, addr, toolID string, input map[string]any, bearer string) outcome {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if bearer != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+bearer)
	}
	resp, err := grpcClient(t, addr).CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: toolID, Input: mustStruct(t, input), Approval: testApproval})
	if err == nil {
		return fromResponse(resp)
	}
	st := status.Convert(err)
	o := outcome{code: st.Code(), message: st.Message()}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *toolfleetv1.ServerError:
			o.kind, o.developer = gateway.KindServer, d.GetDeveloperMessage()
		case *toolfleetv1.ValidationError:
			o.kind, o.paramErrors = gateway.KindValidation, d.GetParameterErrors()
		}
	}
	return o
}

func callConnect(t *testing.T, addr, toolID string, input map[string]any, bearer string) outcome {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req := connect.NewRequest(&toolfleetv1.CallToolRequest{ToolId: toolID, Input: mustStruct(t, input), Approval: testApproval})
	if bearer != "" {
		req.Header().Set("Authorization", "Bearer "+bearer)
	}
	resp, err := connectClient(addr).CallTool(ctx, req)
	if err == nil {
		return fromResponse(resp.Msg)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("connect: %v", err)
	}
	o := outcome{code: codes.Code(ce.Code()), message: ce.Message()}
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatalf("detail: %v", err)
		}
		switch v := v.(type) {
		case *toolfleetv1.ServerError:
			o.kind, o.developer = gateway.KindServer, v.GetDeveloperMessage()
		case *toolfleetv1.ValidationError:
			o.kind, o.paramErrors = gateway.KindValidation, v.GetParameterErrors()
		}
	}
	return o
}

func callHTTP(t *testing.T, addr, toolID string, input map[string]any, bearer string) outcome {
	body, _ := json.Marshal(map[string]any{"$schema": "urn:oxp:1.0", "request": map[string]any{"tool_id": toolID, "input": input, "approval": map[string]any{"approver": testApproval.GetApprover()}}})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/tools/call", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /tools/call: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Result *struct {
			Success bool           `json:"success"`
			Value   map[string]any `json:"value"`
			Error   *struct {
				Message   string `json:"message"`
				Developer string `json:"developer_message"`
			} `json:"error"`
		} `json:"result"`
		Message     string            `json:"message"`
		Developer   string            `json:"developer_message"`
		Code        string            `json:"code"`
		ParamErrors map[string]string `json:"parameter_errors"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("decode %d body: %v", resp.StatusCode, err)
	}
	o := outcome{http: resp.StatusCode, message: out.Message, developer: out.Developer}
	switch {
	case resp.StatusCode == http.StatusOK && out.Result.Success:
		o.kind, o.value = "success", out.Result.Value
	case resp.StatusCode == http.StatusOK:
		o.kind, o.message, o.developer = gateway.KindExecution, out.Result.Error.Message, out.Result.Error.Developer
	case resp.StatusCode == http.StatusUnprocessableEntity:
		o.kind, o.paramErrors = gateway.KindValidation, out.ParamErrors
	default:
		o.kind = gateway.KindServer
	}
	return o
}

// TestFailureTable calls one fleet through every row of the failure table over
// gRPC, Connect (JSON) and OXP HTTP: the same kind and meaning on every protocol.
func TestFailureTable(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	_, calc, _ := calculatorWorker(t, nats.URL())
	st := schemaTestWorker(t, "")
	dead := startPlainCalculator(t, 5)
	tiny := startPlainCalculator(t, 4, withMaxResultBytes(5))
	g := startGateway(t, gateway.Config{NATSURL: nats.URL(), Workers: []string{st, dead.addr, tiny.addr, calc},
		DefaultTimeout: 300 * time.Millisecond})
	for _, id := range []string{"Calculator.Add@1", "Calculator.Add@5", "Calculator.Add@4", "SchemaTest.Sleep"} {
		waitTool(t, g, id)
	}
	dead.kill()

	all := token(t, "tools:call", "schematest:read", gateway.ScopeApprove)
	rows := []struct {
		name    string
		tool    string
		input   map[string]any
		bearer  string
		kind    string
		code    codes.Code
		http    int
		message string
		param   string
	}{
		{"success", "Calculator.Add@1", map[string]any{"a": 2, "b": 3}, all, "success", codes.OK, 200, "", ""},
		{"execution error", "Calculator.Divide@1", map[string]any{"a": 1, "b": 0}, all, gateway.KindExecution, codes.OK, 200, "zero", ""},
		{"tool panics", "SchemaTest.Panic", map[string]any{"panic": true}, all, gateway.KindExecution, codes.OK, 200, "failed", ""},
		// The worker SDK enforces its own limit; the gateway enforces it for any server.
		{"result over the limit (worker)", "SchemaTest.Types", map[string]any{"s": strings.Repeat("x", 5000)}, all, gateway.KindExecution, codes.OK, 200, "4096", ""},
		{"result over the limit (gateway)", "Calculator.Add@4", map[string]any{"a": 1, "b": 1}, all, gateway.KindExecution, codes.OK, 200, "over its limit of 5 bytes", ""},
		{"input breaks a rule", "Calculator.Evaluate", map[string]any{"expression": ""}, all, gateway.KindValidation, codes.InvalidArgument, 422, "", "expression"},
		{"unknown field", "Calculator.Add@1", map[string]any{"a": 1, "b": 1, "c": 2}, all, gateway.KindValidation, codes.InvalidArgument, 422, "", ""},
		{"required operand missing", "Calculator.Add@1", map[string]any{"a": 2}, all, gateway.KindValidation, codes.InvalidArgument, 422, "", "b"},
		{"unknown tool", "Calculator.Ad", nil, all, gateway.KindServer, codes.NotFound, 400, "Calculator.Add", ""},
		{"unknown version", "Calculator.Add@9", nil, all, gateway.KindServer, codes.NotFound, 400, "served versions: 1.0.0, 4.0.0, 5.0.0", ""},
		{"worker hangs", "SchemaTest.Sleep", map[string]any{"duration": "30s"}, all, gateway.KindServer, codes.DeadlineExceeded, 400, "did not answer", ""},
		{"worker crashed", "Calculator.Add@5", map[string]any{"a": 1, "b": 1}, all, gateway.KindServer, codes.Unavailable, 503, "did not run", ""},
		{"no token", "Calculator.Add@1", map[string]any{"a": 1}, "", gateway.KindServer, codes.Unauthenticated, 401, "bearer token", ""},
		{"missing tool scope", "SchemaTest.Types", map[string]any{"s": "hi"}, token(t, "tools:call"), gateway.KindServer, codes.PermissionDenied, 403, "schematest:read", ""},
	}
	for _, p := range protocols {
		for _, r := range rows {
			t.Run(p.name+"/"+r.name, func(t *testing.T) {
				t.Parallel()
				got := p.call(t, g.Addr(), r.tool, r.input, r.bearer)
				if got.kind != r.kind {
					t.Fatalf("kind = %q (%+v), want %q", got.kind, got, r.kind)
				}
				if p.name == "oxp-http" {
					if got.http != r.http {
						t.Errorf("HTTP status = %d, want %d", got.http, r.http)
					}
				} else if got.code != r.code {
					t.Errorf("code = %v, want %v", got.code, r.code)
				}
				if !strings.Contains(got.message, r.message) {
					t.Errorf("message = %q, want it to contain %q", got.message, r.message)
				}
				if r.kind == gateway.KindValidation && len(got.paramErrors) == 0 {
					t.Errorf("no parameter errors")
				}
				if r.param != "" && got.paramErrors[r.param] == "" {
					t.Errorf("parameter_errors = %v, want an entry for %q", got.paramErrors, r.param)
				}
				if r.kind == "success" && got.value["result"] != float64(5) {
					t.Errorf("value = %v, want result 5", got.value)
				}
			})
		}
	}
}

// TestDeveloperMessageStaysOffTheModelMessage: the tool's developer message
// reaches callers in its own field, never inside the message a model sees.
func TestDeveloperMessageStaysOffTheModelMessage(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gateway.Config{Workers: []string{schemaTestWorker(t, "")}})
	waitTool(t, g, "SchemaTest.Types")
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			got := p.call(t, g.Addr(), "SchemaTest.Types", map[string]any{"s": "fail"}, token(t, "tools:call", "schematest:read", gateway.ScopeApprove))
			if got.kind != gateway.KindExecution || got.message != "cannot do that" || got.developer != "dev detail" {
				t.Fatalf("got %+v, want message %q and developer message %q apart", got, "cannot do that", "dev detail")
			}
		})
	}
}
