package agent

import (
	"encoding/json"
	"testing"

	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// TestProgramRecordLayout: the description the run store writes for a
// program (HoldProgram) keeps the layout of a run's, with an empty spec, as
// it did when runs and the store were one package.
func TestProgramRecordLayout(t *testing.T) {
	t.Parallel()
	spec, err := json.Marshal(RunSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if string(spec) != runstore.ProgramSpec {
		t.Fatalf("an empty RunSpec encodes to %s, the run store writes %s for programs", spec, runstore.ProgramSpec)
	}
	b, err := json.Marshal(runMeta{Principal: toolcall.Principal{Subject: "s"}, Kind: runstore.KindProgram})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"spec":{"model":{"provider":"","name":""},"budget":{},"approval":{}},"principal":{"subject":"s"},"kind":"program"}`
	if string(b) != want {
		t.Fatalf("program record %s, want %s", b, want)
	}
}
