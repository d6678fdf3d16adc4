// Package journal is the call journal: the facts a gateway and a worker
// record about a call with a caller's call_id, so that any gateway replica
// can tell whether the call ran — never started (run it), finished (here is
// its answer), or started by a worker that went away (it may have run) —
// without guessing from a timeout (docs/gateway.md, "Exactly once").
//
// The journal lives in the gateway's idempotency bucket, a NATS KV bucket:
// one entry per (principal, tool, call_id), under "<Toolkit>.<hash>" so that
// a worker's NATS permissions can be limited to its own toolkits. Every
// value is a record: one kind byte, the 32-byte SHA-256 digest of the call's
// input, and a payload.
//
//	L  lock      the gateway took the call; payload: one flags byte
//	S  started   a worker claimed it and runs the tool; payload: worker id
//	F  finished  the worker's answer; payload: toolfleet.v1.WorkerCallOutcome
//	R  result    the gateway's response; payload: toolfleet.v1.CallToolResponse
//	T  too large it finished, but its answer was too large to keep
//	U  unknown   it may have run, and nobody can tell; payload: [Reason]
//
// Every change is a compare-and-set on the entry's revision (a JetStream
// publish with Nats-Expected-Last-Subject-Sequence), which makes the record a
// fence: the gateway sends the worker a [Claim] naming the lock's revision,
// and the worker writes S only if the entry is still at that revision. A
// request that arrives after its gateway was replaced (a retry took the call
// over) or after the gateway gave up on it (it moved the call to another
// replica) finds the entry moved and is refused without running.
//
// While it runs the tool, the worker rewrites S every [HeartbeatInterval]; a
// retry that sees no change for [HolderGoneAfter] knows the worker is gone.
// The same protocol is spoken by any worker that announces call_journal (the
// Python example worker does); docs/gateway.md describes it byte by byte.
package journal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Metadata and trailer keys of the protocol.
const (
	// ClaimKey is the request metadata with which a gateway hands a worker a
	// call's claim: "<subject> <revision> <digest hex>" ([Claim.String]).
	ClaimKey = "toolfleet-claim"
	// NotStartedTrailer is the trailer a worker sets when it refused a claimed
	// call without running the tool: [ClaimLost] or [JournalUnavailable].
	NotStartedTrailer = "toolfleet-not-started"
	// FinishedTrailer is the trailer a worker sets when it recorded a claimed
	// call as finished: the F record's revision in decimal.
	FinishedTrailer = "toolfleet-journal-rev"
)

// Values of [NotStartedTrailer].
const (
	// ClaimLost: the entry had moved past the claim's revision (a retry took
	// the call over, or the gateway withdrew it): this request must not run.
	ClaimLost = "claim-lost"
	// JournalUnavailable: the worker could not record the start (NATS did not
	// answer), so it did not run the tool.
	JournalUnavailable = "journal-unavailable"
)

// Timing of the protocol. A worker rewrites its S record every
// HeartbeatInterval while the tool runs; a record that has not changed for
// HolderGoneAfter belongs to a holder that went away.
const (
	HeartbeatInterval = 2 * time.Second
	HolderGoneAfter   = 5 * HeartbeatInterval
)

// ProbeSubjectPrefix starts the core NATS subject on which a worker process
// answers "still running" for the calls it started: a started record's
// payload is "<worker id>\x00<probe token>", and a request to
// ProbeSubjectPrefix + token that NATS answers with "no responders" means the
// process (or its NATS connection) is gone, so a retry need not wait
// HolderGoneAfter for the heartbeat to stop. A record without a token (an
// older or simpler worker) is judged by its heartbeat alone.
const ProbeSubjectPrefix = "toolfleet.journal.alive."

// StartedPayload is the payload of a started record.
func StartedPayload(workerID, probeToken string) []byte {
	if probeToken == "" {
		return []byte(workerID)
	}
	return []byte(workerID + "\x00" + probeToken)
}

// ProbeSubject is the probe subject named in a started record's payload, or
// "" when it names none.
func ProbeSubject(startedPayload []byte) string {
	_, token, ok := strings.Cut(string(startedPayload), "\x00")
	if !ok || token == "" || strings.ContainsAny(token, ".*> \t\r\n") {
		return ""
	}
	return ProbeSubjectPrefix + token
}

// Kind is a record's first byte.
type Kind byte

// Record kinds (see the package doc).
const (
	KindLock     Kind = 'L'
	KindStarted  Kind = 'S'
	KindFinished Kind = 'F'
	KindResult   Kind = 'R'
	KindTooLarge Kind = 'T'
	KindUnknown  Kind = 'U'
)

// Flags of a lock record's payload.
const (
	// LockUnjournaled: the call may be sent to a replica that keeps no journal,
	// so a lock left by a gateway that went away may hide a call that ran.
	LockUnjournaled byte = 1 << 0
)

// Reason is the payload of an unknown (U) record: what was known when the
// outcome was declared unknown.
type Reason byte

// Reasons of an unknown record.
const (
	// ReasonStarted: a worker had recorded the start, then stopped answering.
	ReasonStarted Reason = 'S'
	// ReasonUnjournaled: the call went to a replica without a journal, and
	// its gateway or worker stopped answering mid-call.
	ReasonUnjournaled Reason = 'L'
	// ReasonCut: the worker answered that the call was cancelled or ran out of
	// time while the tool ran.
	ReasonCut Reason = 'C'
)

// Digest is the SHA-256 of a call's canonical input.
type Digest [sha256.Size]byte

// HeaderLen is the kind byte plus the digest.
const HeaderLen = 1 + sha256.Size

// Encode returns a record's value.
func Encode(kind Kind, d Digest, payload []byte) []byte {
	b := make([]byte, 0, HeaderLen+len(payload))
	return append(append(append(b, byte(kind)), d[:]...), payload...)
}

// Record is one decoded value.
type Record struct {
	Kind   Kind
	Digest Digest
	// HasDigest is false for a lock written by a gateway before the journal
	// (an empty value).
	HasDigest bool
	Payload   []byte
}

// ErrBadRecord is a value that is no record.
var ErrBadRecord = errors.New("journal: unreadable record")

// Decode reads a value. The payload aliases b.
func Decode(b []byte) (Record, error) {
	if len(b) == 0 {
		return Record{Kind: KindLock}, nil // an older gateway's lock
	}
	if len(b) < HeaderLen {
		return Record{}, ErrBadRecord
	}
	r := Record{Kind: Kind(b[0]), HasDigest: true, Payload: b[HeaderLen:]}
	copy(r.Digest[:], b[1:HeaderLen])
	switch r.Kind {
	case KindLock, KindStarted, KindFinished, KindResult, KindTooLarge, KindUnknown:
		return r, nil
	}
	return Record{}, ErrBadRecord
}

// Claim is what a worker needs to record a call: the entry's subject
// ("$KV.<bucket>.<key>"), the revision the gateway's lock is at, and the
// input's digest.
type Claim struct {
	Subject  string
	Revision uint64
	Digest   Digest
}

// String is the claim as [ClaimKey] carries it.
func (c Claim) String() string {
	return c.Subject + " " + strconv.FormatUint(c.Revision, 10) + " " + hex.EncodeToString(c.Digest[:])
}

// ErrBadClaim is a claim header that cannot be read.
var ErrBadClaim = errors.New("journal: malformed claim")

// ParseClaim reads a [ClaimKey] value.
func ParseClaim(s string) (Claim, error) {
	parts := strings.Split(s, " ")
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "$KV.") || strings.ContainsAny(parts[0], "*> \t\r\n") {
		return Claim{}, ErrBadClaim
	}
	rev, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil || rev == 0 {
		return Claim{}, ErrBadClaim
	}
	d, err := hex.DecodeString(parts[2])
	if err != nil || len(d) != sha256.Size {
		return Claim{}, ErrBadClaim
	}
	c := Claim{Subject: parts[0], Revision: rev}
	copy(c.Digest[:], d)
	return c, nil
}

// Errors of [Write].
var (
	// ErrMoved: the entry is no longer at the expected revision (or, when a
	// new entry was expected, it exists).
	ErrMoved = errors.New("journal: the entry moved past the expected revision")
	// ErrFull: the bucket is full and refuses new values.
	ErrFull = errors.New("journal: the bucket is full")
	// ErrTooLarge: the value is over the bucket's largest value.
	ErrTooLarge = errors.New("journal: the value is over the bucket's limit")
)

// wrongLastSequence is JetStream's error code for a failed expectation of
// the last sequence of a subject.
const wrongLastSequence = 10071

// JetStream's error codes for a store that refused a message: its limits
// ("maximum bytes exceeded" and the like, in the description), the server's
// storage, a message over the stream's largest.
const (
	storeFailed        = 10077
	storageExhausted   = 10047
	messageOverMaximum = 10054
)

// Write stores value at subject if the entry is at revision expect (0: the
// entry must not exist), and returns the new revision. ctx bounds the wait
// for JetStream's acknowledgement; without a deadline, 5 s.
//
// Errors: [ErrMoved], [ErrFull], [ErrTooLarge], a request error (no answer: the write may
// or may not have happened), or another JetStream refusal.
func Write(ctx context.Context, nc *nats.Conn, subject string, value []byte, expect uint64) (uint64, error) {
	return Send(ctx, nc, &nats.Msg{Subject: subject, Data: value, Header: nats.Header{
		"Nats-Expected-Last-Subject-Sequence": []string{strconv.FormatUint(expect, 10)},
	}})
}

// Send publishes msg to JetStream and returns the stored message's sequence
// (the entry's new revision), like [Write] for a message the caller built
// (a delete marker, a write over any revision). Errors as [Write]'s.
func Send(ctx context.Context, nc *nats.Conn, msg *nats.Msg) (uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	reply, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("journal: write %s: %w", msg.Subject, err)
	}
	return ParseAck(reply.Data)
}

// ParseAck reads JetStream's answer to a publish: the stored message's
// sequence (the entry's new revision), or the refusal as an error.
func ParseAck(b []byte) (uint64, error) {
	var ack struct {
		Seq   uint64 `json:"seq"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &ack); err != nil {
		return 0, fmt.Errorf("journal: unreadable acknowledgement %q: %w", b, err)
	}
	switch {
	case ack.Error == nil && ack.Seq > 0:
		return ack.Seq, nil
	case ack.Error == nil:
		return 0, fmt.Errorf("journal: acknowledgement without a sequence: %q", b)
	case ack.Error.ErrCode == wrongLastSequence:
		return 0, fmt.Errorf("%w: %s", ErrMoved, ack.Error.Description)
	case ack.Error.ErrCode == storageExhausted,
		ack.Error.ErrCode == storeFailed && strings.Contains(ack.Error.Description, "maximum"):
		return 0, fmt.Errorf("%w: %s", ErrFull, ack.Error.Description)
	case ack.Error.ErrCode == messageOverMaximum:
		return 0, fmt.Errorf("%w: %s", ErrTooLarge, ack.Error.Description)
	}
	return 0, fmt.Errorf("journal: JetStream refused the write: %s (%d)", ack.Error.Description, ack.Error.ErrCode)
}
