package connections

import (
	"context"
	"fmt"
	"time"
)

// A Resumer goes on with what waits for a principal's new connection:
// orchestrator/agentapi.Late and programapi.Late answer the connect items of
// the principal's runs and programs, so a call that waited for the
// connection is made again as soon as it exists.
type Resumer interface {
	ResumeConnected(ctx context.Context, subject, provider string) (int, error)
}

// resumeTimeout bounds the resuming a connect callback does before its page
// answers; what it did not reach waits for the person's own answer.
const resumeTimeout = 10 * time.Second

// ResumeWith sets what a connection made through the flow resumes. Call it
// before the Handler serves.
func (s *Service) ResumeWith(rs ...Resumer) { s.resumers = rs }

// resume runs the resumers for a new connection of subject to provider and
// says on the page what went on. It outlives the browser's request (a closed
// tab must not stop half the resuming) within resumeTimeout.
func (s *Service) resume(ctx context.Context, subject, provider string) string {
	if len(s.resumers) == 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resumeTimeout)
	defer cancel()
	n, failed := 0, false
	for _, r := range s.resumers {
		k, err := r.ResumeConnected(ctx, subject, provider)
		n += k
		if err != nil {
			failed = true
			s.log.Warn("connect: resuming what waits for the connection failed", "provider", provider, "error", err)
		}
	}
	switch {
	case failed:
		return "If a run or program waits for this connection, answer it in the console's inbox or with `toolfleet agent answer` / `toolfleet program answer`."
	case n == 1:
		return "1 call that waited for it goes on now."
	case n > 1:
		return fmt.Sprintf("%d calls that waited for it go on now.", n)
	}
	return ""
}
