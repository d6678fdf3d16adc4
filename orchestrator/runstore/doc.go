// Package runstore is the store agent runs and Starlark programs share on
// NATS JetStream: transcripts, blobs, run records and the reaper.
//
//   - The transcript of a run lives in a KV bucket ("toolfleet_transcripts"),
//     one key per message ("<run_id>.<seq>"), written with create-only
//     semantics at a position the workflow chose, so a retried activity
//     finds its own earlier write instead of appending twice ([Store.Append],
//     [Store.Load]). A run's description ("<run_id>.meta") sits next to it.
//   - Blobs (a run's inputs, large tool results, tool lists, program values)
//     live in an Object Store ("toolfleet_run_blobs"), content-addressed
//     within their run or program ([Store.PutBlob], [Store.Blob]).
//   - The run records bucket ("toolfleet_runs", records.go) holds the
//     retention timers, what each principal's runs and programs hold
//     ([Store.Admit], [Store.Held], [Store.ChargeEvent] for the bound on
//     run events) and the [Settings] every process that starts runs shares.
//     Programs are held like runs ([Store.HoldProgram],
//     [Store.CheckProgramValues], programquota.go).
//   - The [Reaper] frees a run's or program's transcript, blobs and events
//     once it has been closed for the retention.
//
// Its name says what it owns: the run stores (the buckets are named after
// runs; a program's values are kept under its id as a run's blobs are). It
// imports no workflow kind (agent, program), no API and no runner: both
// workflow kinds, their services and the process use it.
package runstore

import (
	"encoding/json"
	"fmt"

	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// KindProgram is the kind of a program's description (<id>.meta, written
// by [Store.HoldProgram]): the id is not a run's, and what it stores counts
// as a program's. A run's description has no kind.
const KindProgram = "program"

// holderRecord is the part of a description (<id>.meta) the store reads:
// who holds the id and whether it is a program's. The rest (a run's spec) is
// package agent's.
type holderRecord struct {
	Principal struct {
		Subject string `json:"subject"`
	} `json:"principal"`
	Kind string `json:"kind,omitempty"`
}

// programRecord is the description HoldProgram writes for a program, in the
// layout of a run's (package agent's runMeta) with an empty spec.
type programRecord struct {
	Spec      json.RawMessage    `json:"spec"`
	Principal toolcall.Principal `json:"principal"`
	Kind      string             `json:"kind,omitempty"`
}

// ProgramSpec is the spec of a program's description: a run's empty spec
// as JSON, so the records keep the layout they always had (package agent
// checks that its empty RunSpec encodes to it).
const ProgramSpec = `{"model":{"provider":"","name":""},"budget":{},"approval":{}}`

var programSpec = json.RawMessage(ProgramSpec)

// validID reports whether id can name a run or a program.
func validID(id string) error {
	if err := ids.Valid(id); err != nil {
		return fmt.Errorf("runstore: run %w", err)
	}
	return nil
}
