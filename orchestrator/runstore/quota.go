package runstore

import (
	"context"
)

// charge counts n bytes of kind c for runID against its principal's
// quota. Counting is best effort: a failure never fails the write it counts.
func (s *Store) charge(ctx context.Context, runID string, n int64, c counter) {
	if n <= 0 {
		return
	}
	recs := s.records(ctx)
	if recs == nil {
		return
	}
	if o := s.holder(ctx, runID); o.subject != "" {
		_ = recs.charge(ctx, o.subject, runID, n, o.program, c)
	}
}

// ChargeEvent counts n bytes of a run event published for run or program
// runID against its principal's event bound (Quota.MaxEventBytes). Like
// the other charges it is best effort and never refuses.
func (s *Store) ChargeEvent(ctx context.Context, runID string, n int64) {
	s.charge(ctx, runID, n, countEvents)
}

// HeldEvents returns the bytes of run events subject's runs and programs hold.
func (s *Store) HeldEvents(ctx context.Context, subject string) (int64, error) {
	recs := s.records(ctx)
	if recs == nil {
		return 0, nil
	}
	return recs.heldEvents(ctx, subject)
}

// Admit checks that subject's runs may hold n more bytes for runID (and, for
// a run it holds no entry for, one more run) and counts them: a
// [*QuotaError] (errors.Is ErrQuotaExceeded) otherwise. Without a records
// bucket every start is admitted.
func (s *Store) Admit(ctx context.Context, subject, runID string, n int64) error {
	recs := s.records(ctx)
	if recs == nil {
		return nil
	}
	return recs.admit(ctx, subject, runID, n)
}

// HistoryContent is what new runs keep of their content in history, as the
// orchestrator's settings say ("" without a records bucket: previews).
func (s *Store) HistoryContent(ctx context.Context) (string, error) {
	recs := s.records(ctx)
	if recs == nil {
		return "", nil
	}
	set, err := recs.current(ctx)
	return set.HistoryContent, err
}

// Held returns the bytes and runs subject's runs hold.
func (s *Store) Held(ctx context.Context, subject string) (bytes int64, runs int, err error) {
	recs := s.records(ctx)
	if recs == nil {
		return 0, 0, nil
	}
	return recs.held(ctx, subject)
}

// Arm starts runID's retention timer (when the store has a retention):
// its data is freed once it has been closed for the retention.
func (s *Store) Arm(ctx context.Context, runID string) error {
	recs := s.records(ctx)
	if recs == nil {
		return nil
	}
	ret := s.retention
	if ret == 0 {
		q, err := recs.quota(ctx)
		if err != nil {
			return err
		}
		ret = q.Retention
	}
	if ret <= 0 {
		return nil
	}
	return recs.arm(ctx, runID, ret)
}
