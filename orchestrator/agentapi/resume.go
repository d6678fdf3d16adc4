package agentapi

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
)

// ResumeConnected answers, as subject, every item of subject's open runs
// that waits for subject to connect provider: the gateway calls it once the
// connection exists (services/gateway/connections), so those calls are made
// again under their call ids without the person answering each one. It reads
// at most apibase.MaxResumeScan runs (those waiting for input when the
// namespace has search attributes, else every open run) and returns how
// many items it answered. Trusted callers only: it checks no token.
func (s *Service) ResumeConnected(ctx context.Context, subject, provider string) (int, error) {
	c := Caller{Subject: subject}
	req := &toolfleetv1.ListRunsRequest{PageSize: apibase.MaxResumeScan, Status: toolfleetv1.RunStatus_RUN_STATUS_WAITING_INPUT}
	list, err := s.listRuns(ctx, c, req)
	if connect.CodeOf(err) == connect.CodeFailedPrecondition { // no search attributes: every open run
		req.Status = toolfleetv1.RunStatus_RUN_STATUS_UNSPECIFIED
		list, err = s.listRuns(ctx, c, req)
	}
	if err != nil {
		return 0, fmt.Errorf("agentapi: list %s's runs: %w", subject, err)
	}
	var open []string
	for _, r := range list.GetRuns() {
		if r.GetState() == "Running" {
			open = append(open, r.GetRunId())
		}
	}
	return apibase.ResumeConnected(ctx, open, subject, provider, func(ctx context.Context, id string) ([]toolcall.Question, error) {
		st, err := s.Runs.Get(ctx, id)
		return st.Questions, err
	}, s.Runs.AnswerQuestion), nil
}

// ResumeConnected is [Service.ResumeConnected] once the service is set
// (nothing to resume before).
func (l *Late) ResumeConnected(ctx context.Context, subject, provider string) (int, error) {
	if s := l.Get(); s != nil {
		return s.ResumeConnected(ctx, subject, provider)
	}
	return 0, nil
}
