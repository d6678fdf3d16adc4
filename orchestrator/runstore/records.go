package runstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// Run records live in one KV bucket (jsassets.RunRecords, "toolfleet_runs")
// whose max age is the run retention:
//
//   - reap.<run_id>: a timer (a key with a TTL). When it expires the server
//     leaves a marker that one orchestrator's [Reaper] receives; it frees the
//     run's data if the run has been closed for the retention, or sets the
//     timer again.
//   - quota.<hash of the principal>: what the principal's runs and
//     programs hold, one entry per run or program (bytes in the stores,
//     bytes of run events, and when the entry lapses). Updated with
//     compare-and-set, so every replica (and the gateway) counts the same.
//   - settings: the [Settings] the orchestrator was configured with (quota,
//     history content); it never expires, so a gateway that only binds the
//     buckets starts runs the same way.
const (
	DefaultRecordsBucket = "toolfleet_runs"
	reapPrefix           = "reap."
	quotaPrefix          = "quota."
	settingsKey          = "settings"
	// entryHold is how long past the retention a run's quota entry lasts
	// without a write: an entry whose run was never freed (its timer lost)
	// lapses then, so a leaked count repairs itself.
	entryHold = 7 * 24 * time.Hour
	// maxQuotaTries bounds the compare-and-set attempts of one update.
	maxQuotaTries = 16
	// markerTTL is how long the server keeps the marker an expired timer
	// leaves (the reaper's consumer is durable: an orchestrator down for less
	// than this still frees the runs whose timers expired meanwhile).
	markerTTL = 24 * time.Hour
	// settingsTTL is how long a process trusts the quota settings it read.
	settingsTTL = 5 * time.Second
)

// Defaults of the quota.
const (
	// DefaultMaxRuns is how many runs one principal may hold (started and not
	// yet freed).
	DefaultMaxRuns = 1000
	// MaxMaxRuns bounds MaxRuns: one principal's record holds an entry per run.
	MaxMaxRuns = 10000
	// DefaultQuotaShare is the share of the transcript and blob buckets' byte
	// bounds one principal may hold by default (an eighth).
	DefaultQuotaShare = 8
)

// Quota bounds what one principal's runs may hold in the run stores. The
// orchestrator writes it into the records bucket; every process that starts
// runs (the orchestrator, the gateway's AgentService) enforces it.
type Quota struct {
	// MaxBytes bounds the bytes of transcripts, inputs and blobs that one
	// principal's runs hold; 0 means no bound.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// MaxRuns bounds the runs one principal holds: running ones and closed
	// ones whose data is not freed yet; 0 means no bound.
	MaxRuns int `json:"max_runs,omitempty"`
	// Retention is how long a closed run's data is kept (the max age of the
	// records bucket); set by the orchestrator, shown in refusals.
	Retention time.Duration `json:"retention,omitempty"`
	// MaxEventBytes bounds the bytes of run events (TOOLFLEET_RUN_EVENTS)
	// that one principal's runs and programs hold; 0 means no bound. The
	// event stream drops its oldest events when full, so this bound keeps
	// one principal from evicting another's events.
	MaxEventBytes int64 `json:"max_event_bytes,omitempty"`
	// Hold overrides entryHold (tests).
	Hold time.Duration `json:"hold,omitempty"`
}

// Settings are what the orchestrator decides for every process that starts
// runs (its own Runs, the gateway's AgentService, triggers).
type Settings struct {
	Quota Quota `json:"quota"`
	// HistoryContent is what new runs keep of their content in history
	// (HistoryContentPreviews or HistoryContentNone).
	HistoryContent string `json:"history_content,omitempty"`
}

// ErrQuotaExceeded is wrapped by a [*QuotaError].
var ErrQuotaExceeded = errors.New("runstore: quota exceeded")

// QuotaError is a start or message refused because the principal's runs
// hold too much.
type QuotaError struct {
	// Held and Runs are what the principal's runs hold; Want the bytes asked for.
	Held  int64
	Runs  int
	Want  int64
	Quota Quota
	// Program is set for a program refused because its owner's runs and
	// programs hold the quota's bytes (program values count against it).
	Program bool
	// Programs, when set, is the number of programs whose values the
	// principal holds: the most one principal may (MaxMaxRuns).
	Programs int
	// Events, when set, is the bytes of run events the principal's runs
	// and programs hold: the refusal is for Quota.MaxEventBytes.
	Events int64
}

func (e *QuotaError) Error() string {
	if e.Events > 0 {
		after := "after each run or program ends"
		if e.Quota.Retention > 0 {
			after = e.Quota.Retention.String() + " after each run or program ends"
		}
		return fmt.Sprintf("quota exceeded: the events of your runs and programs hold %d of the %d bytes one principal may keep. "+
			"Events are freed %s: wait (cancel runs and programs you no longer need), or ask the operator for a larger quota",
			e.Events, e.Quota.MaxEventBytes, after)
	}
	if e.Program {
		after := "after it ends"
		if e.Quota.Retention > 0 {
			after = e.Quota.Retention.String() + " after it ends"
		}
		if e.Programs > 0 {
			return fmt.Sprintf("the program's owner holds the values of %d programs, the most one principal may. "+
				"A program's values are freed %s: wait, or cancel programs you no longer need", e.Programs, after)
		}
		return fmt.Sprintf("the program's values are over its owner's storage quota (%d of %d bytes held by your runs and programs). "+
			"A program's values are freed %s: wait (cancel programs and runs you no longer need), or ask the operator for a larger quota",
			e.Held, e.Quota.MaxBytes, after)
	}
	bound := fmt.Sprintf("%d runs", e.Quota.MaxRuns)
	if e.Quota.MaxBytes > 0 && (e.Quota.MaxRuns == 0 || e.Runs < e.Quota.MaxRuns) {
		bound = jsassets.FormatBytes(e.Quota.MaxBytes) + " (" + fmt.Sprint(e.Quota.MaxBytes) + " bytes)"
	}
	after := "after the runs close"
	if e.Quota.Retention > 0 {
		after = e.Quota.Retention.String() + " after each run closes"
	}
	return fmt.Sprintf("quota exceeded: your runs hold %d bytes in %d runs and this needs %d more; the quota is %s. "+
		"A run's data is freed %s: wait (cancel runs you no longer need, so that their time starts), "+
		"or ask the operator for a larger quota",
		e.Held, e.Runs, e.Want, bound, after)
}

// Unwrap makes errors.Is(err, ErrQuotaExceeded) true.
func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// usage is one principal's record.
type usage struct {
	Runs map[string]*runUsage `json:"runs"`
}

type runUsage struct {
	Bytes int64 `json:"b"`
	// Program marks a program's entry: its values count against the
	// bytes, never against the runs.
	Program bool `json:"p,omitempty"`
	// Events is the bytes of the run events it published.
	Events int64 `json:"v,omitempty"`
	// Exp is when the entry lapses (Unix seconds) unless written again.
	Exp int64 `json:"e"`
}

func (u *usage) total() int64 {
	var n int64
	for _, e := range u.Runs {
		n += e.Bytes
	}
	return n
}

// events is the bytes of run events the record holds.
func (u *usage) events() int64 {
	var n int64
	for _, e := range u.Runs {
		n += e.Events
	}
	return n
}

// overEvents is the refusal of a principal whose events hold q's bound.
func (u *usage) overEvents(q Quota, program bool) error {
	if ev := u.events(); q.MaxEventBytes > 0 && ev >= q.MaxEventBytes {
		return &QuotaError{Held: u.total(), Runs: u.runs(), Quota: q, Program: program, Events: ev}
	}
	return nil
}

// runs is the number of runs (not programs) the record holds.
func (u *usage) runs() int {
	n := 0
	for _, e := range u.Runs {
		if !e.Program {
			n++
		}
	}
	return n
}

func (u *usage) prune(now time.Time) {
	for id, e := range u.Runs {
		if e.Exp <= now.Unix() {
			delete(u.Runs, id)
		}
	}
}

// records is the records bucket of a [Store].
type records struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	bucket string

	mu       sync.Mutex
	settings Settings
	read     time.Time
}

// openRecords creates or updates the records bucket with assets' settings
// (its max age is the retention; the keys that must not age are written
// with a TTL of "never").
func openRecords(ctx context.Context, js jetstream.JetStream, bucket string, s jsassets.Settings) (*records, error) {
	kv, err := jsassets.EnsureKeyValue(ctx, js, s.KeyValue(jetstream.KeyValueConfig{
		Bucket:         bucket,
		Description:    "toolfleet run records: reap timers (reap.<run_id>), per-principal quota (quota.<hash>), settings",
		LimitMarkerTTL: markerTTL,
	}))
	if err != nil {
		return nil, fmt.Errorf("runstore: run records bucket: %w", err)
	}
	return &records{kv: kv, js: js, bucket: bucket}, nil
}

// writeSettings stores set where every process reads it, never to expire.
func (r *records) writeSettings(ctx context.Context, set Settings) error {
	b, err := json.Marshal(set)
	if err != nil {
		return fmt.Errorf("runstore: encode settings: %w", err)
	}
	msg := nats.NewMsg("$KV." + r.bucket + "." + settingsKey)
	msg.Data = b
	msg.Header.Set(jetstream.MsgTTLHeader, "never")
	if _, err := r.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("runstore: store settings: %w", err)
	}
	r.mu.Lock()
	r.settings, r.read = set, time.Now()
	r.mu.Unlock()
	return nil
}

// current returns the settings, read again every few seconds.
func (r *records) current(ctx context.Context) (Settings, error) {
	r.mu.Lock()
	set, fresh := r.settings, time.Since(r.read) < settingsTTL
	r.mu.Unlock()
	if fresh {
		return set, nil
	}
	set = Settings{}
	e, err := r.kv.Get(ctx, settingsKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return Settings{}, fmt.Errorf("runstore: read settings: %w", err)
	default:
		if err := json.Unmarshal(e.Value(), &set); err != nil {
			return Settings{}, fmt.Errorf("runstore: decode settings: %w", err)
		}
	}
	r.mu.Lock()
	r.settings, r.read = set, time.Now()
	r.mu.Unlock()
	return set, nil
}

// quota returns the quota of the settings.
func (r *records) quota(ctx context.Context) (Quota, error) {
	set, err := r.current(ctx)
	return set.Quota, err
}

// quotaKey is the key of subject's record: a hash, so any subject makes a
// valid key and the bucket does not list who uses the fleet.
func quotaKey(subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return quotaPrefix + hex.EncodeToString(sum[:16])
}

// update applies f to subject's record with compare-and-set, retrying a
// bounded number of times when another process wrote it meanwhile. Expired
// entries are dropped first.
func (r *records) update(ctx context.Context, subject string, f func(u *usage, now time.Time) error) error {
	key := quotaKey(subject)
	for try := 0; try < maxQuotaTries; try++ {
		u := usage{Runs: map[string]*runUsage{}}
		var rev uint64
		e, err := r.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("runstore: read quota: %w", err)
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &u); err != nil || u.Runs == nil {
				u = usage{Runs: map[string]*runUsage{}} // a damaged record starts again
			}
		}
		now := time.Now()
		u.prune(now)
		if err := f(&u, now); err != nil {
			return err
		}
		b, err := json.Marshal(u)
		if err != nil {
			return fmt.Errorf("runstore: encode quota: %w", err)
		}
		if rev == 0 {
			_, err = r.kv.Create(ctx, key, b)
		} else {
			_, err = r.kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("runstore: write quota: %w", err)
		}
		t := time.NewTimer(time.Duration(1+rand.IntN(10*(try+1))) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("runstore: write quota: %w", ctx.Err())
		case <-t.C:
		}
	}
	return errors.New("runstore: quota record busy; try again")
}

// expiry is when an entry written now lapses.
func expiry(q Quota, now time.Time) int64 {
	hold := entryHold
	if q.Hold > 0 {
		hold = q.Hold
	}
	return now.Add(q.Retention + hold).Unix()
}

// admit counts n more bytes for run runID of subject, or refuses with a
// [*QuotaError] when the principal would hold more runs or bytes than the
// quota allows. It is the check before anything is stored.
func (r *records) admit(ctx context.Context, subject, runID string, n int64) error {
	q, err := r.quota(ctx)
	if err != nil {
		return err
	}
	return r.update(ctx, subject, func(u *usage, now time.Time) error {
		e := u.Runs[runID]
		if e == nil {
			if q.MaxRuns > 0 && u.runs() >= q.MaxRuns {
				return &QuotaError{Held: u.total(), Runs: u.runs(), Want: n, Quota: q}
			}
			e = &runUsage{}
		}
		if held := u.total(); q.MaxBytes > 0 && held+n > q.MaxBytes {
			return &QuotaError{Held: held, Runs: u.runs(), Want: n, Quota: q}
		}
		if err := u.overEvents(q, false); err != nil {
			return err
		}
		e.Bytes += n
		e.Exp = expiry(q, now)
		u.Runs[runID] = e
		return nil
	})
}

// counter is what a charge counts: bytes a run or program stored, or bytes
// of the events it published (each under its own bound).
type counter int

const (
	countStored counter = iota
	countEvents
)

// charge counts n bytes of kind c for run or program runID; it never
// refuses (the run goes on; the principal's next start is refused if it is
// over). Without the bound of c nothing is counted (no round trips).
func (r *records) charge(ctx context.Context, subject, runID string, n int64, program bool, c counter) error {
	q, err := r.quota(ctx)
	if err != nil || c == countStored && q.MaxBytes == 0 || c == countEvents && q.MaxEventBytes == 0 {
		return err
	}
	return r.update(ctx, subject, func(u *usage, now time.Time) error {
		e := u.Runs[runID]
		if e == nil {
			e = &runUsage{Program: program}
			u.Runs[runID] = e
		}
		if c == countEvents {
			e.Events += n
		} else {
			e.Bytes += n
		}
		e.Exp = expiry(q, now)
		return nil
	})
}

// checkProgram refuses program id of subject with a [*QuotaError] when
// subject's runs and programs already hold the quota's bytes, or hold
// values of as many programs as one record may list (MaxMaxRuns). It counts
// nothing: a program's values are counted as they are stored.
func (r *records) checkProgram(ctx context.Context, subject, id string) error {
	q, err := r.quota(ctx)
	if err != nil || q.MaxBytes == 0 && q.MaxEventBytes == 0 {
		return err
	}
	e, err := r.kv.Get(ctx, quotaKey(subject))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("runstore: read quota: %w", err)
	}
	var u usage
	if json.Unmarshal(e.Value(), &u) != nil {
		return nil // a damaged record starts again on its next write
	}
	u.prune(time.Now())
	if err := u.overEvents(q, true); err != nil {
		return err
	}
	if q.MaxBytes == 0 {
		return nil
	}
	held := u.total()
	if held >= q.MaxBytes {
		return &QuotaError{Held: held, Runs: u.runs(), Quota: q, Program: true}
	}
	if _, listed := u.Runs[id]; !listed && len(u.Runs)-u.runs() >= MaxMaxRuns {
		return &QuotaError{Held: held, Runs: u.runs(), Quota: q, Program: true, Programs: len(u.Runs) - u.runs()}
	}
	return nil
}

// release drops run runID from subject's record (its data was freed).
func (r *records) release(ctx context.Context, subject, runID string) error {
	return r.update(ctx, subject, func(u *usage, _ time.Time) error {
		delete(u.Runs, runID)
		return nil
	})
}

// held returns what subject's runs hold: bytes and runs.
func (r *records) held(ctx context.Context, subject string) (int64, int, error) {
	e, err := r.kv.Get(ctx, quotaKey(subject))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("runstore: read quota: %w", err)
	}
	var u usage
	if err := json.Unmarshal(e.Value(), &u); err != nil {
		return 0, 0, fmt.Errorf("runstore: decode quota: %w", err)
	}
	u.prune(time.Now())
	return u.total(), u.runs(), nil
}

// heldEvents returns the bytes of run events subject's runs and programs hold.
func (r *records) heldEvents(ctx context.Context, subject string) (int64, error) {
	e, err := r.kv.Get(ctx, quotaKey(subject))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("runstore: read quota: %w", err)
	}
	var u usage
	if err := json.Unmarshal(e.Value(), &u); err != nil {
		return 0, fmt.Errorf("runstore: decode quota: %w", err)
	}
	u.prune(time.Now())
	return u.events(), nil
}

// arm sets run runID's timer when it has none: in ttl the reaper looks at
// the run.
func (r *records) arm(ctx context.Context, runID string, ttl time.Duration) error {
	_, err := r.kv.Create(ctx, reapPrefix+runID, nil, jetstream.KeyTTL(max(ttl, time.Second)))
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("runstore: arm the retention of %s: %w", runID, err)
	}
	return nil
}

// rearm sets run runID's timer again (the reaper found it still running or
// closed too recently).
func (r *records) rearm(ctx context.Context, runID string, ttl time.Duration) error {
	if err := r.kv.Purge(ctx, reapPrefix+runID, jetstream.PurgeTTL(time.Second)); err != nil {
		return fmt.Errorf("runstore: re-arm the retention of %s: %w", runID, err)
	}
	return r.arm(ctx, runID, ttl)
}
