package search_test

import (
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/search"
)

func TestSearch(t *testing.T) {
	t.Parallel()
	def := func(kit, name, desc string) *toolfleetv1.ToolDefinition {
		return &toolfleetv1.ToolDefinition{Id: kit + "." + name + "@1.0.0", Toolkit: kit, Name: name, Description: desc}
	}
	ix := search.New([]*toolfleetv1.ToolDefinition{
		def("Calculator", "Add", "Add two numbers and return the sum."),
		def("Clock", "Now", "The current time in a time zone."),
		def("KV", "Put", "Store a value under a key."),
		def("Web", "FetchPage", "Fetch a web page and return its text."),
	})
	all := func(*toolfleetv1.ToolDefinition) bool { return true }
	tests := []struct{ query, first string }{
		{"add numbers", "Calculator.Add@1.0.0"},
		{"what time is it", "Clock.Now@1.0.0"},
		{"store values", "KV.Put@1.0.0"},      // plural stemmed
		{"fetch page", "Web.FetchPage@1.0.0"}, // camelCase split
		{"the and of", ""},                    // stop words only
		{"zebra", ""},                         // no match
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			hits := ix.Search(tt.query, all)
			if tt.first == "" {
				if len(hits) != 0 {
					t.Fatalf("hits %v, want none", hits)
				}
				return
			}
			if len(hits) == 0 || hits[0].Def.GetId() != tt.first {
				t.Fatalf("hits %v, want %s first", hits, tt.first)
			}
		})
	}
	if hits := ix.Search("add", func(d *toolfleetv1.ToolDefinition) bool { return d.GetToolkit() != "Calculator" }); len(hits) != 0 {
		t.Fatalf("keep ignored: %v", hits)
	}
}
