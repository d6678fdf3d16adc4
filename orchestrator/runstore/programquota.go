package runstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// Program values (package program, valuestore.go) live in the run blob
// store, listed under the program's id as a run's blobs are. They are held
// like a run's data:
//
//   - Programs.Start (and, for a code-mode run's child, the run's
//     ReadProgramCall) calls HoldProgram: the program gets a record
//     (<id>.meta, kind "program", its principal) and a retention timer, so
//     the values stored under its id are counted against its principal's
//     byte quota (never against the runs) and the reaper frees them, with
//     its events, once the program has been closed for the retention.
//   - Before each tool call the program's activity calls CheckProgramValues:
//     a program whose owner is over the byte quota, or that would take the
//     blob store's reserve, fails with a limit error the script's owner can
//     read. Values are counted as they are stored and never refused there
//     (Temporal would retry the workflow task forever), so a program passes
//     its quota by at most what one step stores (a call's input and result).
//
// The reserve: program values never take the last eighth of the blob
// store's byte bound (ProgramReserveShare). Runs' inputs and results may,
// so a tenant filling the store with program values does not fail another
// tenant's StartRun.

// ProgramReserveShare is the share of the blob store kept for runs: program
// values are refused once the store holds more than all but 1/ProgramReserveShare of
// its byte bound.
const ProgramReserveShare = 8

// blobFillTTL is how long a process trusts the blob store's fill it read.
const blobFillTTL = time.Second

// blobFill is the blob store's fill as last read.
type blobFill struct {
	used, max int64
	read      time.Time
}

// StoreFullError is a write refused because the shared blob store is full
// (or, for program values, into its reserve for runs). Its message is the
// caller's to read: it names no NATS internals.
type StoreFullError struct {
	// Program is set when program values were refused from the reserve.
	Program bool
}

func (e *StoreFullError) Error() string {
	if e.Program {
		return "the shared store for program values is full; try later"
	}
	return "the shared run store is full; try later"
}

// Refused reports whether err is a refusal of the quota or the shared store
// ([*QuotaError], [*StoreFullError]), whose message is the caller's to read,
// not a failure to ask.
func Refused(err error) bool {
	var qe *QuotaError
	var sf *StoreFullError
	return errors.As(err, &qe) || errors.As(err, &sf)
}

// IsFull reports whether err is the shared store being full
// ([*StoreFullError]).
func IsFull(err error) bool {
	var sf *StoreFullError
	return errors.As(err, &sf)
}

// storeFull reports whether err is JetStream refusing a write because a
// stream is at its byte bound (err_code 10077 "maximum bytes exceeded") or
// the server out of storage (10047).
func storeFull(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == 10047 || api.ErrorCode == 10077 && strings.Contains(api.Description, "maximum")) {
		return true
	}
	return err != nil && strings.Contains(err.Error(), "maximum bytes exceeded")
}

// HoldProgram records program id as subject's: its values count against
// subject's byte quota, and are freed (with its events) once it has been
// closed for the retention. It refuses with a [*QuotaError] when subject's
// runs and programs already hold the quota's bytes, and with a
// [*StoreFullError] when the blob store has no room for program values
// outside the reserve. A repeat for the same program is harmless.
func (s *Store) HoldProgram(ctx context.Context, subject, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	recs := s.records(ctx)
	if recs == nil {
		return nil // no records bucket: no quota, the buckets' max age frees values
	}
	if err := recs.checkProgram(ctx, subject, id); err != nil {
		return err
	}
	if err := s.programRoom(ctx); err != nil {
		return err
	}
	meta, err := json.Marshal(programRecord{Spec: programSpec, Principal: toolcall.Principal{Subject: subject}, Kind: KindProgram})
	if err != nil {
		return fmt.Errorf("runstore: encode program record: %w", err)
	}
	if _, err := s.PutMeta(ctx, id, meta); err != nil {
		return err
	}
	return s.Arm(ctx, id)
}

// CheckProgramValues refuses further values of program id when its owner is
// over the byte quota ([*QuotaError]) or the blob store has no room for
// program values outside the reserve ([*StoreFullError]). A program without
// a record (started before programs were held) is checked against the
// reserve only. A code-mode run's child is held by ReadProgramCall before it
// starts (holdChild), as Programs.Start holds a top-level program.
func (s *Store) CheckProgramValues(ctx context.Context, id string) error {
	recs := s.records(ctx)
	if recs == nil {
		return nil
	}
	if o := s.holder(ctx, id); o.subject != "" && o.program {
		if err := recs.checkProgram(ctx, o.subject, id); err != nil {
			return err
		}
	}
	return s.programRoom(ctx)
}

// filled adds n bytes this process stored to the blob store's fill as last
// read, so the reserve holds between two reads against this process's own
// writes (a program may store many values within blobFillTTL).
func (s *Store) filled(n int64) {
	s.blobRoomMu.Lock()
	s.blobRoom.used += n
	s.blobRoomMu.Unlock()
}

// programRoom refuses program values once the blob store holds more than
// all but its reserve (ProgramReserveShare). The fill is read at most every
// blobFillTTL.
func (s *Store) programRoom(ctx context.Context) error {
	s.blobRoomMu.Lock()
	f := s.blobRoom
	s.blobRoomMu.Unlock()
	if time.Since(f.read) > blobFillTTL {
		if s.js == nil {
			return nil
		}
		st, err := s.js.Stream(ctx, "OBJ_"+s.blobName)
		if err != nil {
			return fmt.Errorf("runstore: blob store: %w", err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("runstore: blob store: %w", err)
		}
		f = blobFill{used: int64(info.State.Bytes), max: info.Config.MaxBytes, read: time.Now()}
		s.blobRoomMu.Lock()
		s.blobRoom = f
		s.blobRoomMu.Unlock()
	}
	if f.max > 0 && f.used > f.max-f.max/ProgramReserveShare {
		return &StoreFullError{Program: true}
	}
	return nil
}
