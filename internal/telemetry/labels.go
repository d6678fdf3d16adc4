package telemetry

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// LabelSet bounds the values of a Prometheus label that come from outside
// (announced tool names, field paths in callers' inputs, model names in run
// specs): the first max distinct values get a series of their own, the rest
// share one, so nobody can grow the number of series without bound.
type LabelSet struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

// NewLabelSet admits at most max distinct values.
func NewLabelSet(max int) *LabelSet { return &LabelSet{max: max, seen: map[string]struct{}{}} }

// Admit reports whether v has, or now gets, a series of its own.
func (s *LabelSet) Admit(v string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[v]; ok {
		return true
	}
	if len(s.seen) >= s.max {
		return false
	}
	s.seen[v] = struct{}{}
	return true
}

// CleanLabel makes v a label value Prometheus accepts (invalid UTF-8
// replaced) of at most n bytes, cut at a rune boundary.
func CleanLabel(v string, n int) string {
	v = strings.ToValidUTF8(v, "?")
	if len(v) <= n {
		return v
	}
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n]
}
