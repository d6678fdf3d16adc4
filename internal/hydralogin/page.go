package hydralogin

import (
	"bytes"
	"html/template"
	"net/http"
)

// The pages: plain forms, no script (the CSP allows none).
var (
	layout = `<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{block "title" .}}{{end}} · toolfleet dev sign-in</title><link rel="stylesheet" href="/style.css"></head>
<body><main><p class="tag">toolfleet dev · development sign-in for Ory Hydra (no passwords: never expose it)</p>
{{block "body" .}}{{end}}</main></body></html>`

	homePage = page(`{{define "title"}}Login and consent{{end}}{{define "body"}}
<h1>Hydra's login and consent app</h1>
<p>Start Hydra with these URLs and its sign-ins come here:</p>
<pre>URLS_LOGIN={{.Base}}/login
URLS_CONSENT={{.Base}}/consent
URLS_LOGOUT={{.Base}}/logout</pre>{{end}}`)

	loginPage = page(`{{define "title"}}Sign in{{end}}{{define "body"}}
<h1>Sign in to {{.Client}}</h1>
{{with .Scopes}}<p>It asks for: {{range .}}<code>{{.}}</code> {{end}}</p>{{end}}
<form method="post" action="/login">
<input type="hidden" name="challenge" value="{{.Challenge}}"><input type="hidden" name="csrf" value="{{.CSRF}}">
<label for="subject">Sign in as</label>
<input id="subject" name="subject" value="{{.Subject}}" required maxlength="128" pattern="[A-Za-z0-9._@:\-]+" autofocus>
<div class="buttons"><button name="action" value="accept">Sign in</button>
<button name="action" value="deny" class="secondary" formnovalidate>Cancel</button></div>
</form>{{end}}`)

	consentPage = page(`{{define "title"}}Allow access{{end}}{{define "body"}}
<h1>Allow {{.Client}}?</h1>
<p>Signed in as <strong>{{.Subject}}</strong>.{{with .Audiences}} For: {{range .}}<code>{{.}}</code> {{end}}{{end}}</p>
<form method="post" action="/consent">
<input type="hidden" name="challenge" value="{{.Challenge}}"><input type="hidden" name="csrf" value="{{.CSRF}}">
<fieldset><legend>Scopes to grant</legend>
{{range .Scopes}}<label class="check"><input type="checkbox" name="scope" value="{{.}}" checked> <code>{{.}}</code></label>{{else}}<p>No scopes requested.</p>{{end}}
</fieldset>
<div class="buttons"><button name="action" value="accept">Allow</button>
<button name="action" value="deny" class="secondary">Deny</button></div>
</form>{{end}}`)
)

// page parses body into the layout.
func page(body string) *template.Template {
	return template.Must(template.Must(template.New("layout").Parse(layout)).Parse(body))
}

// render writes t with data; a template error is a 500 without details.
func render(w http.ResponseWriter, status int, t *template.Template, data any) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

const style = `body{font:16px/1.5 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:28rem;margin:4rem auto;padding:2rem;background:#fff;border-radius:10px;box-shadow:0 1px 4px #0002}
.tag{font-size:.8rem;color:#6b7280;margin-top:0}h1{font-size:1.4rem}
label{display:block;margin:.8rem 0 .3rem;font-weight:600}label.check{font-weight:400}
input[name=subject]{width:100%;box-sizing:border-box;padding:.5rem;font:inherit;border:1px solid #c8ccd4;border-radius:6px}
fieldset{border:1px solid #e1e4ea;border-radius:6px}code,pre{font-family:ui-monospace,monospace;font-size:.9em}
pre{background:#f0f2f5;padding:.8rem;border-radius:6px;overflow-x:auto}
.buttons{margin-top:1.2rem;display:flex;gap:.6rem}
button{font:inherit;padding:.5rem 1.1rem;border:0;border-radius:6px;background:#2456d6;color:#fff;cursor:pointer}
button.secondary{background:#e5e7eb;color:#1d2330}`

func serveStyle(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=3600")
	_, _ = w.Write([]byte(style))
}
