package toolcall

import (
	"regexp"
	"strings"
)

// Ids the system makes itself, which no caller may claim first.
const (
	// TriggerIDPrefix starts the ids of runs and programs a trigger starts
	// (package trigger: "trg_<name>_<form><id>").
	TriggerIDPrefix = "trg_"
)

// codeModeID matches the ids of the programs a code-mode run starts
// ("<run_id>-program-<turn>-<index>", package agent's ProgramID).
var codeModeID = regexp.MustCompile(`-program-[0-9]+-[0-9]+$`)

// Reserved reports whether id is one the system makes (a trigger's run or
// program, a code-mode run's program): a caller that could claim it first
// would take over, or block, what the system starts under it later.
func Reserved(id string) bool {
	return strings.HasPrefix(id, TriggerIDPrefix) || codeModeID.MatchString(id)
}
