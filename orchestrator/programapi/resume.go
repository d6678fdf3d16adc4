package programapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
)

// ResumeConnected answers, as subject, every item of subject's open
// programs that waits for subject to connect provider, as
// agentapi.Service.ResumeConnected does for runs, and returns how many
// items it answered. Trusted callers only: it checks no token.
func (s *Service) ResumeConnected(ctx context.Context, subject, provider string) (int, error) {
	list, _, err := s.Programs.List(ctx, subject, false, apibase.MaxResumeScan, nil, program.ListFilter{Status: visibility.StatusWaitingInput})
	if errors.Is(err, program.ErrNoAttributes) { // every open program
		list, _, err = s.Programs.List(ctx, subject, false, apibase.MaxResumeScan, nil, program.ListFilter{})
	}
	if err != nil {
		return 0, fmt.Errorf("programapi: list %s's programs: %w", subject, err)
	}
	var open []string
	for _, p := range list {
		if p.State == "Running" {
			open = append(open, p.ProgramID)
		}
	}
	return apibase.ResumeConnected(ctx, open, subject, provider, func(ctx context.Context, id string) ([]toolcall.Question, error) {
		st, err := s.Programs.Get(ctx, id)
		if err != nil || st.State == nil {
			return nil, err
		}
		return st.State.Questions, nil
	}, s.Programs.AnswerQuestion), nil
}

// ResumeConnected is [Service.ResumeConnected] once the service is set
// (nothing to resume before).
func (l *Late) ResumeConnected(ctx context.Context, subject, provider string) (int, error) {
	if s := l.Get(); s != nil {
		return s.ResumeConnected(ctx, subject, provider)
	}
	return 0, nil
}
