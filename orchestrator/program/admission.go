package program

import (
	"fmt"
	"sync"
	"time"

	"github.com/toolfleet/toolfleet/internal/procmem"
)

// Script memory of a process (issue 32): a program's memory budget bounds
// what its script may allocate, but a replica runs many programs at once, so
// N programs could take N budgets. The replica's script memory is a ceiling
// on the sum of the budgets of the programs whose script it runs (from the
// start of the script until the workflow returns or leaves the worker's
// cache): a program's script starts only when its budget fits what is left.
//
// Admission decides when a script runs, never what it computes, so it does
// not enter history: a script waits for room inside its workflow task for up
// to AdmissionWait (less than the deadlock detector's timeout), then fails
// the workflow task, which Temporal retries — on this replica or another.
// A budget over the whole ceiling can never run here; the program fails
// with a max_memory_bytes limit error (and Programs.Start refuses it when
// its Config sets the ceiling).

// DefaultAdmissionWait is how long a script waits inside its workflow task
// for room before the task fails and is retried.
const DefaultAdmissionWait = 5 * time.Second

// DefaultScriptMemory is the script memory of a process without GOMEMLIMIT
// and without Config.ScriptMemory: 16 programs at the default budget.
const DefaultScriptMemory = 4 << 30

// ScriptMemoryFor is the default script memory of a process: three quarters
// of GOMEMLIMIT when it is set, else DefaultScriptMemory.
func ScriptMemoryFor() int64 { return procmem.Ceiling(DefaultScriptMemory) }

// Admission is a process's script memory: the budgets of running scripts
// add up to at most its ceiling.
type Admission struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced when memory is released
	ceiling int64
	used    int64
	running int
	wait    time.Duration
}

// NewAdmission returns an admission of ceiling bytes (0 or less: no
// ceiling) where a script waits up to wait (0: DefaultAdmissionWait).
func NewAdmission(ceiling int64, wait time.Duration) *Admission {
	if wait <= 0 {
		wait = DefaultAdmissionWait
	}
	return &Admission{ceiling: ceiling, wait: wait, changed: make(chan struct{})}
}

var (
	admissionMu sync.Mutex
	admission   = NewAdmission(0, 0) // none until SetAdmission
)

// SetAdmission makes a the admission of every program this process runs
// (the orchestrator sets it from Config.ScriptMemory at start; a process
// that never calls it has no ceiling).
func SetAdmission(a *Admission) {
	admissionMu.Lock()
	defer admissionMu.Unlock()
	admission = a
}

func currentAdmission() *Admission {
	admissionMu.Lock()
	defer admissionMu.Unlock()
	return admission
}

// Ceiling is the admission's ceiling in bytes (0: none).
func (a *Admission) Ceiling() int64 { return max(a.ceiling, 0) }

// Used returns the budgets admitted and the scripts holding them.
func (a *Admission) Used() (int64, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used, a.running
}

// errTooBig and errFull are the admission's refusals.
type admissionError struct {
	tooBig bool
	msg    string
}

func (e *admissionError) Error() string { return e.msg }

// acquire reserves budget bytes, waiting up to the admission's wait for
// room; release gives them back (once).
func (a *Admission) acquire(budget int64) (release func(), err error) {
	if a == nil || a.ceiling <= 0 {
		return func() {}, nil
	}
	if budget > a.ceiling {
		return nil, &admissionError{tooBig: true, msg: fmt.Sprintf(
			"the program's max_memory_bytes %d (%s) is over the script memory of this replica, %d (%s): ask for a smaller budget",
			budget, human(uint64(budget)), a.ceiling, human(uint64(a.ceiling)))}
	}
	deadline := time.NewTimer(a.wait)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		if a.used+budget <= a.ceiling {
			a.used += budget
			a.running++
			a.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { a.release(budget) }) }, nil
		}
		changed, used, running := a.changed, a.used, a.running
		a.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			return nil, &admissionError{msg: fmt.Sprintf(
				"program: the script memory of this replica is full (%d scripts hold %s of %s; this one needs %s): waited %s, the workflow task is retried",
				running, human(uint64(used)), human(uint64(a.ceiling)), human(uint64(budget)), a.wait)}
		}
	}
}

func (a *Admission) release(budget int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.used -= budget
	a.running--
	close(a.changed)
	a.changed = make(chan struct{})
}
