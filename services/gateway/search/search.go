// Package search ranks tool definitions for a natural-language query with BM25
// over their names, descriptions and input field descriptions, so that a model
// can be given only the few tools it needs (SearchTools).
package search

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"unicode"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// BM25 parameters (the usual defaults).
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// Index ranks tools with BM25 over their names, descriptions and the
// descriptions of their input fields. Names count three times: a query word that
// names the tool is the strongest signal.
type Index struct {
	docs   []searchDoc
	df     map[string]int
	avgLen float64
}

type searchDoc struct {
	def *toolfleetv1.ToolDefinition
	tf  map[string]int
	len int
}

// New indexes defs; the index is immutable and safe for concurrent use.
func New(defs []*toolfleetv1.ToolDefinition) *Index {
	ix := &Index{df: map[string]int{}}
	total := 0
	for _, d := range defs {
		var words []string
		name := tokenize(d.GetToolkit() + " " + d.GetName() + " " + d.GetTitle())
		for range 3 {
			words = append(words, name...)
		}
		words = append(words, tokenize(d.GetDescription())...)
		words = append(words, tokenize(strings.Join(schemaText(d.GetInputSchema()), " "))...)
		doc := searchDoc{def: d, tf: map[string]int{}, len: len(words)}
		for _, w := range words {
			if doc.tf[w] == 0 {
				ix.df[w]++
			}
			doc.tf[w]++
		}
		total += doc.len
		ix.docs = append(ix.docs, doc)
	}
	if len(ix.docs) > 0 {
		ix.avgLen = float64(total) / float64(len(ix.docs))
	}
	return ix
}

// Hit is a tool that matched a query, with its BM25 score.
type Hit struct {
	Def   *toolfleetv1.ToolDefinition
	Score float64
}

// Search returns the tools matching query, best first (ties by id); keep filters
// candidates.
func (ix *Index) Search(query string, keep func(*toolfleetv1.ToolDefinition) bool) []Hit {
	terms := tokenize(query)
	n := float64(len(ix.docs))
	var out []Hit
	for _, doc := range ix.docs {
		if !keep(doc.def) {
			continue
		}
		var s float64
		for _, t := range terms {
			f := float64(doc.tf[t])
			if f == 0 {
				continue
			}
			df := float64(ix.df[t])
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			s += idf * f * (bm25K1 + 1) / (f + bm25K1*(1-bm25B+bm25B*float64(doc.len)/ix.avgLen))
		}
		if s > 0 {
			out = append(out, Hit{doc.def, s})
		}
	}
	slices.SortStableFunc(out, func(a, b Hit) int {
		return cmp.Or(cmp.Compare(b.Score, a.Score), cmp.Compare(a.Def.GetId(), b.Def.GetId()))
	})
	return out
}

// tokenize lower-cases and splits on non-alphanumerics and camelCase boundaries,
// with a light plural stem ("numbers" → "number").
func tokenize(s string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			w := strings.ToLower(string(cur))
			if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
				w = w[:len(w)-1]
			}
			if !stopWords[w] {
				out = append(out, w)
			}
			cur = cur[:0]
		}
	}
	rs := []rune(s)
	for i, r := range rs {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if unicode.IsUpper(r) && i > 0 && unicode.IsLower(rs[i-1]) {
				flush()
			}
			cur = append(cur, r)
		default:
			flush()
		}
	}
	flush()
	return out
}

var stopWords = map[string]bool{"a": true, "an": true, "the": true, "and": true, "or": true, "of": true,
	"to": true, "in": true, "is": true, "it": true, "for": true, "on": true, "with": true, "use": true, "when": true}

// schemaText collects every "description" string of a JSON Schema.
func schemaText(s *structpb.Struct) []string {
	var out []string
	var walk func(v *structpb.Value)
	walk = func(v *structpb.Value) {
		switch k := v.GetKind().(type) {
		case *structpb.Value_StructValue:
			for key, f := range k.StructValue.GetFields() {
				if key == "description" {
					out = append(out, f.GetStringValue())
					continue
				}
				walk(f)
			}
		case *structpb.Value_ListValue:
			for _, e := range k.ListValue.GetValues() {
				walk(e)
			}
		}
	}
	if s != nil {
		walk(structpb.NewStructValue(s))
	}
	return out
}
