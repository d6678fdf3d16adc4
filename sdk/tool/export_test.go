package tool

import "time"

// SetJournalHeartbeat sets how often w rewrites the start record of a claimed
// call while its tool runs (journal.HeartbeatInterval otherwise). Call it
// before Run.
func SetJournalHeartbeat(w *Worker, d time.Duration) { w.journaler.heartbeat = d }
