package contract_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// A declared credential reaches the definition (scopes sorted, deduplicated);
// a tool that declares none has none.
func TestCredentialReachesDefinition(t *testing.T) {
	t.Parallel()
	defs, err := conformanceWith(t, func(f, _ *toolfleetv1.ToolOptions) {
		f.Credential = &toolfleetv1.ToolCredential{Provider: "github", Scopes: []string{"repo", "read:user", "repo"}}
	})
	if err != nil {
		t.Fatal(err)
	}
	c := defs[0].GetRequirements().GetCredential()
	if c.GetProvider() != "github" || !slices.Equal(c.GetScopes(), []string{"read:user", "repo"}) || c.GetAudience() != "" {
		t.Errorf("credential of %s: %v", defs[0].GetId(), c)
	}
	if c := defs[1].GetRequirements().GetCredential(); c != nil {
		t.Errorf("%s declares no credential, definition has %v", defs[1].GetId(), c)
	}
}

func TestCredentialRefused(t *testing.T) {
	t.Parallel()
	many := make([]string, contract.MaxCredentialScopes+1)
	for i := range many {
		many[i] = "s" + strings.Repeat("x", i)
	}
	for name, c := range map[string]*toolfleetv1.ToolCredential{
		"no provider":      {Scopes: []string{"a"}},
		"upper-case":       {Provider: "GitHub"},
		"long provider":    {Provider: strings.Repeat("a", 65)},
		"scope with space": {Provider: "github", Scopes: []string{"repo read"}},
		"scope with quote": {Provider: "github", Scopes: []string{`repo"`}},
		"empty scope":      {Provider: "github", Scopes: []string{""}},
		"too many scopes":  {Provider: "github", Scopes: many},
		"long scope":       {Provider: "github", Scopes: []string{strings.Repeat("a", contract.MaxScopeLength+1)}},
		"long audience":    {Provider: "corp", Audience: strings.Repeat("a", contract.MaxAudienceLength+1)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := conformanceWith(t, func(f, _ *toolfleetv1.ToolOptions) { f.Credential = c })
			if !errors.Is(err, contract.ErrInvalidContract) {
				t.Fatalf("credential %v: error %v, want ErrInvalidContract", c, err)
			}
		})
	}
}

func TestScopesWidened(t *testing.T) {
	t.Parallel()
	gh := func(scopes ...string) *toolfleetv1.ToolCredential {
		return &toolfleetv1.ToolCredential{Provider: "github", Scopes: scopes}
	}
	for _, tc := range []struct {
		name         string
		before, now  *toolfleetv1.ToolCredential
		added        []string
		otherAccount bool
	}{
		{"same", gh("a", "b"), gh("a", "b"), nil, false},
		{"narrowed", gh("a", "b"), gh("a"), nil, false},
		{"removed", gh("a"), nil, nil, false},
		{"widened", gh("a"), gh("a", "b"), []string{"b"}, false},
		{"declared anew", nil, gh("a"), []string{"a"}, true},
		{"other provider", gh("a"), &toolfleetv1.ToolCredential{Provider: "gitlab", Scopes: []string{"a"}}, []string{"a"}, true},
		{"other audience", &toolfleetv1.ToolCredential{Provider: "corp", Audience: "x"}, &toolfleetv1.ToolCredential{Provider: "corp", Audience: "y"}, nil, true},
	} {
		added, other := contract.ScopesWidened(tc.before, tc.now)
		if !slices.Equal(added, tc.added) || other != tc.otherAccount {
			t.Errorf("%s: added %v, other account %v; want %v, %v", tc.name, added, other, tc.added, tc.otherAccount)
		}
	}
}
