// Package ids is every name and id the orchestrator makes or checks: the
// task queue, the ids of runs, programs and tool calls, the ids triggers and
// code mode make, and which ids no caller may claim. It imports nothing of
// the orchestrator, so every package of it (and cmd/) can use it.
package ids

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// TaskQueue is the default task queue of the orchestrator: one worker serves
// agent runs and programs (code mode runs programs as child workflows on it).
const TaskQueue = "toolfleet-agent"

// pattern keeps run and program ids usable as NATS subject tokens, KV keys
// and parts of call ids.
var pattern = regexp.MustCompile(`^[A-Za-z0-9_=-]{1,100}$`)

// Valid reports whether id can name a run or a program.
func Valid(id string) error {
	if !pattern.MatchString(id) {
		return fmt.Errorf("id %q: want 1-100 of A-Z a-z 0-9 _ = -", id)
	}
	return nil
}

// NewRun returns a random run id ("run-" and 24 hex digits).
func NewRun() string { return random("run-") }

// NewProgram returns a random program id ("prog-" and 24 hex digits).
func NewProgram() string { return random("prog-") }

// random is prefix and 12 random bytes in hex.
func random(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// RunCall is the id of call index of turn in a run: the gateway's
// idempotency key, so retries and replays never repeat a side effect.
func RunCall(runID string, turn, index int) string {
	return fmt.Sprintf("%s/%d/%d", runID, turn, index)
}

// ProgramCall is the id of the n-th call (from 1) of a program.
func ProgramCall(programID string, n int) string { return fmt.Sprintf("%s/%d", programID, n) }

// ProgramOf is the program id in a program's call id "<program_id>/<n>".
func ProgramOf(callID string) string {
	id, _, _ := strings.Cut(callID, "/")
	return id
}

// TriggerPrefix starts the ids of the runs and programs a trigger starts.
const TriggerPrefix = "trg_"

// Trigger is the id of what trigger name starts for a message:
// "trg_<name>_<form><rest>", where the form letter says what rest is (the
// trigger package's m, h and s). Trigger names hold no "_", so no two
// triggers or forms share an id.
func Trigger(name string, form byte, rest string) string {
	return TriggerPrefix + name + "_" + string(form) + rest
}

// codeModeProgram matches the ids [CodeModeProgram] makes.
var codeModeProgram = regexp.MustCompile(`-program-[0-9]+-[0-9]+$`)

// CodeModeProgram is the id of the program that call index of turn of a
// code-mode run starts: a valid id (programs share the run event
// subjects), unique per run.
func CodeModeProgram(runID string, turn, index int) string {
	id := fmt.Sprintf("%s-program-%d-%d", runID, turn, index)
	if Valid(id) == nil {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return fmt.Sprintf("%s-%s-program-%d-%d", runID[:40], hex.EncodeToString(sum[:8]), turn, index)
}

// Reserved reports whether id is one the system makes (a trigger's run or
// program, a code-mode run's program): a caller that could claim it first
// would take over, or block, what the system starts under it later.
func Reserved(id string) bool {
	return strings.HasPrefix(id, TriggerPrefix) || codeModeProgram.MatchString(id)
}
