package web

import (
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Page is the readable content of an HTML document.
type Page struct {
	Title string
	// Text has headings as "#" lines, paragraphs separated by blank lines, list
	// items as "- " lines and the text of links inline.
	Text  string
	Links []Link
	// Truncated is set when Text or Links hit their caps.
	Truncated bool
}

// Link is one http(s) hyperlink of a page, with an absolute URL.
type Link struct {
	Text string
	URL  string
}

// Caps on what one link contributes.
const (
	maxLinkText = 200
	maxLinkURL  = 2048
)

// skipped elements carry no readable text (code, styling, embedded media) or are
// page chrome (navigation, forms, asides).
var skipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Svg: true, atom.Math: true, atom.Canvas: true, atom.Iframe: true, atom.Object: true,
	atom.Embed: true, atom.Audio: true, atom.Video: true, atom.Nav: true, atom.Footer: true,
	atom.Aside: true, atom.Form: true, atom.Button: true, atom.Select: true, atom.Input: true,
	atom.Textarea: true, atom.Dialog: true, atom.Head: true,
}

// blocks start on a new line; paragraph-like ones are separated by a blank line.
var blocks = map[atom.Atom]int{
	atom.P: 2, atom.Div: 1, atom.Section: 2, atom.Article: 2, atom.Main: 2, atom.Header: 1,
	atom.Blockquote: 2, atom.Pre: 2, atom.Ul: 2, atom.Ol: 2, atom.Dl: 2, atom.Dt: 1, atom.Dd: 1,
	atom.Table: 2, atom.Tr: 1, atom.Figure: 2, atom.Figcaption: 1, atom.Address: 2, atom.Details: 2,
	atom.Summary: 1, atom.Hr: 2, atom.Body: 2, atom.Caption: 1,
}

var headingLevel = map[atom.Atom]int{atom.H1: 1, atom.H2: 2, atom.H3: 3, atom.H4: 4, atom.H5: 5, atom.H6: 6}

// ExtractPage renders the readable text of an HTML document. base resolves
// relative links; maxText caps Text in bytes and maxLinks the number of links.
func ExtractPage(doc *html.Node, base *url.URL, maxText, maxLinks int) Page {
	e := &extractor{base: base, maxText: maxText, maxLinks: maxLinks, seen: map[string]bool{}}
	if b := find(doc, atom.Base); b != nil && attr(b, "href") != "" {
		if u, err := base.Parse(attr(b, "href")); err == nil {
			e.base = u
		}
	}
	e.title = collapse(textOf(find(doc, atom.Title)))
	if e.title == "" { // pages without <title> usually name themselves in the first heading
		e.title = collapse(textOf(find(doc, atom.H1)))
	}
	e.walk(doc, false)
	return Page{Title: e.title, Text: strings.TrimSpace(e.out.String()), Links: e.links, Truncated: e.textFull || e.linksFull}
}

type extractor struct {
	base     *url.URL
	maxText  int
	maxLinks int

	out       strings.Builder
	breaks    int  // newlines owed before the next text
	space     bool // a space is owed before the next text
	pre       int  // depth of <pre> elements: whitespace is kept
	bullet    bool // a "- " was just written: blocks inside the item stay on its line
	title     string
	links     []Link
	seen      map[string]bool
	textFull  bool // Text reached maxText
	linksFull bool // more links than maxLinks
}

// walk renders n. inContent tells whether n is inside <main> or <article>, where a
// <header> belongs to the content rather than to the site's chrome.
func (e *extractor) walk(n *html.Node, inContent bool) {
	switch n.Type {
	case html.TextNode:
		e.text(n.Data)
		return
	case html.ElementNode:
	default:
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			e.walk(c, inContent)
		}
		return
	}
	if skipped[n.DataAtom] || hidden(n) || (n.DataAtom == atom.Header && !inContent) {
		return
	}
	if n.DataAtom == atom.Main || n.DataAtom == atom.Article {
		inContent = true
	}
	switch {
	case n.DataAtom == atom.Br:
		e.lineBreak(1)
		return
	case n.DataAtom == atom.Li:
		e.bullet = false
		e.lineBreak(1)
		e.raw("- ")
		e.bullet = true
	case n.DataAtom == atom.Td || n.DataAtom == atom.Th:
		e.space = true
	case headingLevel[n.DataAtom] > 0:
		e.lineBreak(2)
		e.raw(strings.Repeat("#", headingLevel[n.DataAtom]) + " ")
	case blocks[n.DataAtom] > 0:
		e.lineBreak(blocks[n.DataAtom])
	case n.DataAtom == atom.A:
		e.link(n)
	}
	if n.DataAtom == atom.Pre {
		e.pre++
		defer func() { e.pre-- }()
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		e.walk(c, inContent)
	}
	switch {
	case n.DataAtom == atom.Li:
		e.bullet = false // an empty item must not swallow the next line break
	case headingLevel[n.DataAtom] > 0:
		e.lineBreak(2)
	case blocks[n.DataAtom] > 0:
		e.lineBreak(blocks[n.DataAtom])
	}
}

// text writes character data, collapsing whitespace outside <pre>.
func (e *extractor) text(s string) {
	if e.pre > 0 {
		e.raw(s)
		return
	}
	if s == "" {
		return
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	words := strings.Fields(s)
	if len(words) == 0 {
		e.space = true
		return
	}
	if unicode.IsSpace(first) {
		e.space = true
	}
	e.raw(strings.Join(words, " "))
	e.space = unicode.IsSpace(last)
}

// raw writes s after the breaks or space owed, up to the text cap.
func (e *extractor) raw(s string) {
	if e.textFull {
		return
	}
	if e.out.Len() > 0 {
		if e.breaks > 0 {
			s = strings.Repeat("\n", e.breaks) + s
		} else if e.space && !strings.HasSuffix(e.out.String(), "\n") {
			s = " " + s
		}
	}
	e.breaks, e.space, e.bullet = 0, false, false
	if room := e.maxText - e.out.Len(); len(s) > room {
		e.out.WriteString(truncateUTF8(s, max(room, 0)))
		e.textFull = true
		return
	}
	e.out.WriteString(s)
}

func (e *extractor) lineBreak(n int) {
	if e.bullet {
		return
	}
	e.breaks = max(e.breaks, n)
	e.space = false
}

// link records an http(s) link once per URL, with its text.
func (e *extractor) link(n *html.Node) {
	href := strings.TrimSpace(attr(n, "href"))
	if href == "" || strings.HasPrefix(href, "#") {
		return
	}
	u, err := e.base.Parse(href)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return
	}
	u.Fragment = ""
	abs := u.String()
	if e.seen[abs] || len(abs) > maxLinkURL {
		return
	}
	if len(e.links) >= e.maxLinks {
		e.linksFull = true
		return
	}
	e.seen[abs] = true
	text := collapse(textOf(n))
	if text == "" {
		text = collapse(attr(n, "title"))
	}
	e.links = append(e.links, Link{Text: truncateUTF8(text, maxLinkText), URL: abs})
}

// hidden reports elements marked invisible to readers.
func hidden(n *html.Node) bool {
	for _, a := range n.Attr {
		switch {
		case a.Key == "hidden":
			return true
		case a.Key == "aria-hidden" && a.Val == "true":
			return true
		case a.Key == "role" && (a.Val == "navigation" || a.Val == "banner" || a.Val == "contentinfo"):
			return true
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// find returns the first element of kind a in document order.
func find(n *html.Node, a atom.Atom) *html.Node {
	for d := range n.Descendants() {
		if d.Type == html.ElementNode && d.DataAtom == a {
			return d
		}
	}
	return nil
}

// textOf concatenates the text inside n, skipping non-readable elements.
func textOf(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
			b.WriteByte(' ')
			return
		}
		if n.Type == html.ElementNode && n.DataAtom != atom.Title && skipped[n.DataAtom] {
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

func collapse(s string) string { return strings.Join(strings.Fields(s), " ") }

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
