package main

import (
	"strings"
	"testing"
)

// TestUnknownSubcommand: a word that names no subcommand of a group fails
// (exit 1) with a suggestion, on every group; a group alone prints its help.
func TestUnknownSubcommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		suggest string
	}{
		{[]string{"tools", "cal"}, "call"},
		{[]string{"agent", "lst"}, "list"},
		{[]string{"program", "rnu"}, "run"},
		{[]string{"approvals", "lsit"}, ""},
	} {
		root := newRootCommand()
		root.SetArgs(tc.args)
		var out strings.Builder
		root.SetOut(&out)
		err := root.ExecuteContext(t.Context())
		if err == nil || exitCode(err) != exitOther {
			t.Errorf("%v: err %v (exit %d), want a usage failure", tc.args, err, exitCode(err))
			continue
		}
		if !strings.Contains(err.Error(), `unknown command "`+tc.args[1]+`"`) || tc.suggest != "" && !strings.Contains(err.Error(), tc.suggest) {
			t.Errorf("%v: %v; want it to name the word and suggest %q", tc.args, err, tc.suggest)
		}
	}
	root := newRootCommand()
	root.SetArgs([]string{"agent"})
	var out strings.Builder
	root.SetOut(&out)
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("toolfleet agent: %v", err)
	}
	if !strings.Contains(out.String(), "Available Commands") {
		t.Errorf("toolfleet agent printed %q, want its help", out.String())
	}
}
