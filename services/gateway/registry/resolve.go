package registry

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// ErrUnknownTool is wrapped by a [ResolveError] whose tool is unknown: no
// served tool has the requested name or version.
var ErrUnknownTool = errors.New("gateway: unknown tool")

// ErrToolNotLoaded is wrapped by a [ResolveError] with code Unavailable: the
// tool is not served yet, and may be in a moment, because the registry is
// warming up or an announced worker that names its toolkit is not loaded yet.
var ErrToolNotLoaded = errors.New("gateway: tool not loaded yet")

// ResolveError is a tool reference that names no served tool. Message is for
// the caller (it suggests the closest tools), Detail for developers; Code is
// InvalidArgument for a reference over contract.MaxToolRefLen, Unavailable
// (retryable) while the tool may only not be loaded yet (see
// [Registry.Warm]), NotFound otherwise.
type ResolveError struct {
	Code    codes.Code
	Message string
	Detail  string
}

// Error returns the caller-facing message.
func (e *ResolveError) Error() string { return e.Message }

// Unwrap returns [ErrToolNotLoaded] for Unavailable, else [ErrUnknownTool].
func (e *ResolveError) Unwrap() error {
	if e.Code == codes.Unavailable {
		return ErrToolNotLoaded
	}
	return ErrUnknownTool
}

// resolveError builds a ResolveError with a formatted caller message.
func resolveError(code codes.Code, detail, format string, args ...any) *ResolveError {
	return &ResolveError{Code: code, Detail: detail, Message: fmt.Sprintf(format, args...)}
}

// Resolve finds the route for a tool id: "Toolkit.Tool@x.y.z", "Toolkit.Tool@x"
// (= x.0.0), "Toolkit.Tool" (latest served) or the model-facing "Toolkit_Tool".
//
// Cost is bounded by what the gateway serves, never by what a caller sends: an id
// longer than contract.MaxToolRefLen is refused before any work (and not echoed),
// and the cache is keyed by the canonical reference, so every spelling of one
// tool shares one entry and only resolvable references (at most two per served
// tool version) are kept.
func (s *Snapshot) Resolve(toolID string) (*Route, *ResolveError) {
	if len(toolID) > contract.MaxToolRefLen {
		return nil, resolveError(codes.InvalidArgument, contract.ErrToolRefTooLong.Error(),
			"tool id is %d bytes long; tool ids are at most %d bytes (Toolkit.Tool[@x.y.z])", len(toolID), contract.MaxToolRefLen)
	}
	ref, err := contract.ParseToolRef(toolID)
	if err != nil {
		return nil, resolveError(codes.NotFound, err.Error(),
			"unknown tool %q: want Toolkit.Tool[@x.y.z]%s", toolID, s.suggest(toolID))
	}
	key := ref.String()
	if rt, ok := s.resolved.Load(key); ok {
		return rt.(*Route), nil
	}
	rt, ce := s.resolveRef(toolID, ref)
	if ce == nil {
		s.resolved.Store(key, rt)
	}
	return rt, ce
}

func (s *Snapshot) resolveRef(toolID string, ref contract.ToolRef) (*Route, *ResolveError) {
	def, err := contract.Resolve(ref, s.byName[ref.Toolkit+"."+ref.Tool])
	if err != nil {
		if re := s.warm.notLoaded(toolID, ref.Toolkit); re != nil {
			re.Detail += "; " + err.Error()
			return nil, re
		}
		if errors.Is(err, contract.ErrVersionNotFound) {
			var vs []string
			for _, d := range s.byName[ref.Toolkit+"."+ref.Tool] {
				vs = append(vs, d.GetVersion())
			}
			slices.Sort(vs)
			return nil, resolveError(codes.NotFound, err.Error(),
				"%s is not served in version %s; served versions: %s", ref.Toolkit+"."+ref.Tool, ref.Version, strings.Join(vs, ", "))
		}
		return nil, resolveError(codes.NotFound, err.Error(),
			"unknown tool %q%s", toolID, s.suggest(toolID))
	}
	return s.routes[def.GetId()], nil
}

// ResolvedLen counts the cached resolutions (tests check the cache's bound).
func (s *Snapshot) ResolvedLen() int {
	n := 0
	s.resolved.Range(func(_, _ any) bool { n++; return true })
	return n
}

// suggest names the closest existing tools, e.g. "; did you mean Calculator.Add?".
func (s *Snapshot) suggest(toolID string) string {
	name, _, _ := strings.Cut(toolID, "@")
	cs := make([]Candidate, 0, len(s.byName))
	for n, defs := range s.byName {
		cs = append(cs, Candidate{Name: n, Aliases: []string{defs[0].GetModelName()}, Short: defs[0].GetName()})
	}
	names := Closest(name, cs, 3)
	if len(names) == 0 {
		return "; no tools are served right now"
	}
	return "; closest tools: " + strings.Join(names, ", ")
}

// Candidate is a tool a misspelled name may have meant: its name, other
// spellings of it (the model name) and its short name (Add).
type Candidate struct {
	Name    string
	Aliases []string
	Short   string
}

// Closest names the at most n candidates nearest to name, nearest first:
// by edit distance to the name or an alias, ignoring case; a candidate whose
// name contains name, or whose short name name contains ("add" in
// "Calculator.Add", "Calculator.Add" in "Calculator.Addd"), counts as close.
// Every surface that answers an unknown tool uses it, so the same mistake
// gets the same hint.
func Closest(name string, cs []Candidate, n int) []string {
	name = strings.ToLower(name)
	type ranked struct {
		name string
		dist int
	}
	rs := make([]ranked, 0, len(cs))
	for _, c := range cs {
		d := editDistance(name, strings.ToLower(c.Name))
		for _, a := range c.Aliases {
			d = min(d, editDistance(name, strings.ToLower(a)))
		}
		if strings.Contains(strings.ToLower(c.Name), name) || c.Short != "" && strings.Contains(name, strings.ToLower(c.Short)) {
			d = min(d, 2)
		}
		rs = append(rs, ranked{c.Name, d})
	}
	slices.SortFunc(rs, func(a, b ranked) int { return cmp.Or(cmp.Compare(a.dist, b.dist), cmp.Compare(a.name, b.name)) })
	var out []string
	for _, r := range rs[:min(n, len(rs))] {
		out = append(out, r.name)
	}
	return out
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// NotLoaded is the Unavailable [ResolveError] of a listing for pattern
// (a tool id glob such as "KV.*", or a toolkit) that matched nothing while
// the registry may not have loaded every worker that could serve it; nil
// when the registry is warm. A caller resolving tools by pattern then
// retries, as it does for one tool id, instead of concluding that nothing
// matches.
func (s *Snapshot) NotLoaded(pattern, toolkit string) *ResolveError {
	return s.warm.notLoaded(pattern, toolkit)
}
