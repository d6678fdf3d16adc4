package console

import (
	"net/url"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

func TestTryItFormFromSchema(t *testing.T) {
	schema, err := structpb.NewStruct(map[string]any{"type": "object", "required": []any{"n"},
		"properties": map[string]any{
			"s":    map[string]any{"type": "string", "description": "<b>text</b>"},
			"n":    map[string]any{"type": "integer"},
			"flag": map[string]any{"type": "boolean"},
			"mode": map[string]any{"type": "string", "enum": []any{"fast", "slow"}},
			"obj":  map[string]any{"type": "object"},
			"list": map[string]any{"type": []any{"array", "null"}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, f := range formFields(schema, nil) {
		kinds[f.Name] = f.Kind
	}
	want := map[string]string{"s": "text", "n": "number", "flag": "checkbox", "mode": "select", "obj": "json", "list": "json"}
	for k, v := range want {
		if kinds[k] != v {
			t.Errorf("field %s is %q, want %q", k, kinds[k], v)
		}
	}
	// A number that does not parse goes as text: the gateway words the error.
	in, problem := formInput(schema, url.Values{"in.n": {"forty"}, "in.flag": {"true"}, "in.obj": {`{"a":1}`}, "in.s": {"x"}})
	if problem != "" || in.GetFields()["n"].GetStringValue() != "forty" || !in.GetFields()["flag"].GetBoolValue() ||
		in.GetFields()["obj"].GetStructValue().GetFields()["a"].GetNumberValue() != 1 {
		t.Errorf("input %v, problem %q", in, problem)
	}
	if in, _ := formInput(schema, url.Values{"in.n": {"7"}}); in.GetFields()["n"].GetNumberValue() != 7 {
		t.Errorf("n=7 sent as %v", in.GetFields()["n"])
	}
	if _, problem := formInput(schema, url.Values{"in.obj": {"{not json"}}); problem == "" {
		t.Error("a JSON field that is not JSON was sent")
	}
}

func TestRunFilterRequest(t *testing.T) {
	req := &toolfleetv1.ListRunsRequest{}
	f := filterOf(url.Values{"status": {"waiting_approval"}, "model": {" scripted:demo "}, "from": {"2026-11-27T14:30"}})
	if p := f.request(req); p != "" || req.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_WAITING_APPROVAL || req.GetModel() != "scripted:demo" ||
		req.GetStartedAfter().AsTime().Format("2006-01-02T15:04Z") != "2026-11-27T14:30Z" {
		t.Errorf("request %v, problem %q", req, p)
	}
	for _, q := range []url.Values{{"status": {"nonsense"}}, {"to": {"yesterday"}}} {
		if p := filterOf(q).request(&toolfleetv1.ListRunsRequest{}); p == "" {
			t.Errorf("filter %v accepted", q)
		}
	}
	if got := f.query().Encode(); got != "from=2026-11-27T14%3A30&model=scripted%3Ademo&status=waiting_approval" {
		t.Errorf("the pager's query %q", got)
	}
}
