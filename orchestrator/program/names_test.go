package program_test

import (
	"regexp"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	webv1 "github.com/toolfleet/toolfleet/gen/tools/web/v1"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// TestDocsSpellParametersAsTheSchema: what a script author or a model reads
// about a bundled tool (the stub's doc: signature and description, and the
// contract's examples) names each parameter as the JSON Schema does, by its
// JSON name (documentJson), never by its proto name (document_json).
func TestDocsSpellParametersAsTheSchema(t *testing.T) {
	t.Parallel()
	c, err := contract.LinkedContracts(
		calculatorv1.CalculatorService_ServiceDesc.ServiceName,
		clockv1.ClockService_ServiceDesc.ServiceName,
		jsonqv1.JSONQueryService_ServiceDesc.ServiceName,
		kvv1.KVService_ServiceDesc.ServiceName,
		webv1.WebService_ServiceDesc.ServiceName,
	)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := c.Definitions()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, d := range defs {
		md, ok := c.Method(d.GetGrpcMethod())
		if !ok {
			t.Fatalf("no method %s", d.GetGrpcMethod())
		}
		tool, err := program.ToolOf(d)
		if err != nil {
			t.Fatal(err)
		}
		text := tool.Doc() + "\n" + tool.InputSchema
		for _, ex := range d.GetExamples() {
			text += "\n" + ex.GetInputJson()
		}
		fields := md.Input().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			proto, js := string(fd.Name()), fd.JSONName()
			if proto == js {
				continue
			}
			checked++
			if regexp.MustCompile(`\b` + proto + `\b`).MatchString(text) {
				t.Errorf("%s: the doc or an example says %s, the schema %s:\n%s", d.GetId(), proto, js, text)
			}
			if !regexp.MustCompile(`\b` + js + `\b`).MatchString(tool.Signature()) {
				t.Errorf("%s: the signature lacks %s: %s", d.GetId(), js, tool.Signature())
			}
		}
	}
	if checked == 0 {
		t.Fatal("no bundled field has a JSON name of its own: the test checks nothing")
	}
}

// TestStubTakesProtoNames: a stub takes a parameter by its proto name too
// (document_json= for documentJson=), as the gateway's JSON input does; both
// spellings at once are refused by the schema.
func TestStubTakesProtoNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var got []map[string]any
	e.gw.add(def("JSONQuery", "Query", map[string]any{"type": "object", "additionalProperties": false,
		"properties": map[string]any{"query": map[string]any{"type": "string"}, "documentJson": map[string]any{"type": "string"},
			"maxResults": map[string]any{"type": "integer"}}}, false),
		func(in map[string]any) (any, *toolfleetv1.ToolError) {
			got = append(got, in)
			return map[string]any{"results": []any{}}, nil
		})
	out, perr := e.run(t, program.Input{Tools: []string{"JSONQuery.*"}, Source: `
a = JSONQuery_Query(query=".", document_json="1", max_results=2)
b = JSONQuery_Query(query=".", documentJson="1")
c = JSONQuery_Query(query=".", documentJson="1", document_json="2")
d = call("JSONQuery.Query", query=".", document_json="1")
result = [a.ok, b.ok, c.ok, c.error.kind if not c.ok else None, d.ok]
`})
	if perr != nil {
		t.Fatalf("program failed: %v", perr)
	}
	if want := `[true,true,false,"validation",true]`; out.ResultJSON != want {
		t.Fatalf("result %s, want %s", out.ResultJSON, want)
	}
	if len(got) != 3 || got[0]["documentJson"] != "1" || got[0]["maxResults"] != float64(2) || got[0]["document_json"] != nil {
		t.Fatalf("the tool got %v, want documentJson and maxResults", got)
	}
}
