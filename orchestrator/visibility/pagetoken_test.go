package visibility_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/orchestrator/visibility"
)

// TestPageTokens: a page token opens only for the listing that issued it;
// a made-up, garbled, truncated or another viewer's token is ErrPageToken.
func TestPageTokens(t *testing.T) {
	t.Parallel()
	const q = "WorkflowType = 'AgentRun'"
	alice := visibility.PageView("runs", "alice", false, q)
	temporal := []byte("temporal's own token")
	page := visibility.SealPage(alice, temporal)
	if got, err := visibility.OpenPage(alice, page); err != nil || !bytes.Equal(got, temporal) {
		t.Fatalf("OpenPage of its own token: %q %v", got, err)
	}
	if visibility.SealPage(alice, nil) != nil {
		t.Error("the last page has a token")
	}
	if got, err := visibility.OpenPage(alice, nil); got != nil || err != nil {
		t.Errorf("no token: %q %v, want the first page", got, err)
	}
	garbled := bytes.Clone(page)
	garbled[len(garbled)-1] ^= 1
	others := map[string]string{
		"mallory":  visibility.PageView("runs", "mallory", false, q),
		"an admin": visibility.PageView("runs", "alice", true, q),
		"programs": visibility.PageView("programs", "alice", false, q),
		"a query":  visibility.PageView("runs", "alice", false, q+" AND 1=1"),
	}
	for name, view := range others {
		if _, err := visibility.OpenPage(view, page); !errors.Is(err, visibility.ErrPageToken) {
			t.Errorf("alice's token for %s: %v, want ErrPageToken", name, err)
		}
	}
	for name, tok := range map[string][]byte{"made up": []byte("made up"), "garbled": garbled, "truncated": page[:9],
		"another version": append([]byte{2}, page[1:]...)} {
		if _, err := visibility.OpenPage(alice, tok); !errors.Is(err, visibility.ErrPageToken) {
			t.Errorf("%s token: %v, want ErrPageToken", name, err)
		}
	}
}
