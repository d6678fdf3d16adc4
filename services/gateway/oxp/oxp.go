// Package oxp serves the gateway's OXP 1.0 HTTP JSON surface:
//
//   - GET /health → {"status": "healthy", "tools": n}, or 503 with "unavailable"
//     while the gateway is not ready (the same answer as grpc.health.v1);
//   - GET /tools?toolkit=&filter=&page_size=&page_token=&all_versions= → the
//     tool definitions, paginated;
//   - POST /tools/call {"request": CallToolRequest} → {"result": CallToolResponse};
//   - GET /results/{id} → the bytes of a result kept behind a result handle,
//     with its Content-Type, for the principal that made the call (404 for
//     anyone else, as for an unknown or expired id).
//
// A failure before the tool ran is a JSON body with its code and message, and an
// HTTP status that says what to do: 422 for a validation error (with
// parameter_errors), 401/403 for auth, 409 for a reused call_id, 429 with
// Retry-After when the caller is over a rate limit or the gateway at a bound,
// 503 when a retry may succeed, 400 otherwise. An execution error is a 200 with
// success=false. The pipeline itself is the [Backend] (the gateway); this
// package only speaks HTTP and JSON, and refuses what is too big or not JSON
// before decoding it.
package oxp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/jsonerr"
	"github.com/toolfleet/toolfleet/internal/jsonsize"
)

// Schema is the $schema of OXP 1.0 bodies.
const Schema = "urn:oxp:1.0"

// Backend is the gateway as the OXP surface sees it. Each method authenticates
// the caller from the request's headers and runs the gateway's pipeline.
type Backend interface {
	// ToolCount is the number of served tool versions.
	ToolCount() int
	// Serving reports whether the server as a whole is ready: GET /health
	// answers 200 "healthy" only then, and 503 "unavailable" otherwise, as
	// grpc.health.v1 answers NOT_SERVING.
	Serving() bool
	ListTools(ctx context.Context, h http.Header, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error)
	CallTool(ctx context.Context, h http.Header, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error)
	// OpenResult opens the result behind a handle id for the caller; the
	// caller closes it.
	OpenResult(ctx context.Context, h http.Header, id string) (*Result, error)
	// Failure renders an error of ListTools, CallTool or OpenResult for the
	// caller (its code and detail; never internal text).
	Failure(err error) *toolfleetv1.CallFailure
}

// Result is a stored result being read.
type Result struct {
	Body        io.ReadCloser
	ContentType string
	// Size is the length of Body in bytes.
	Size int64
}

// Options bound what one request may cost.
type Options struct {
	// MaxRequestBytes bounds a POSTed body.
	MaxRequestBytes int64
	// MaxInputValues bounds the JSON values of a POSTed body, counted before decoding.
	MaxInputValues int
}

// Server is the OXP surface of one gateway.
type Server struct {
	b    Backend
	opts Options
}

// New returns the OXP surface of b.
func New(b Backend, opts Options) *Server { return &Server{b: b, opts: opts} }

// Register adds the OXP routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /tools", s.listTools)
	mux.HandleFunc("POST /tools/call", s.callTool)
	mux.HandleFunc("GET /results/{id}", s.fetchResult)
}

// protoJSON renders OXP bodies with the proto (snake_case) field names the spec uses.
var protoJSON = protojson.MarshalOptions{UseProtoNames: true}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if !s.b.Serving() {
		WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "tools": s.b.ToolCount()})
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"status": "healthy", "tools": s.b.ToolCount()})
}

// listTools serves GET /tools?toolkit=&filter=&page_size=&page_token=&all_versions=.
func (s *Server) listTools(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &toolfleetv1.ListToolsRequest{Toolkit: q.Get("toolkit"), Filter: q.Get("filter"),
		PageToken: q.Get("page_token"), AllVersions: q.Get("all_versions") == "true"}
	if n, err := jsonNumber(q.Get("page_size")); err == nil {
		req.PageSize = int32(n)
	}
	resp, err := s.b.ListTools(r.Context(), r.Header, req)
	if err != nil {
		WriteFailure(w, s.b.Failure(err))
		return
	}
	items := make([]json.RawMessage, 0, len(resp.GetTools()))
	for _, d := range resp.GetTools() {
		items = append(items, mustJSON(d))
	}
	body := map[string]any{"$schema": Schema, "items": items}
	if resp.GetNextPageToken() != "" {
		body["next_page_token"] = resp.GetNextPageToken()
	}
	WriteJSON(w, http.StatusOK, body)
}

// callTool serves POST /tools/call: {"$schema"?, "request": CallToolRequest} →
// 200 {"result": CallToolResponse}; 400 server error, 401/403 auth, 422 validation.
func (s *Server) callTool(w http.ResponseWriter, r *http.Request) {
	// JSON only: a browser can send text/plain or a form cross-origin without a
	// preflight, never application/json.
	if !isJSON(r.Header.Get("Content-Type")) {
		WriteJSON(w, http.StatusUnsupportedMediaType, FailureBody(refusal("INVALID_ARGUMENT", "",
			"the body must be JSON, sent with Content-Type: application/json")))
		return
	}
	var envelope struct {
		Schema  string          `json:"$schema"`
		Request json.RawMessage `json:"request"`
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxRequestBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		WriteJSON(w, http.StatusRequestEntityTooLarge, FailureBody(refusal("RESOURCE_EXHAUSTED", "",
			fmt.Sprintf("the body is larger than this gateway's limit of %d bytes", tooBig.Limit))))
		return
	}
	if err == nil {
		err = json.Unmarshal(b, &envelope)
	}
	if err != nil || len(envelope.Request) == 0 {
		msg := "the body must be a JSON object {\"request\": {\"tool_id\": ..., \"input\": {...}}}"
		if s := jsonerr.Syntax(b); s != "" {
			msg += "; it is not valid JSON: " + s
		}
		WriteFailure(w, refusal("INVALID_ARGUMENT", "", msg))
		return
	}
	if jsonsize.Values(envelope.Request, s.opts.MaxInputValues) > s.opts.MaxInputValues {
		// Worded as the gateway's Connect codec words it.
		WriteJSON(w, http.StatusRequestEntityTooLarge, FailureBody(refusal("RESOURCE_EXHAUSTED", "",
			fmt.Sprintf("the request holds more than %d JSON values, this gateway's limit; send less data per call", s.opts.MaxInputValues))))
		return
	}
	req := &toolfleetv1.CallToolRequest{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(envelope.Request, req); err != nil {
		WriteFailure(w, refusal("INVALID_ARGUMENT", "", "the request does not match the OXP CallToolRequest schema: "+jsonerr.Describe(envelope.Request, err).Error()))
		return
	}
	resp, err := s.b.CallTool(r.Context(), r.Header, req)
	if err != nil {
		WriteFailure(w, s.b.Failure(err))
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"$schema": Schema, "result": result(resp)})
}

// fetchResult serves GET /results/{id}: 200 with the result's bytes; 404 for
// an unknown, expired or another principal's id; 400 for a malformed one.
func (s *Server) fetchResult(w http.ResponseWriter, r *http.Request) {
	res, err := s.b.OpenResult(r.Context(), r.Header, r.PathValue("id"))
	if err != nil {
		f := s.b.Failure(err)
		if f.GetCode() == "NOT_FOUND" {
			WriteJSON(w, http.StatusNotFound, FailureBody(f))
			return
		}
		WriteFailure(w, f)
		return
	}
	defer res.Body.Close()
	w.Header().Set("Content-Type", res.ContentType)
	w.Header().Set("Content-Length", strconv.FormatInt(res.Size, 10))
	w.Header().Set("OXP-Version", "1.0")
	// A result is the caller's own: no shared cache may keep it.
	w.Header().Set("Cache-Control", "private, no-store")
	w.WriteHeader(http.StatusOK)
	// A read that fails midway cuts the body short of Content-Length, which
	// the client sees as a broken response.
	_, _ = io.Copy(w, res.Body)
}

// refusal is a server error of this surface itself (the body, not the call).
func refusal(code, developer, message string) *toolfleetv1.CallFailure {
	return &toolfleetv1.CallFailure{Code: code, Detail: &toolfleetv1.CallFailure_ServerError{
		ServerError: &toolfleetv1.ServerError{Message: message, DeveloperMessage: developer}}}
}

// result renders a response with its duration in milliseconds: as "duration",
// OXP's name, and as "duration_ms", which says the unit.
func result(resp *toolfleetv1.CallToolResponse) map[string]any {
	ms := float64(resp.GetDuration().AsDuration().Microseconds()) / 1000
	out := map[string]any{
		"call_id":     resp.GetCallId(),
		"tool_id":     resp.GetToolId(),
		"duration":    ms,
		"duration_ms": ms,
		"success":     resp.GetSuccess(),
	}
	switch {
	case resp.GetInputRequired() != nil:
		// The tool asks its caller for input: repeat the call with the answers.
		out["input_required"] = mustJSON(resp.GetInputRequired())
	case resp.GetResultHandle() != nil:
		out["result_handle"] = mustJSON(resp.GetResultHandle())
	case resp.GetSuccess():
		out["value"] = mustJSON(resp.GetValue())
	default:
		out["error"] = mustJSON(resp.GetError())
	}
	if len(resp.GetLogs()) > 0 || resp.GetLogsDropped() > 0 {
		logs := make([]json.RawMessage, len(resp.GetLogs()))
		for i, l := range resp.GetLogs() {
			logs[i] = mustJSON(l)
		}
		out["logs"] = logs
		if n := resp.GetLogsDropped(); n > 0 {
			out["logs_dropped"] = n
		}
	}
	return out
}

// WriteFailure renders a failure before the tool ran: 422 with parameter_errors
// for validation, 401/403 for auth, 409 for a call_id conflict, 429 when the
// gateway sheds load or the caller is over a rate limit or quota (Retry-After
// in seconds, retry_after_ms in the body when the gateway knows), 503 when a retry may succeed (worker or
// idempotency store unavailable, a tool not loaded yet; with Retry-After when
// the gateway says when), 400 for every other server error.
func WriteFailure(w http.ResponseWriter, f *toolfleetv1.CallFailure) {
	if ve := f.GetValidationError(); ve != nil {
		WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{"$schema": Schema,
			"message": ve.GetMessage(), "parameter_errors": ve.GetParameterErrors(), "call_id": f.GetCallId()})
		return
	}
	switch f.GetCode() {
	case "UNAUTHENTICATED":
		w.Header().Set("WWW-Authenticate", `Bearer realm="toolfleet"`)
		WriteJSON(w, http.StatusUnauthorized, FailureBody(f))
	case "PERMISSION_DENIED":
		WriteJSON(w, http.StatusForbidden, FailureBody(f))
	case "ALREADY_EXISTS":
		WriteJSON(w, http.StatusConflict, FailureBody(f)) // call_id reused with another input
	case "UNAVAILABLE":
		if f.GetRetryAfterMs() > 0 { // e.g. a tool the gateway has not loaded yet
			w.Header().Set("Retry-After", strconv.FormatInt((f.GetRetryAfterMs()+999)/1000, 10))
		}
		WriteJSON(w, http.StatusServiceUnavailable, FailureBody(f)) // retryable
	case "RESOURCE_EXHAUSTED":
		// Whole seconds, rounded up; the body's retry_after_ms is exact.
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, (f.GetRetryAfterMs()+999)/1000), 10))
		WriteJSON(w, http.StatusTooManyRequests, FailureBody(f)) // retryable: the gateway is at a bound
	default:
		WriteJSON(w, http.StatusBadRequest, FailureBody(f))
	}
}

// FailureBody is the OXP body of a server error: $schema, code, message, and
// developer_message, call_id, retry_after_ms and connection_required when set.
func FailureBody(f *toolfleetv1.CallFailure) map[string]any {
	se := f.GetServerError()
	body := map[string]any{"$schema": Schema, "message": se.GetMessage(), "code": f.GetCode()}
	if d := se.GetDeveloperMessage(); d != "" {
		body["developer_message"] = d
	}
	if f.GetCallId() != "" {
		body["call_id"] = f.GetCallId()
	}
	if ms := f.GetRetryAfterMs(); ms > 0 {
		body["retry_after_ms"] = ms
	}
	if c := f.GetConnectionRequired(); c != nil {
		// The tool acts with the caller's account at a provider it has not
		// connected: how to connect (docs/credentials.md).
		scopes := c.GetScopes()
		if scopes == nil {
			scopes = []string{}
		}
		body["connection_required"] = map[string]any{"provider": c.GetProvider(), "scopes": scopes,
			"authorization_url": c.GetAuthorizationUrl(), "reason": c.GetReason()}
	}
	return body
}

func mustJSON(m proto.Message) json.RawMessage {
	b, err := protoJSON.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// WriteJSON writes v as an OXP JSON body with status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OXP-Version", "1.0")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// isJSON reports whether a Content-Type is JSON (application/json, or +json).
func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

func jsonNumber(s string) (int64, error) {
	var n json.Number = json.Number(s)
	return n.Int64()
}
