package yamlproto_test

import (
	"errors"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/yamlproto"
)

func TestUnmarshal(t *testing.T) {
	t.Parallel()
	var req toolfleetv1.StartRunRequest
	spec := `# a run spec
model: scripted:forecast.yaml
tools: ['Weather.*']
run_id: r-1
budget:
  maxTurns: 4
  deadline: 90s
labels: {team: "météo"}
messages:
  - role: ROLE_USER
    parts: [{text: "Quel temps à Paris ?"}]
`
	if err := yamlproto.Unmarshal("run.yaml", []byte(spec), &req); err != nil {
		t.Fatal(err)
	}
	if req.GetModel() != "scripted:forecast.yaml" || req.GetTools()[0] != "Weather.*" || req.GetRunId() != "r-1" ||
		req.GetBudget().GetMaxTurns() != 4 || req.GetBudget().GetDeadline().AsDuration().Seconds() != 90 ||
		req.GetLabels()["team"] != "météo" || req.GetMessages()[0].GetParts()[0].GetText() != "Quel temps à Paris ?" {
		t.Fatalf("decoded %v", &req)
	}
	if err := yamlproto.Unmarshal("empty.yaml", nil, &req); err != nil {
		t.Fatalf("an empty document: %v", err)
	}
}

// Each mistake is reported at its line and column in the YAML, with the field.
func TestUnmarshalErrorsInTheAuthorsTerms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"unknown field", "model: scripted:demo\nlabels: {équipe: \"é\"}\nbudget:\n  maxTurns: 3\n  maxTurnz: 4\n",
			[]string{"run.yaml: line 5, column 3: ", `unknown field "maxTurnz"`}},
		{"wrong type", "model: scripted:demo\nbudget:\n  maxTurns: lots\n",
			[]string{`run.yaml: line 3, column 13: budget.maxTurns: want an int32 value, not "lots"`}},
		{"list for a string", "model: [a, b]\n", []string{"run.yaml: line 1, column 8: model: want a string value, not a list"}},
		{"mapping for a list", "tools: {a: b}\n", []string{"run.yaml: line 1, column 8: tools: a mapping is not allowed here"}},
		{"bad enum", "questions: SOMETIMES\n", []string{`run.yaml: line 1, column 12: questions: want an enum value, not "SOMETIMES"`}},
		{"not YAML", "model: a\n  tools: [\n", []string{"run.yaml: not YAML: line "}},
		{"merge key", "base: &b {model: x}\n<<: *b\n", []string{"run.yaml: line 2, column 1: merge keys"}},
		{"alias bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
			"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
			[]string{"more than 100000 values"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var req toolfleetv1.StartRunRequest
			err := yamlproto.Unmarshal("run.yaml", []byte(tc.spec), &req)
			if !errors.Is(err, yamlproto.ErrSpec) {
				t.Fatalf("error %v, want ErrSpec", err)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "proto:") || strings.Contains(err.Error(), "line 1:") {
				t.Errorf("error %q shows the decoder's internals", err)
			}
		})
	}
}

// FuzzUnmarshal: any document is decoded or refused with a spec error, never
// a panic, and a refusal never shows the decoder's prefix.
func FuzzUnmarshal(f *testing.F) {
	for _, seed := range []string{"model: x\n", "budget: {maxTurns: 3}\n", "tools: [a, *b]\n", "a: &a [*a]\n", "labels: {é: 1}\n", "- 1\n", "{", "questions: 1e999\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req toolfleetv1.StartRunRequest
		err := yamlproto.Unmarshal("f.yaml", b, &req)
		if err != nil && (!errors.Is(err, yamlproto.ErrSpec) || strings.Contains(err.Error(), "proto:")) {
			t.Fatalf("error %q", err)
		}
	})
}
