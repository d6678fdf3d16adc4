package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolfleet/toolfleet/services/gateway/mcp/orchestration"
)

//go:embed templates/*.html
var templateFiles embed.FS

// pageNames are the full pages; each is layout.html plus its own file, which
// defines "title" and "content". fragments.html and programlive.html (the
// program page's live parts) are in every set.
var pageNames = []string{"signin", "runs", "run", "inbox", "error", "programs", "program", "tools", "tool", "connections"}

// pages are the parsed templates. Every payload (model text, tool input and
// output, reasons, ids) reaches the page through html/template's contextual
// escaping; nothing is ever converted to template.HTML.
type pages struct {
	sets map[string]*template.Template
	frag *template.Template
}

var funcs = template.FuncMap{
	"pretty": prettyJSON,
	"when":   when,
	"since":  since,
	"status": statusClass,
	"join":   strings.Join,
	"words":  func(s string) string { return strings.ReplaceAll(s, "_", " ") },
	"prefix": func() string { return Prefix },
	// mcptask: a run or program an MCP client started as a task.
	"mcptask": orchestration.IsTaskID,
	"dict": func(a any, csrf, back string) (approvalForm, error) {
		switch v := a.(type) {
		case *approvalView:
			return approvalForm{A: *v, CSRF: csrf, Back: back}, nil
		case approvalView:
			return approvalForm{A: v, CSRF: csrf, Back: back}, nil
		}
		return approvalForm{}, fmt.Errorf("dict: %T is not an approval", a)
	},
	"qform": func(q any, csrf, back string) (questionForm, error) {
		switch v := q.(type) {
		case *questionView:
			if v != nil {
				return questionForm{Q: *v, CSRF: csrf, Back: back}, nil
			}
		case questionView:
			return questionForm{Q: v, CSRF: csrf, Back: back}, nil
		}
		return questionForm{}, fmt.Errorf("qform: %T is not a question", q)
	},
}

// approvalForm is what the "approval" fragment renders: the call, the
// session's CSRF token and where the decision returns to.
type approvalForm struct {
	A          approvalView
	CSRF, Back string
}

func parsePages() (*pages, error) {
	p := &pages{sets: map[string]*template.Template{}}
	for _, n := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/fragments.html", "templates/programlive.html", "templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", n, err)
		}
		p.sets[n] = t
	}
	frag, err := template.New("fragments.html").Funcs(funcs).ParseFS(templateFiles, "templates/fragments.html", "templates/programlive.html")
	if err != nil {
		return nil, fmt.Errorf("console: parse fragments: %w", err)
	}
	p.frag = frag
	return p, nil
}

// layout is what the layout shows around every page.
type layout struct {
	Session    *session
	CSRF       string
	Subject    string
	SignedIn   bool
	AuthOff    bool
	InboxCount int
	Page       any
}

// render writes page name with data inside the layout (the status is
// already written by the caller when not 200).
func (s *Server) render(w http.ResponseWriter, r *http.Request, ss *session, name string, status int, data any) {
	l := layout{AuthOff: s.cfg.AuthOff, Page: data, InboxCount: -1}
	if ss != nil {
		l.CSRF, l.Subject, l.SignedIn = ss.csrf, ss.subject, ss.signedIn
		if ss.signedIn && status < 400 {
			if a := s.api.Load(); a != nil {
				l.InboxCount = s.inboxCount(r, ss, a)
			}
		}
	}
	var buf bytes.Buffer
	if err := s.pages.sets[name].Execute(&buf, l); err != nil {
		http.Error(w, "console: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.Copy(w, &buf)
}

// fragment renders one named fragment (the run page's live parts).
func (s *Server) fragment(name string, data any) (string, error) {
	var buf bytes.Buffer
	if err := s.pages.frag.ExecuteTemplate(&buf, name, data); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// prettyJSON indents s when it is JSON; else s as is. Either way the
// template escapes it as text.
func prettyJSON(s string) string {
	t := strings.TrimSpace(s)
	if t == "" || (t[0] != '{' && t[0] != '[') {
		return s
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(t), "", "  "); err != nil {
		return s
	}
	return buf.String()
}

// isJSON reports whether s looks like a JSON object or array.
func isJSON(s string) bool {
	t := strings.TrimSpace(s)
	return t != "" && (t[0] == '{' || t[0] == '[') && json.Valid([]byte(t))
}

func when(ts *timestamppb.Timestamp) string {
	if ts == nil || (ts.GetSeconds() == 0 && ts.GetNanos() == 0) {
		return "—"
	}
	return ts.AsTime().UTC().Format("2006-01-02 15:04:05Z")
}

func since(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	d := time.Since(ts.AsTime()).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String() + " ago"
}

// statusClass maps a status or state word to its CSS class.
func statusClass(s string) string {
	switch strings.ToLower(strings.ReplaceAll(s, " ", "_")) {
	case "running", "started":
		return "st-running"
	case "waiting_approval", "waiting_input", "waiting", "approval.requested", "input.requested":
		return "st-waiting"
	case "completed", "done":
		return "st-ok"
	case "failed", "timedout", "terminated", "budget_exhausted":
		return "st-bad"
	case "canceled", "cancelled":
		return "st-muted"
	}
	return "st-other"
}
