package main

import (
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/orchestrator/ids"
)

// TestApproveCallID checks how approve and deny read their arguments: a call
// id alone names its run or program; the older two-argument form still works
// when it agrees; anything else says what to pass.
func TestApproveCallID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind, owner string
		args        []string
		wantErr     string
	}{
		{"run", "r1", []string{ids.RunCall("r1", 2, 0)}, ""},
		{"program", "p-1", []string{ids.ProgramCall("p-1", 3)}, ""},
		{"program", "r1-program-1-0", []string{ids.ProgramCall(ids.CodeModeProgram("r1", 1, 0), 1)}, ""},
		{"run", "r1", []string{"r1", "r1/1/0"}, ""},
		{"run", "", []string{"r2", "r1/1/0"}, "belongs to run r1, not r2"},
		{"run", "", []string{"r1"}, `"r1" is not a call id: copy one from 'toolfleet approvals list'`},
		{"program", "", []string{"/4"}, "is not a call id"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			owner, call, err := callOwner(tt.kind, tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("callOwner(%q) = %v, want an error with %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil || owner != tt.owner || call != tt.args[len(tt.args)-1] {
				t.Fatalf("callOwner(%q) = %q, %q, %v; want %q", tt.args, owner, call, err, tt.owner)
			}
		})
	}
}
