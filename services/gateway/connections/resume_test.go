package connections

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// resumerFunc resumes with a function (what agentapi and programapi do is
// tested with a real Temporal and Hydra in e2e/oauth/delegation).
type resumerFunc func(ctx context.Context, subject, provider string) (int, error)

func (f resumerFunc) ResumeConnected(ctx context.Context, subject, provider string) (int, error) {
	return f(ctx, subject, provider)
}

func TestResumeSaysWhatWentOn(t *testing.T) {
	s := &Service{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if got := s.resume(t.Context(), "alice", "acme"); got != "" {
		t.Fatalf("no resumers: %q", got)
	}
	var asked []string
	count := func(n int, err error) Resumer {
		return resumerFunc(func(ctx context.Context, subject, provider string) (int, error) {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("resuming without a deadline")
			}
			asked = append(asked, subject+"/"+provider)
			return n, err
		})
	}
	s.ResumeWith(count(2, nil), count(1, nil))
	if got := s.resume(t.Context(), "alice", "acme"); got != "3 calls that waited for it go on now." || strings.Join(asked, " ") != "alice/acme alice/acme" {
		t.Fatalf("two resumers: %q, asked %v", got, asked)
	}
	s.ResumeWith(count(0, nil))
	if got := s.resume(t.Context(), "alice", "acme"); got != "" {
		t.Fatalf("nothing waited: %q", got)
	}
	// A closed browser tab does not stop the resuming.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s.ResumeWith(resumerFunc(func(ctx context.Context, _, _ string) (int, error) { return 1, ctx.Err() }))
	if got := s.resume(ctx, "alice", "acme"); got != "1 call that waited for it goes on now." {
		t.Fatalf("after the request ended: %q", got)
	}
	// A failure points the person at answering by hand.
	s.ResumeWith(count(1, nil), count(0, errors.New("temporal down")))
	if got := s.resume(t.Context(), "alice", "acme"); !strings.Contains(got, "answer it in the console's inbox") {
		t.Fatalf("a failed resumer: %q", got)
	}
}
