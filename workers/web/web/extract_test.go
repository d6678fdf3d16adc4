package web

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

func TestExtractPage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		html      string
		maxText   int
		maxLinks  int
		wantTitle string
		wantText  string
		wantLinks []Link
		wantTrunc bool
	}{
		{
			name: "article with chrome removed",
			html: `<!doctype html><html><head><title> Go  News </title><style>body{color:red}</style>
				<script>alert("x")</script></head><body>
				<header><a href="/">Home</a> <a href="/login">Log in</a></header>
				<nav><ul><li><a href="/a">A</a></li></ul></nav>
				<main><article><header><h1>Release   1.26</h1></header>
				<p>Go 1.26 is <b>out</b>.
				   Read the <a href="notes#top">release notes</a>.</p>
				<h2>Changes</h2>
				<ul><li>Faster <em>GC</em></li><li><p>New iterators</p></li></ul>
				<script>track()</script>
				<div hidden>secret</div><div aria-hidden="true">icons</div>
				<pre>  a := 1
  b := 2</pre>
				</article></main>
				<footer>© 2026 <a href="/legal">Legal</a></footer></body></html>`,
			wantTitle: "Go News",
			wantText: "# Release 1.26\n\nGo 1.26 is out. Read the release notes.\n\n## Changes\n\n- Faster GC\n- New iterators\n\n" +
				"  a := 1\n  b := 2",
			wantLinks: []Link{{Text: "release notes", URL: "https://example.com/blog/notes"}},
		},
		{
			name:     "links are absolute, http(s) only, once each",
			html:     `<p><a href="https://other.org/x">X</a> <a href="/x">root</a> <a href="mailto:a@b.c">mail</a> <a href="javascript:void(0)">js</a> <a href="#frag">frag</a> <a href="/x#again">again</a> <a href="/img" title="An image"><img src="i.png"></a></p>`,
			wantText: "X root mail js frag again",
			wantLinks: []Link{
				{Text: "X", URL: "https://other.org/x"},
				{Text: "root", URL: "https://example.com/x"},
				{Text: "An image", URL: "https://example.com/img"},
			},
		},
		{
			name:      "base element changes link resolution",
			html:      `<head><base href="https://cdn.example.net/docs/"></head><body><a href="page">P</a></body>`,
			wantText:  "P",
			wantLinks: []Link{{Text: "P", URL: "https://cdn.example.net/docs/page"}},
		},
		{
			name:      "first heading stands in for a missing title",
			html:      `<body><h1>Plain <i>page</i></h1><p>x</p></body>`,
			wantTitle: "Plain page",
			wantText:  "# Plain page\n\nx",
		},
		{
			name:     "tables and line breaks",
			html:     `<table><tr><th>Name</th><th>Age</th></tr><tr><td>Ana</td><td>31</td></tr></table><p>one<br>two</p>`,
			wantText: "Name Age\nAna 31\n\none\ntwo",
		},
		{
			name:      "text cap cuts on a character boundary",
			html:      `<p>héllo wörld</p>`,
			maxText:   8,
			wantText:  "héllo w",
			wantTrunc: true,
		},
		{
			name:      "link cap",
			html:      `<a href="/1">1</a><a href="/2">2</a><a href="/3">3</a>`,
			maxLinks:  2,
			wantText:  "123",
			wantLinks: []Link{{Text: "1", URL: "https://example.com/1"}, {Text: "2", URL: "https://example.com/2"}},
			wantTrunc: true,
		},
	}
	base, _ := url.Parse("https://example.com/blog/post")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc, err := html.Parse(strings.NewReader(tt.html))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			maxText, maxLinks := tt.maxText, tt.maxLinks
			if maxText == 0 {
				maxText = 1 << 20
			}
			if maxLinks == 0 {
				maxLinks = 100
			}
			page := ExtractPage(doc, base, maxText, maxLinks)
			if page.Title != tt.wantTitle {
				t.Errorf("title = %q, want %q", page.Title, tt.wantTitle)
			}
			if page.Text != tt.wantText {
				t.Errorf("text =\n%q\nwant\n%q", page.Text, tt.wantText)
			}
			if fmt.Sprint(page.Links) != fmt.Sprint(tt.wantLinks) {
				t.Errorf("links = %v, want %v", page.Links, tt.wantLinks)
			}
			if page.Truncated != tt.wantTrunc {
				t.Errorf("truncated = %v, want %v", page.Truncated, tt.wantTrunc)
			}
		})
	}
}
