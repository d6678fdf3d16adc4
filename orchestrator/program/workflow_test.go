package program_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/schema"
)

// These tests run ProgramWorkflow in Temporal's test environment with the real
// activities in front of an in-memory gateway (fakeGateway); e2e_test.go runs
// programs on the embedded stack against a real gateway.

type fakeTool struct {
	def *toolfleetv1.ToolDefinition
	run func(in map[string]any) (any, *toolfleetv1.ToolError)
}

func numberSchema(names ...string) map[string]any {
	props := map[string]any{}
	req := []any{}
	for _, n := range names {
		props[n] = map[string]any{"type": "number"}
		req = append(req, n)
	}
	return map[string]any{"type": "object", "properties": props, "required": req, "additionalProperties": false}
}

func def(toolkit, name string, schema map[string]any, approval bool) *toolfleetv1.ToolDefinition {
	s, err := structpb.NewStruct(schema)
	if err != nil {
		panic(err)
	}
	return &toolfleetv1.ToolDefinition{Id: toolkit + "." + name + "@1.0.0", Toolkit: toolkit, Name: name,
		ModelName: toolkit + "_" + name, Version: "1.0.0", Description: name + " things.", InputSchema: s,
		Requirements: &toolfleetv1.ToolRequirements{RequiresApproval: approval, Timeout: durationpb.New(5 * time.Second),
			Retry: &toolfleetv1.RetryPolicy{MaxAttempts: 3, InitialBackoff: durationpb.New(10 * time.Millisecond)}}}
}

// fakeGateway serves a few tools in memory and counts the calls that ran,
// by call id, as the real gateway's idempotency would.
type fakeGateway struct {
	tools map[string]fakeTool

	mu    sync.Mutex
	ran   map[string]int // tool name → runs
	flaky map[string]int // call id → attempts
}

func newFakeGateway() *fakeGateway {
	g := &fakeGateway{tools: map[string]fakeTool{}, ran: map[string]int{}, flaky: map[string]int{}}
	g.add(def("Calculator", "Add", numberSchema("a", "b"), false), func(in map[string]any) (any, *toolfleetv1.ToolError) {
		return map[string]any{"result": in["a"].(float64) + in["b"].(float64)}, nil
	})
	g.add(def("Calculator", "Fail", numberSchema(), false), func(map[string]any) (any, *toolfleetv1.ToolError) {
		return nil, &toolfleetv1.ToolError{Message: "cannot do that"}
	})
	g.add(def("Calculator", "Busy", numberSchema(), false), func(map[string]any) (any, *toolfleetv1.ToolError) {
		return nil, &toolfleetv1.ToolError{Message: "busy", CanRetry: true, RetryAfterMs: 5}
	})
	g.add(def("Bank", "Transfer", numberSchema("amount"), true), func(in map[string]any) (any, *toolfleetv1.ToolError) {
		return map[string]any{"sent": in["amount"]}, nil
	})
	g.add(def("Blob", "Get", map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "number"}}}, false),
		func(in map[string]any) (any, *toolfleetv1.ToolError) {
			return map[string]any{"data": strings.Repeat("x", int(in["n"].(float64)))}, nil
		})
	return g
}

func (g *fakeGateway) add(d *toolfleetv1.ToolDefinition, run func(map[string]any) (any, *toolfleetv1.ToolError)) {
	g.tools[d.GetToolkit()+"."+d.GetName()] = fakeTool{def: d, run: run}
}

func (g *fakeGateway) runs(name string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ran[name]
}

func (g *fakeGateway) Tools(_ context.Context, req *toolfleetv1.ListToolsRequest) ([]*toolfleetv1.ToolDefinition, error) {
	var out []*toolfleetv1.ToolDefinition
	for name, t := range g.tools {
		if ok, _ := path.Match(req.GetFilter(), name); ok {
			out = append(out, t.def)
		}
	}
	return out, nil
}

func (g *fakeGateway) GetTool(_ context.Context, id string) (*toolfleetv1.ToolDefinition, error) {
	name, _, _ := strings.Cut(id, "@")
	if t, ok := g.tools[name]; ok {
		return t.def, nil
	}
	return nil, &client.ServerError{Code: codes.NotFound, Message: "no tool " + id}
}

func (g *fakeGateway) CallTool(_ context.Context, req *toolfleetv1.CallToolRequest) (*client.Result, error) {
	name, _, _ := strings.Cut(req.GetToolId(), "@")
	t, ok := g.tools[name]
	if !ok {
		return nil, &client.ServerError{Code: codes.NotFound, Message: "no tool " + req.GetToolId()}
	}
	g.mu.Lock()
	g.ran[name]++
	g.mu.Unlock()
	out, terr := t.run(req.GetInput().AsMap())
	res := &client.Result{CallID: req.GetCallId(), ToolID: t.def.GetId(), Attempts: 1}
	if terr != nil {
		res.Error = terr
		return res, nil
	}
	v, err := structpb.NewValue(out)
	if err != nil {
		return nil, err
	}
	res.Success, res.Value = true, v
	return res, nil
}

// recorder keeps published events.
type recorder struct {
	mu     sync.Mutex
	events []toolcall.Event
}

func (r *recorder) Publish(_ context.Context, ev toolcall.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	return nil
}

func (r *recorder) messages(kind string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events {
		if ev.Kind == kind {
			out = append(out, ev.Message)
		}
	}
	return out
}

type env struct {
	*testsuite.TestWorkflowEnvironment
	gw     *fakeGateway
	events *recorder
}

func newEnv(t *testing.T) env {
	var s testsuite.WorkflowTestSuite
	e := env{TestWorkflowEnvironment: s.NewTestWorkflowEnvironment(), gw: newFakeGateway(), events: &recorder{}}
	e.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: program.DeadlockDetectionTimeout})
	program.Register(e.TestWorkflowEnvironment, &program.Activities{Gateway: e.gw, Events: e.events})
	return e
}

// run executes src and returns its output or its ProgramError.
func (e env) run(t *testing.T, in program.Input) (*program.Output, *program.ProgramError) {
	t.Helper()
	if in.ProgramID == "" {
		in.ProgramID = "p1"
	}
	if in.Tools == nil {
		in.Tools = []string{"Calculator.*", "Bank.*", "Blob.*"}
	}
	e.ExecuteWorkflow(program.WorkflowName, in)
	if !e.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := e.GetWorkflowError(); err != nil {
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != program.ErrorType {
			t.Fatalf("workflow error %v, want a %s", err, program.ErrorType)
		}
		var pe program.ProgramError
		if err := ae.Details(&pe); err != nil {
			t.Fatalf("details: %v", err)
		}
		return nil, &pe
	}
	var out program.Output
	if err := e.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	return &out, nil
}

func TestPrograms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		src    string
		args   string
		want   string
		prints []string
	}{
		{"sequential calls", `
a = Calculator_Add(a=1, b=2)
b = call("Calculator.Add", a=a.value["result"], b=10)
result = [a.ok, b.value["result"]]
`, "", `[true,13]`, nil},
		{"a loop over args", `
total = 0
for n in args["numbers"]:
    total = Calculator_Add(a=total, b=n).value["result"]
result = total
`, `{"numbers": [1, 2, 3, 4]}`, `10`, nil},
		{"parallel fan-out keeps order", `
rs = parallel([lambda n=n: Calculator_Add(a=n, b=n) for n in range(6)], width=3)
result = [r.value["result"] for r in rs]
`, "", `[0,2,4,6,8,10]`, nil},
		{"a handled tool failure", `
r = Calculator_Fail()
result = {"ok": r.ok, "message": r.error.message, "can_retry": r.error.can_retry, "kind": r.error.kind}
`, "", `{"ok":false,"message":"cannot do that","can_retry":false,"kind":"execution"}`, nil},
		{"retries spent become a failed result", `
r = Calculator_Busy()
result = [r.ok, r.error.can_retry]
`, "", `[false,true]`, nil},
		{"arguments checked against the schema", `
r = Calculator_Add(a="one")
result = [r.ok, r.error.kind, sorted(r.error.fields.keys())]
`, "", `[false,"validation",["","a"]]`, nil},
		{"args dicts in sorted order, big ints exact", `
result = [list(args.keys()), args["id"] + 1]
`, `{"z": 1, "a": 2, "id": 9007199254740993}`, `[["a","id","z"],9007199254740994]`, nil},
		{"json and print", `
print("hello", 1)
result = json.decode(json.encode({"k": [1, 2]}))
`, "", `{"k":[1,2]}`, []string{"hello 1"}},
		{"main is an ordinary function", `
def main():
    return Calculator_Add(a=2, b=3).value["result"] * 2
result = main()
`, "", `10`, nil},
		{"no result is null", `x = 1`, "", `null`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			out, perr := e.run(t, program.Input{Source: tt.src, ArgsJSON: tt.args})
			if perr != nil {
				t.Fatalf("program failed: %v", perr)
			}
			if out.ResultJSON != tt.want {
				t.Fatalf("result %s, want %s", out.ResultJSON, tt.want)
			}
			if tt.prints != nil && fmt.Sprint(e.events.messages(toolcall.EventPrint)) != fmt.Sprint(tt.prints) {
				t.Fatalf("prints %q, want %q", e.events.messages(toolcall.EventPrint), tt.prints)
			}
		})
	}
}

func TestProgramErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		src      string
		limits   program.Limits
		kind     string
		limit    string
		position string
		line     string
		message  string
	}{
		{"steps", "x = 0\nwhile True:\n    x += 1\n", program.Limits{MaxSteps: 1000},
			"limit", program.LimitSteps, "program.star:3:", "x += 1", "max_steps"},
		{"steps inside parallel", "def spin():\n    while True:\n        pass\nparallel([spin])\n", program.Limits{MaxSteps: 1000},
			"limit", program.LimitSteps, "program.star:1:", "def spin():", "max_steps"}, // a jump has no position of its own
		{"tool calls", "for i in range(10):\n    Calculator_Add(a=i, b=1)\n", program.Limits{MaxToolCalls: 3},
			"limit", program.LimitToolCalls, "program.star:2:19", "Calculator_Add(a=i, b=1)", "max_tool_calls"},
		{"width", "parallel([lambda: 1], width=9)\n", program.Limits{MaxWidth: 4},
			"limit", program.LimitWidth, "program.star:1:9", "parallel([lambda: 1], width=9)", "max_width"},
		{"value in", "Calculator_Add(a=1, b=2, pad='x' * 5000)\n", program.Limits{MaxValueBytes: 1000},
			"limit", program.LimitValue, "program.star:1:15", "Calculator_Add(a=1, b=2, pad='x' * 5000)", "max_value_bytes"},
		{"value out", "r = Blob_Get(n=5000)\n", program.Limits{MaxValueBytes: 1000},
			"limit", program.LimitValue, "program.star:1:13", "r = Blob_Get(n=5000)", "max_value_bytes"},
		{"result", "x = 1\nresult = 'y' * 5000\n", program.Limits{MaxResultBytes: 1000},
			"limit", program.LimitResult, "program.star:2:1", "result = 'y' * 5000", "max_result_bytes"},
		{"deadline while waiting for approval", "Bank_Transfer(amount=5)\n", program.Limits{Deadline: time.Minute},
			"limit", program.LimitDeadline, "program.star:1:14", "Bank_Transfer(amount=5)", "deadline"},
		{"syntax error", "x = 1\ny = (2 +\n", program.Limits{},
			"syntax", "", "program.star:3:1", "", "got end of file"},
		{"syntax error column", "x = 1\n  y = 2\n", program.Limits{},
			"syntax", "", "program.star:2:3", "y = 2", "indent"},
		{"undefined name", "x = nope + 1\n", program.Limits{},
			"syntax", "", "program.star:1:5", "x = nope + 1", "undefined: nope"},
		{"runtime error", "def f(d):\n    return d['missing']\nf({})\n", program.Limits{},
			"runtime", "", "program.star:2:13", "return d['missing']", "key \"missing\" not in dict"},
		{"recursion is off", "def f(n):\n    return f(n - 1) if n else 0\nf(3)\n", program.Limits{},
			"runtime", "", "program.star:2:24", "return f(n - 1) if n else 0", "called recursively"},
		{"load is off", "load('x.star', 'y')\n", program.Limits{},
			"syntax", "", "program.star:1:6", "load('x.star', 'y')", "load is not available"},
		{"fail", "fail('nope', 3)\n", program.Limits{},
			"fail", "", "program.star:1:5", "fail('nope', 3)", "nope 3"},
		{"a tool that is not allowed", "call('Web.Fetch', url='x')\n", program.Limits{},
			"runtime", "", "program.star:1:5", "call('Web.Fetch', url='x')", "not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			_, perr := e.run(t, program.Input{Source: tt.src, Limits: tt.limits})
			if perr == nil {
				t.Fatal("program succeeded, want an error")
			}
			if perr.Kind != tt.kind || perr.Limit != tt.limit || !strings.HasPrefix(perr.Position, tt.position) ||
				perr.Line != tt.line || !strings.Contains(perr.Message, tt.message) {
				t.Fatalf("error %+v\nwant kind %q limit %q position %q… line %q message containing %q",
					perr, tt.kind, tt.limit, tt.position, tt.line, tt.message)
			}
		})
	}
}

func TestApproval(t *testing.T) {
	t.Parallel()
	src := "r = Bank_Transfer(amount=5)\nresult = [r.ok, r.value, r.error and r.error.message]\n"
	tests := []struct {
		name     string
		decision toolcall.Decision
		want     string
		runs     int
	}{
		{"granted", toolcall.Decision{CallID: "p1/1", Approved: true, Approver: "alice"}, `[true,{"sent":5},null]`, 1},
		{"denied", toolcall.Decision{CallID: "p1/1", Approver: "bob", Reason: "too much"}, `[false,null,"denied by bob: too much"]`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var rejected, accepted error
			e.RegisterDelayedCallback(func() {
				// The validator refuses an unknown call before the real decision.
				e.UpdateWorkflow(program.UpdateDecideApproval, "u0", &updateResult{err: &rejected},
					toolcall.Decision{CallID: "p1/99", Approved: true, Approver: "eve"})
				var st program.State
				v, err := e.QueryWorkflow(program.QueryGetProgram)
				if err != nil || v.Get(&st) != nil || st.Status != program.StatusWaitingApproval || len(st.Pending) != 1 {
					t.Errorf("query while waiting: %+v %v", st, err)
				}
				e.UpdateWorkflow(program.UpdateDecideApproval, "u1", &updateResult{err: &accepted}, tt.decision)
			}, time.Minute)
			out, perr := e.run(t, program.Input{Source: src})
			if perr != nil {
				t.Fatalf("program failed: %v", perr)
			}
			if out.ResultJSON != tt.want {
				t.Fatalf("result %s, want %s", out.ResultJSON, tt.want)
			}
			if rejected == nil || accepted != nil {
				t.Fatalf("update for an unknown call: %v (want rejected); real decision: %v (want accepted)", rejected, accepted)
			}
			if n := e.gw.runs("Bank.Transfer"); n != tt.runs {
				t.Fatalf("Bank.Transfer ran %d times, want %d", n, tt.runs)
			}
			if got := e.events.messages(toolcall.EventApprovalRequested); len(got) != 1 {
				t.Fatalf("approval.requested events %q, want one", got)
			}
		})
	}
}

// updateResult records an Update's outcome in the test environment.
type updateResult struct{ err *error }

func (u *updateResult) Accept()          {}
func (u *updateResult) Reject(err error) { *u.err = err }
func (u *updateResult) Complete(_ any, err error) {
	if err != nil {
		*u.err = err
	}
}

func TestCompile(t *testing.T) {
	t.Parallel()
	chk, err := program.Compile("x.star", `
a = call("Calculator.Add", a=1, b=2)
b = Calculator_Multiply(a=2, b=3)
def helper():
    return KV_Get(key="k")
result = [a, b, helper(), len([1])]
`)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(chk)
	if want := `{"calls":["Calculator.Add"],"stubs":["Calculator_Multiply","KV_Get"],"has_result":true}`; string(got) != want {
		t.Fatalf("Compile = %s, want %s", got, want)
	}
}

func TestSignature(t *testing.T) {
	t.Parallel()
	tool := program.Tool{Tool: toolcall.Tool{ModelName: "Calculator_Add"}, Description: "Adds.",
		InputSchema: `{"type":"object","properties":{"b":{"type":"number"},"a":{"type":"number"},"note":{"type":["string","null"]}},"required":["b","a"]}`}
	if got, want := tool.Doc(), "Calculator_Add(a: number, b: number, note?: string|null)\n    Adds."; got != want {
		t.Fatalf("Doc() = %q, want %q", got, want)
	}
	if got, want := tool.Signature(), "Calculator_Add(a: number, b: number, note?: string|null)"; got != want {
		t.Fatalf("Signature() = %q, want %q", got, want)
	}
}

// TestDocShowsConstraints: a stub's doc (code-mode prompt, `toolfleet program
// stubs`) shows enum values, bounds, lengths, patterns and which parameters
// are required, from the schema sdk/schema derives.
func TestDocShowsConstraints(t *testing.T) {
	t.Parallel()
	md := (&schematestv1.ConstraintsRequest{}).ProtoReflect().Descriptor()
	s, err := schema.For(md)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	tool := program.Tool{Tool: toolcall.Tool{ModelName: "SchemaTest_CheckConstraints"}, InputSchema: string(b)}
	doc := tool.Doc()
	for _, want := range []string{
		"SchemaTest_CheckConstraints(", "name: string 2..10 chars", "code: string matching ^[A-Z]{3}$",
		`op: "add"|"sub"`, "count: integer 1..10", "ratio: number >0 <1", `color?: "red"|"green"`,
		"email: string email", "tags: list of string ≤5 chars 1..3 items", `wait?: duration such as "1.5s"`,
		`fixed: "v1"`, "big?: integer ≤1000", "limit?: integer <100", "epoch?: integer ≥0", "notSeven?: integer not 7",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("Doc() lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "2147483647") || strings.Contains(doc, "COLOR_") {
		t.Errorf("Doc() shows type ranges or proto enum names:\n%s", doc)
	}
}
