package ids_test

import (
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/orchestrator/ids"
)

func TestReserved(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"trg_orders_m17":                   true,
		"run-1-program-2-0":                true,
		"abc-0123456789abcdef-program-9-1": true,
		"trg-orders-1":                     false,
		"my-program":                       false,
		"weekly-report":                    false,
		"program-1-0x":                     false,
	} {
		if got := ids.Reserved(id); got != want {
			t.Errorf("Reserved(%q) = %v, want %v", id, got, want)
		}
	}
}

// The ids code mode makes are reserved and valid, a long run id's too.
func TestCodeModeProgramIsReserved(t *testing.T) {
	t.Parallel()
	for _, run := range []string{"run-1", strings.Repeat("r", 100)} {
		id := ids.CodeModeProgram(run, 12, 3)
		if err := ids.Valid(id); err != nil || !ids.Reserved(id) {
			t.Errorf("CodeModeProgram(%q) = %q: valid %v, reserved %v", run, id, err, ids.Reserved(id))
		}
	}
}

func TestCallIDs(t *testing.T) {
	t.Parallel()
	if got := ids.RunCall("run-1", 2, 0); got != "run-1/2/0" {
		t.Errorf("RunCall = %q", got)
	}
	if got := ids.ProgramCall("p", 7); got != "p/7" || ids.ProgramOf(got) != "p" {
		t.Errorf("ProgramCall = %q, ProgramOf = %q", got, ids.ProgramOf(got))
	}
	if got := ids.Trigger("orders", 'm', "17"); got != "trg_orders_m17" || !ids.Reserved(got) {
		t.Errorf("Trigger = %q", got)
	}
}

// Random run and program ids are valid, not reserved, of their kind's
// prefix, and never the same twice.
func TestNewIDs(t *testing.T) {
	t.Parallel()
	for prefix, newID := range map[string]func() string{"run-": ids.NewRun, "prog-": ids.NewProgram} {
		a, b := newID(), newID()
		for _, id := range []string{a, b} {
			if err := ids.Valid(id); err != nil || ids.Reserved(id) || !strings.HasPrefix(id, prefix) || len(id) != len(prefix)+24 {
				t.Errorf("%q: valid %v, reserved %v; want a valid, unreserved %s id of 24 hex digits", id, err, ids.Reserved(id), prefix)
			}
		}
		if a == b {
			t.Errorf("two random ids are both %q", a)
		}
	}
}
