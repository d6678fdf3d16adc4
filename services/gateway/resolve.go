package gateway

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// resolve finds the route for a tool id: "Toolkit.Tool@x.y.z", "Toolkit.Tool@x"
// (= x.0.0), "Toolkit.Tool" (latest served) or the model-facing "Toolkit_Tool".
//
// Cost is bounded by what the gateway serves, never by what a caller sends: an id
// longer than contract.MaxToolRefLen is refused before any work (and not echoed),
// and the cache is keyed by the canonical reference, so every spelling of one
// tool shares one entry and only resolvable references (at most two per served
// tool version) are kept.
func (s *snapshot) resolve(toolID string) (*route, *CallError) {
	if len(toolID) > contract.MaxToolRefLen {
		return nil, serverError(codes.InvalidArgument, ErrUnknownTool, contract.ErrToolRefTooLong.Error(),
			"tool id is %d bytes long; tool ids are at most %d bytes (Toolkit.Tool[@x.y.z])", len(toolID), contract.MaxToolRefLen)
	}
	ref, err := contract.ParseToolRef(toolID)
	if err != nil {
		return nil, serverError(codes.NotFound, ErrUnknownTool, err.Error(),
			"unknown tool %q: want Toolkit.Tool[@x.y.z]%s", toolID, s.suggest(toolID))
	}
	key := ref.String()
	if rt, ok := s.resolved.Load(key); ok {
		return rt.(*route), nil
	}
	rt, ce := s.resolveRef(toolID, ref)
	if ce == nil {
		s.resolved.Store(key, rt)
	}
	return rt, ce
}

func (s *snapshot) resolveRef(toolID string, ref contract.ToolRef) (*route, *CallError) {
	def, err := contract.Resolve(ref, s.byName[ref.Toolkit+"."+ref.Tool])
	if err != nil {
		if errors.Is(err, contract.ErrVersionNotFound) {
			var vs []string
			for _, d := range s.byName[ref.Toolkit+"."+ref.Tool] {
				vs = append(vs, d.GetVersion())
			}
			slices.Sort(vs)
			return nil, serverError(codes.NotFound, ErrUnknownTool, err.Error(),
				"%s is not served in version %s; served versions: %s", ref.Toolkit+"."+ref.Tool, ref.Version, strings.Join(vs, ", "))
		}
		return nil, serverError(codes.NotFound, ErrUnknownTool, err.Error(),
			"unknown tool %q%s", toolID, s.suggest(toolID))
	}
	return s.routes[def.GetId()], nil
}

// loggableToolID bounds a caller's tool id for logs: an id over the cap is cut
// there and marked with its length, so a 1 MiB id does not become a 1 MiB line.
func loggableToolID(id string) string {
	if len(id) <= contract.MaxToolRefLen {
		return id
	}
	return strings.ToValidUTF8(id[:contract.MaxToolRefLen], "") + "…(" + strconv.Itoa(len(id)) + " bytes)"
}

// resolvedLen counts the cached resolutions (for tests).
func (s *snapshot) resolvedLen() int {
	n := 0
	s.resolved.Range(func(_, _ any) bool { n++; return true })
	return n
}

// suggest names the closest existing tools, e.g. "; did you mean Calculator.Add?".
func (s *snapshot) suggest(toolID string) string {
	name, _, _ := strings.Cut(toolID, "@")
	name = strings.ToLower(name)
	type cand struct {
		name string
		dist int
	}
	var cs []cand
	for n, defs := range s.byName {
		d := min(editDistance(name, strings.ToLower(n)), editDistance(name, strings.ToLower(defs[0].GetModelName())))
		// Substring matches ("add" in "Calculator.Add") count as close.
		if strings.Contains(strings.ToLower(n), name) || strings.Contains(name, strings.ToLower(defs[0].GetName())) {
			d = min(d, 2)
		}
		cs = append(cs, cand{n, d})
	}
	if len(cs) == 0 {
		return "; no tools are served right now"
	}
	slices.SortFunc(cs, func(a, b cand) int { return cmp.Or(cmp.Compare(a.dist, b.dist), cmp.Compare(a.name, b.name)) })
	var names []string
	for _, c := range cs[:min(3, len(cs))] {
		names = append(names, c.name)
	}
	return "; closest tools: " + strings.Join(names, ", ")
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
