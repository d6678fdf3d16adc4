package program

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"google.golang.org/protobuf/proto"
)

// Program values by reference.
//
// A program's tool inputs and results, its input and its result pass through
// Temporal history. Temporal refuses a payload over 2 MB and ends a workflow
// whose history passes 50 MB, so a program of a few hundred 1 MiB calls could
// not finish. Values are therefore kept out of history by Temporal's external
// payload storage (converter.ExternalStorage): the SDK hands a payload larger
// than Config.InlineBytes to the driver below, which stores it in the
// orchestrator's blob store (the run blobs of agent runs: a NATS object store)
// and puts a claim in history — the blob's name, the payload's size and its
// SHA-256. Reading history (a replay, a client reading the result) resolves
// the claim before the payload reaches the workflow, so the script sees the
// full value and the workflow code does no I/O. The same Temporal client
// configuration is needed wherever program payloads are read: the worker, the
// replayer and the ProgramService's client ([ExternalStorage]).
//
// Only payloads of program workflows that carry content are stored this way
// (JSON objects: the program's input and output, tool requests and results,
// events, query answers); memo fields (owner, spec hash) stay inline.

// Value storage settings.
const (
	// DefaultInlineBytes is the largest program payload kept in history.
	DefaultInlineBytes = 4 << 10
	// MaxStoredPayloadBytes bounds one stored payload: the program's own
	// limits keep values far below it (max_value_bytes, max_result_bytes,
	// the source), so only a bug of the platform reaches it.
	MaxStoredPayloadBytes = 16 << 20
	// StorageDriverName names the driver in history claims: it must never
	// change, or recorded claims cannot be read.
	StorageDriverName = "toolfleet-program-values"
	// storageTimeout bounds one store or read of a value.
	storageTimeout = 30 * time.Second
	// envelopeMagic starts every stored value.
	envelopeMagic = "toolfleet-program-value/1\n"
)

// Config is the operator's configuration of programs.
type Config struct {
	// InlineBytes is the largest program payload kept whole in history;
	// larger ones go by reference. 0 means DefaultInlineBytes.
	InlineBytes int
	// NoContentInHistory keeps every content byte of programs out of
	// history: every payload that carries content goes by reference, and a
	// failed program's error message in history names its kind and limit
	// only (the full error is in its details, by reference). The orchestrator
	// sets it from runner.Config.HistoryContent == "none"; a program started
	// with it carries it in its Input, so it is decided once, at start.
	NoContentInHistory bool
	// ScriptMemory is the replica's script memory: the most the memory
	// budgets of the programs it runs at once may add up to (admission.go).
	// 0: ScriptMemoryFor() (three quarters of GOMEMLIMIT, else 4 GiB);
	// negative: no ceiling. The orchestrator applies it with SetAdmission,
	// and Programs.Start refuses a budget over it.
	ScriptMemory int64
	// AdmissionWait is how long a script waits for room in ScriptMemory
	// inside its workflow task before the task is retried; 0:
	// DefaultAdmissionWait.
	AdmissionWait time.Duration
}

// ScriptMemoryCeiling is c.ScriptMemory with its default applied (0: no
// ceiling).
func (c Config) ScriptMemoryCeiling() int64 {
	switch {
	case c.ScriptMemory < 0:
		return 0
	case c.ScriptMemory == 0:
		return ScriptMemoryFor()
	}
	return c.ScriptMemory
}

// Admission is the admission c configures, for SetAdmission.
func (c Config) Admission() *Admission { return NewAdmission(c.ScriptMemoryCeiling(), c.AdmissionWait) }

func (c Config) inline() int {
	if c.InlineBytes <= 0 {
		return DefaultInlineBytes
	}
	return c.InlineBytes
}

// Blobs keeps the bytes of program values. The orchestrator's run blob store
// (runstore.Store: PutBlob names a blob by the SHA-256 of its bytes) implements
// it: programs and agent runs share one store, its byte bound and retention.
type Blobs interface {
	// PutBlob stores data as a blob listed under owner (the program's
	// workflow id: the blob store frees a run's blobs by it).
	PutBlob(ctx context.Context, owner string, data []byte) (string, error)
	Blob(ctx context.Context, ref string) ([]byte, error)
}

// ErrValueStore is returned while no blob store is bound ([LateBlobs]).
var ErrValueStore = errors.New("program: the value store is not ready")

// LateBlobs is a [Blobs] bound after the Temporal client is made (a process
// that connects to NATS after Temporal); until Set it fails with
// ErrValueStore, which the SDK retries.
type LateBlobs struct{ b atomic.Pointer[Blobs] }

// Set binds the store.
func (l *LateBlobs) Set(b Blobs) { l.b.Store(&b) }

func (l *LateBlobs) get() (Blobs, error) {
	b := l.b.Load()
	if b == nil {
		return nil, ErrValueStore
	}
	return *b, nil
}

// PutBlob implements Blobs.
func (l *LateBlobs) PutBlob(ctx context.Context, owner string, data []byte) (string, error) {
	b, err := l.get()
	if err != nil {
		return "", err
	}
	return b.PutBlob(ctx, owner, data)
}

// Blob implements Blobs.
func (l *LateBlobs) Blob(ctx context.Context, ref string) ([]byte, error) {
	b, err := l.get()
	if err != nil {
		return nil, err
	}
	return b.Blob(ctx, ref)
}

// ExternalStorage is the Temporal client option (client.Options.ExternalStorage,
// and worker.WorkflowReplayerOptions.ExternalStorage) that keeps program values
// out of history in blobs. Every client that starts, runs, replays or reads
// programs needs it; payloads of other workflows are left inline.
func ExternalStorage(blobs Blobs, cfg Config) converter.ExternalStorage {
	d := &valueDriver{blobs: blobs, cfg: cfg}
	// Threshold 1: every payload is offered to the selector, which keeps
	// what is not a program's content inline.
	return converter.ExternalStorage{Drivers: []converter.StorageDriver{d}, DriverSelector: d, PayloadSizeThreshold: 1}
}

// valueDriver stores program payloads as blobs (converter.StorageDriver) and
// chooses which payloads go there (converter.StorageDriverSelector).
type valueDriver struct {
	blobs Blobs
	cfg   Config
}

func (d *valueDriver) Name() string { return StorageDriverName }
func (d *valueDriver) Type() string { return "toolfleet-blobs" }

// SelectDriver stores a payload of a program workflow that carries content
// when it is over the inline size, or always with NoContentInHistory.
func (d *valueDriver) SelectDriver(ctx converter.StorageDriverSelectContext, p *commonpb.Payload) (converter.StorageDriver, error) {
	t, ok := ctx.Target.(converter.StorageDriverWorkflowInfo)
	if !ok || t.WorkflowType != WorkflowName || !carriesContent(p) {
		return nil, nil
	}
	if d.cfg.NoContentInHistory || proto.Size(p) > d.cfg.inline() {
		return d, nil
	}
	return nil, nil
}

// carriesContent reports whether p is a JSON object: the program's own types
// (input, output, requests, results, events, state). Memo fields are strings
// and lists; references are protobuf JSON with their own encoding.
func carriesContent(p *commonpb.Payload) bool {
	if string(p.GetMetadata()[converter.MetadataEncoding]) != converter.MetadataEncodingJSON {
		return false
	}
	data := bytes.TrimLeft(p.GetData(), " \t\r\n")
	return len(data) > 0 && data[0] == '{'
}

// Claim data keys.
const (
	claimRef      = "ref"
	claimSize     = "size"
	claimSHA256   = "sha256"
	claimWorkflow = "workflow"
)

// Store keeps each payload in a blob of its own: an envelope naming the
// workflow, a random nonce and the payload. The nonce makes the blob's name
// (the SHA-256 of the envelope) impossible to derive from the value, so no
// one can find or probe another program's values by guessing them, and equal
// values of two programs are two blobs.
func (d *valueDriver) Store(ctx converter.StorageDriverStoreContext, payloads []*commonpb.Payload) ([]converter.StorageDriverClaim, error) {
	wf := ""
	if t, ok := ctx.Target.(converter.StorageDriverWorkflowInfo); ok {
		wf = t.WorkflowID
	}
	claims := make([]converter.StorageDriverClaim, len(payloads))
	for i, p := range payloads {
		err := ctx.GetLimiter().Permit(ctx.Context, p, func() error {
			c, err := d.store(ctx.Context, wf, p)
			claims[i] = c
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return claims, nil
}

func (d *valueDriver) store(ctx context.Context, wf string, p *commonpb.Payload) (converter.StorageDriverClaim, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		return converter.StorageDriverClaim{}, fmt.Errorf("program: encode a value: %w", err)
	}
	if len(b) > MaxStoredPayloadBytes {
		return converter.StorageDriverClaim{}, fmt.Errorf("program: a value of %d bytes is over the %d-byte ceiling", len(b), MaxStoredPayloadBytes)
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	env := make([]byte, 0, len(envelopeMagic)+len(wf)+34+len(b))
	env = append(env, envelopeMagic...)
	env = append(env, wf...)
	env = append(env, '\n')
	env = hex.AppendEncode(env, nonce[:])
	env = append(env, '\n')
	env = append(env, b...)
	ctx, cancel := context.WithTimeout(ctx, storageTimeout)
	defer cancel()
	ref, err := d.blobs.PutBlob(ctx, blobOwner(wf), env)
	if err != nil {
		return converter.StorageDriverClaim{}, fmt.Errorf("program: store a value: %w", err)
	}
	sum := sha256.Sum256(b)
	return converter.StorageDriverClaim{ClaimData: map[string]string{
		claimRef: ref, claimSize: strconv.Itoa(len(b)), claimSHA256: hex.EncodeToString(sum[:]), claimWorkflow: wf,
	}}, nil
}

// Retrieve reads the payloads of claims, checking that each blob holds a
// value of the claim's workflow with the claim's size and hash.
func (d *valueDriver) Retrieve(ctx converter.StorageDriverRetrieveContext, claims []converter.StorageDriverClaim) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(claims))
	for i, c := range claims {
		err := ctx.GetLimiter().Permit(ctx.Context, c, func() error {
			p, err := d.retrieve(ctx.Context, c.ClaimData)
			out[i] = p
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ErrBadValue means a stored value does not match its claim.
var ErrBadValue = errors.New("program: a stored value does not match its reference")

func (d *valueDriver) retrieve(ctx context.Context, claim map[string]string) (*commonpb.Payload, error) {
	ref, wf := claim[claimRef], claim[claimWorkflow]
	size, err := strconv.Atoi(claim[claimSize])
	if ref == "" || err != nil || size < 0 || size > MaxStoredPayloadBytes {
		return nil, fmt.Errorf("%w: malformed claim", ErrBadValue)
	}
	ctx, cancel := context.WithTimeout(ctx, storageTimeout)
	defer cancel()
	env, err := d.blobs.Blob(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("program: read value %s: %w", ref, err)
	}
	b, ok := openEnvelope(env, wf)
	if !ok || len(b) != size {
		return nil, fmt.Errorf("%w: %s is not a value of %s", ErrBadValue, ref, wf)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != claim[claimSHA256] {
		return nil, fmt.Errorf("%w: %s: hash differs", ErrBadValue, ref)
	}
	p := &commonpb.Payload{}
	if err := proto.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadValue, ref, err)
	}
	return p, nil
}

// openEnvelope returns the payload bytes of env when it is a value of
// workflow wf.
func openEnvelope(env []byte, wf string) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(env, []byte(envelopeMagic))
	if !ok {
		return nil, false
	}
	owner, rest, ok := bytes.Cut(rest, []byte{'\n'})
	if !ok || string(owner) != wf {
		return nil, false
	}
	_, b, ok := bytes.Cut(rest, []byte{'\n'}) // the nonce
	return b, ok
}

// blobOwner lists a value under its workflow when the workflow id is one the
// blob store takes as an owner, and under "programs" otherwise (such values
// expire with the bucket's max age).
func blobOwner(wf string) string {
	if ids.Valid(wf) == nil {
		return wf
	}
	return "programs"
}
