package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// maxToolsListed bounds the catalog one page shows.
const maxToolsListed = 500

// toolRow is one tool of the catalog.
type toolRow struct {
	ID, Name, Version, Title, Description string
	Hints, Scopes                         []string
	Approval                              bool
}

func toolURL(id string) string { return Prefix + "tools/" + url.PathEscape(id) }

func hintWords(h *toolfleetv1.ResolvedHints) []string {
	var out []string
	for _, x := range []struct {
		on   bool
		word string
	}{{h.GetReadOnly(), "read-only"}, {h.GetDestructive(), "destructive"}, {h.GetIdempotent(), "idempotent"}, {h.GetOpenWorld(), "open world"}} {
		if x.on {
			out = append(out, x.word)
		}
	}
	return out
}

func rowOf(t *toolfleetv1.ToolDefinition) toolRow {
	return toolRow{ID: t.GetId(), Name: t.GetToolkit() + "." + t.GetName(), Version: t.GetVersion(), Title: t.GetTitle(),
		Description: t.GetDescription(), Hints: hintWords(t.GetHints()), Scopes: t.GetRequirements().GetScopes(),
		Approval: t.GetRequirements().GetRequiresApproval()}
}

// toolsPage lists the tools the principal may call (the gateway's ListTools
// with the session's token answers only those).
func (s *Server) toolsPage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	ctx, cancel := callCtx(r)
	defer cancel()
	var rows []toolRow
	token := ""
	for len(rows) < maxToolsListed {
		res, err := a.tools.ListTools(ctx, as(ss, &toolfleetv1.ListToolsRequest{PageSize: 200, PageToken: token}))
		if err != nil {
			s.failAPI(w, r, ss, "The tools", err)
			return
		}
		for _, t := range res.Msg.GetTools() {
			rows = append(rows, rowOf(t))
		}
		if token = res.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	s.render(w, r, ss, "tools", http.StatusOK, map[string]any{"Tools": rows})
}

// callOutcome is what a try-it call came back with, in the gateway's words.
type callOutcome struct {
	Value, ToolError, Refusal, Code string
	Fields                          [][2]string
	Duration, CallID                string
	OK                              bool
}

func (s *Server) toolPage(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	if t, ok := s.tool(w, r, ss, a); ok {
		s.showTool(w, r, ss, t, nil, nil)
	}
}

// tool reads the tool the path names, as the principal; it answers the
// request itself when it cannot.
func (s *Server) tool(w http.ResponseWriter, r *http.Request, ss *session, a *apis) (*toolfleetv1.ToolDefinition, bool) {
	ctx, cancel := callCtx(r)
	defer cancel()
	id := r.PathValue("id")
	res, err := a.tools.GetTool(ctx, as(ss, &toolfleetv1.GetToolRequest{ToolId: id}))
	if err != nil {
		s.failAPI(w, r, ss, "Tool "+id, err)
		return nil, false
	}
	return res.Msg.GetTool(), true
}

// showTool renders tool t's page with its try-it form (filled with the
// values posted, when any) and the outcome of a call.
func (s *Server) showTool(w http.ResponseWriter, r *http.Request, ss *session, t *toolfleetv1.ToolDefinition, posted url.Values, out *callOutcome) {
	schema, _ := protojson.Marshal(t.GetInputSchema())
	var outSchema string
	if t.GetOutputSchema() != nil {
		b, _ := protojson.Marshal(t.GetOutputSchema())
		outSchema = prettyJSON(string(b))
	}
	status := http.StatusOK
	if out != nil && !out.OK && out.Code != "" {
		status = http.StatusUnprocessableEntity
	}
	if status != http.StatusOK {
		w.WriteHeader(status)
	}
	s.render(w, r, ss, "tool", status, map[string]any{"Tool": rowOf(t), "URL": toolURL(t.GetId()), "CSRF": ss.csrf,
		"Schema": prettyJSON(string(schema)), "OutputSchema": outSchema, "Fields": formFields(t.GetInputSchema(), posted),
		"Outcome": out, "Timeout": timeoutText(t.GetRequirements().GetTimeout().AsDuration())})
}

// tryTool calls the tool through the gateway with the form's values, as
// the principal, and shows what came back. A tool whose contract asks for
// a human's approval is not called from here.
func (s *Server) tryTool(w http.ResponseWriter, r *http.Request, ss *session, a *apis) {
	t, ok := s.tool(w, r, ss, a)
	if !ok {
		return
	}
	if t.GetRequirements().GetRequiresApproval() {
		s.showTool(w, r, ss, t, r.PostForm, &callOutcome{Code: "approval", Refusal: "This tool's contract asks a person to approve each call, so the console does not call it from here: call it in an agent run or a program, and approve the call from the inbox."})
		return
	}
	input, problem := formInput(t.GetInputSchema(), r.PostForm)
	if problem != "" {
		s.showTool(w, r, ss, t, r.PostForm, &callOutcome{Code: "form", Refusal: problem})
		return
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	called, err := a.tools.CallTool(ctx, as(ss, &toolfleetv1.CallToolRequest{ToolId: t.GetId(), Input: input}))
	s.showTool(w, r, ss, t, r.PostForm, outcomeOf(called, err))
}

// outcomeOf words a call's response or error as the gateway did.
func outcomeOf(res *connect.Response[toolfleetv1.CallToolResponse], err error) *callOutcome {
	if err != nil {
		out := &callOutcome{Code: connect.CodeOf(err).String(), Refusal: messageOf(err)}
		var ce *connect.Error
		if ok := asConnect(err, &ce); ok {
			for _, d := range ce.Details() {
				v, derr := d.Value()
				if derr != nil {
					continue
				}
				switch e := v.(type) {
				case *toolfleetv1.ValidationError:
					out.Refusal = e.GetMessage()
					keys := make([]string, 0, len(e.GetParameterErrors()))
					for k := range e.GetParameterErrors() {
						keys = append(keys, k)
					}
					slices.Sort(keys)
					for _, k := range keys {
						out.Fields = append(out.Fields, [2]string{k, e.GetParameterErrors()[k]})
					}
				case *toolfleetv1.ServerError:
					out.Refusal = e.GetMessage()
				}
			}
		}
		return out
	}
	m := res.Msg
	out := &callOutcome{OK: m.GetSuccess(), CallID: m.GetCallId(), Duration: m.GetDuration().AsDuration().String()}
	switch {
	case m.GetValue() != nil:
		b, _ := protojson.Marshal(m.GetValue())
		out.Value = prettyJSON(string(b))
	case m.GetError() != nil:
		out.ToolError = m.GetError().GetMessage()
	case m.GetResultHandle() != nil:
		out.Value = "The result is large; the gateway keeps it as handle " + m.GetResultHandle().GetId()
	case m.GetInputRequired() != nil:
		out.ToolError = "The tool asks its caller for input, which the try-it form cannot give."
	}
	return out
}

// formField is one input of a try-it form, generated from the schema.
type formField struct {
	Name, Type, Description, Value string
	Enum                           []string
	Required, Checked              bool
	// Kind is how the form asks for it: text, number, checkbox, select, json.
	Kind string
}

// maxFormFields bounds the fields generated from a schema.
const maxFormFields = 100

// formFields are the inputs for schema's top-level properties, in order of
// name, holding the posted values when given.
func formFields(schema *structpb.Struct, posted url.Values) []formField {
	props := schema.GetFields()["properties"].GetStructValue().GetFields()
	required := map[string]bool{}
	for _, v := range schema.GetFields()["required"].GetListValue().GetValues() {
		required[v.GetStringValue()] = true
	}
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []formField
	for _, n := range names {
		if len(out) >= maxFormFields {
			break
		}
		p := props[n].GetStructValue()
		f := formField{Name: n, Type: typeOf(p), Description: p.GetFields()["description"].GetStringValue(), Required: required[n]}
		for _, e := range p.GetFields()["enum"].GetListValue().GetValues() {
			f.Enum = append(f.Enum, scalarText(e))
		}
		switch {
		case len(f.Enum) > 0:
			f.Kind = "select"
		case f.Type == "boolean":
			f.Kind = "checkbox"
		case f.Type == "integer" || f.Type == "number":
			f.Kind = "number"
		case f.Type == "string":
			f.Kind = "text"
		default:
			f.Kind = "json" // objects, arrays, and anything else: JSON text
		}
		if posted != nil {
			f.Value, f.Checked = posted.Get("in."+n), posted.Get("in."+n) != ""
		} else if d, ok := p.GetFields()["default"]; ok {
			f.Value = scalarText(d)
			f.Checked = d.GetBoolValue()
		}
		out = append(out, f)
	}
	return out
}

// typeOf is a property's JSON type ("string", …; the first of a list).
func typeOf(p *structpb.Struct) string {
	t := p.GetFields()["type"]
	if l := t.GetListValue(); l != nil {
		for _, v := range l.GetValues() {
			if v.GetStringValue() != "null" {
				return v.GetStringValue()
			}
		}
	}
	return t.GetStringValue()
}

func scalarText(v *structpb.Value) string {
	if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
		return s.StringValue
	}
	b, _ := protojson.Marshal(v)
	return string(b)
}

// formInput builds the call's input from the form. Values are sent as the
// schema types them when they parse so (a number, a boolean, JSON); a value
// that does not parse is sent as text, so the gateway's validation words
// the problem. Only a JSON field that is not JSON is refused here.
func formInput(schema *structpb.Struct, form url.Values) (*structpb.Struct, string) {
	in := map[string]any{}
	for _, f := range formFields(schema, nil) {
		raw := form.Get("in." + f.Name)
		switch f.Kind {
		case "checkbox":
			if raw != "" {
				in[f.Name] = true
			} else if f.Required {
				in[f.Name] = false
			}
			continue
		}
		if raw == "" {
			continue // absent: the gateway says when it is required
		}
		switch {
		case f.Kind == "json":
			var v any
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				return nil, f.Name + " is not JSON: " + err.Error()
			}
			in[f.Name] = v
		case f.Type == "integer" || f.Type == "number":
			if n, err := strconv.ParseFloat(strings.TrimSpace(raw), 64); err == nil {
				in[f.Name] = n
			} else {
				in[f.Name] = raw
			}
		case f.Type == "boolean":
			in[f.Name] = raw == "true"
		default:
			in[f.Name] = raw
		}
	}
	st, err := structpb.NewStruct(in)
	if err != nil {
		return nil, "The input cannot be sent: " + err.Error()
	}
	return st, ""
}

func timeoutText(d time.Duration) string {
	if d <= 0 {
		return "the gateway's default"
	}
	return d.String()
}
