package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/jsonsize"
)

// OXPSchema is the $schema of OXP 1.0 bodies.
const OXPSchema = "urn:oxp:1.0"

// oxpJSON renders OXP bodies with the proto (snake_case) field names the spec uses.
var oxpJSON = protojson.MarshalOptions{UseProtoNames: true}

func (g *Gateway) httpHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "healthy", "tools": len(g.reg.Current().Defs())})
}

// httpListTools serves GET /tools?toolkit=&filter=&page_size=&page_token=&all_versions=.
func (g *Gateway) httpListTools(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &toolfleetv1.ListToolsRequest{Toolkit: q.Get("toolkit"), Filter: q.Get("filter"),
		PageToken: q.Get("page_token"), AllVersions: q.Get("all_versions") == "true"}
	if n, err := jsonNumber(q.Get("page_size")); err == nil {
		req.PageSize = int32(n)
	}
	resp, err := discover(r.Context(), g, r.Header.Get("Authorization"), req, g.ListTools)
	if err != nil {
		writeCallError(w, asCallError(err))
		return
	}
	items := make([]json.RawMessage, 0, len(resp.GetTools()))
	for _, d := range resp.GetTools() {
		items = append(items, mustJSON(d))
	}
	body := map[string]any{"$schema": OXPSchema, "items": items}
	if resp.GetNextPageToken() != "" {
		body["next_page_token"] = resp.GetNextPageToken()
	}
	writeJSON(w, http.StatusOK, body)
}

// httpCallTool serves POST /tools/call: {"$schema"?, "request": CallToolRequest} →
// 200 {"result": CallToolResponse}; 400 server error, 401/403 auth, 422 validation.
func (g *Gateway) httpCallTool(w http.ResponseWriter, r *http.Request) {
	// JSON only: a browser can send text/plain or a form cross-origin without a
	// preflight, never application/json.
	if !isJSON(r.Header.Get("Content-Type")) {
		writeJSON(w, http.StatusUnsupportedMediaType, serverBody(serverError(codes.InvalidArgument, nil, "",
			"the body must be JSON, sent with Content-Type: application/json")))
		return
	}
	var envelope struct {
		Schema  string          `json:"$schema"`
		Request json.RawMessage `json:"request"`
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxRequestBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeJSON(w, http.StatusRequestEntityTooLarge, serverBody(serverError(codes.ResourceExhausted, nil, "",
			"the body is larger than this gateway's limit of %d bytes", tooBig.Limit)))
		return
	}
	if err == nil {
		err = json.Unmarshal(b, &envelope)
	}
	if err != nil || len(envelope.Request) == 0 {
		writeCallError(w, serverError(codes.InvalidArgument, nil, "",
			"the body must be a JSON object {\"request\": {\"tool_id\": ..., \"input\": {...}}}"))
		return
	}
	if jsonsize.Values(envelope.Request, g.cfg.MaxInputValues) > g.cfg.MaxInputValues {
		writeJSON(w, http.StatusRequestEntityTooLarge, serverBody(serverError(codes.ResourceExhausted, nil, "", "%v", tooManyValues(g.cfg.MaxInputValues))))
		return
	}
	req := &toolfleetv1.CallToolRequest{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(envelope.Request, req); err != nil {
		writeCallError(w, serverError(codes.InvalidArgument, nil, err.Error(), "the request does not match the OXP CallToolRequest schema"))
		return
	}
	resp, err := g.authenticated(r.Context(), credentialsOf(r.Header), req)
	if err != nil {
		writeCallError(w, asCallError(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"$schema": OXPSchema, "result": oxpResult(resp)})
}

// oxpResult renders a response with its duration in milliseconds, as OXP has it.
func oxpResult(resp *toolfleetv1.CallToolResponse) map[string]any {
	out := map[string]any{
		"call_id":  resp.GetCallId(),
		"tool_id":  resp.GetToolId(),
		"duration": float64(resp.GetDuration().AsDuration().Microseconds()) / 1000,
		"success":  resp.GetSuccess(),
	}
	if resp.GetSuccess() {
		out["value"] = mustJSON(resp.GetValue())
	} else {
		out["error"] = mustJSON(resp.GetError())
	}
	return out
}

// writeCallError renders a failure before the tool ran: 422 with parameter_errors
// for validation, 401/403 for auth, 409 for a call_id conflict, 503 when a retry
// may succeed (worker or idempotency store unavailable), 400 for every other
// server error.
func writeCallError(w http.ResponseWriter, ce *CallError) {
	switch {
	case ce.Validation != nil:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"$schema": OXPSchema,
			"message": ce.Validation.GetMessage(), "parameter_errors": ce.Validation.GetParameterErrors(), "call_id": ce.CallID})
		return
	case ce.Code == codes.Unauthenticated:
		w.Header().Set("WWW-Authenticate", `Bearer realm="toolfleet"`)
		writeJSON(w, http.StatusUnauthorized, serverBody(ce))
	case ce.Code == codes.PermissionDenied:
		writeJSON(w, http.StatusForbidden, serverBody(ce))
	case ce.Code == codes.AlreadyExists:
		writeJSON(w, http.StatusConflict, serverBody(ce)) // call_id reused with another input
	case ce.Code == codes.Unavailable:
		writeJSON(w, http.StatusServiceUnavailable, serverBody(ce)) // retryable
	default:
		writeJSON(w, http.StatusBadRequest, serverBody(ce))
	}
}

func serverBody(ce *CallError) map[string]any {
	body := map[string]any{"$schema": OXPSchema, "message": ce.Server.GetMessage(), "code": codeName(ce.Code)}
	if d := ce.Server.GetDeveloperMessage(); d != "" {
		body["developer_message"] = d
	}
	if ce.CallID != "" {
		body["call_id"] = ce.CallID
	}
	return body
}

func mustJSON(m proto.Message) json.RawMessage {
	b, err := oxpJSON.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OXP-Version", "1.0")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func jsonNumber(s string) (int64, error) {
	var n json.Number = json.Number(s)
	return n.Int64()
}
