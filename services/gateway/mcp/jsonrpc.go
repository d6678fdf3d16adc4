package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/toolfleet/toolfleet/internal/jsonerr"
	"github.com/toolfleet/toolfleet/internal/jsonsize"
)

// The MCP SDK decodes a POSTed message leniently: {"jsonrpc":"2.0","id":1,
// "METHOD":"tools/call"} has no "method", so it is taken for a response to a
// request of the server's, answered 202 and dropped. Each POST is checked here
// first: a body that is not well-formed JSON-RPC 2.0 gets a JSON-RPC error
// (HTTP 400), never a 202.

// JSON-RPC 2.0 error codes.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
)

// wireMessage has the members a JSON-RPC 2.0 message may have.
var wireMembers = map[string]bool{"jsonrpc": true, "id": true, "method": true, "params": true, "result": true, "error": true}

// checkMessage reports what is wrong with one JSON-RPC message, or "".
func checkMessage(raw json.RawMessage) (id json.RawMessage, problem string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, "a message must be a JSON object"
	}
	id = m["id"]
	for k := range m {
		if !wireMembers[k] {
			return id, fmt.Sprintf("unknown member %q (member names are case-sensitive: jsonrpc, id, method, params, result, error)", k)
		}
	}
	if string(m["jsonrpc"]) != `"2.0"` {
		return id, `"jsonrpc" must be "2.0"`
	}
	_, hasMethod := m["method"]
	_, hasResult := m["result"]
	_, hasError := m["error"]
	switch {
	case hasMethod:
		var method string
		if json.Unmarshal(m["method"], &method) != nil || method == "" {
			return id, `"method" must be a non-empty string`
		}
		if hasResult || hasError {
			return id, `a request has no "result" or "error"`
		}
	case hasResult == hasError:
		return id, `a message needs "method" (a request or notification), or exactly one of "result" and "error" (a response)`
	case len(id) == 0:
		return id, `a response needs the "id" of its request`
	}
	return id, ""
}

// checkBody reads and checks a POSTed body (one message or a batch) within
// limit bytes; it writes the JSON-RPC error and returns nil when it is not
// acceptable.
func checkBody(w http.ResponseWriter, r *http.Request, limit int64, maxValues int) []byte {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeRPCError(w, http.StatusRequestEntityTooLarge, nil, codeInvalidRequest,
			fmt.Sprintf("the message is larger than this server's limit of %d bytes", tooBig.Limit))
		return nil
	case err != nil:
		writeRPCError(w, http.StatusBadRequest, nil, codeParseError, "the body could not be read")
		return nil
	case !json.Valid(body):
		// Where and what, as every other surface says it (internal/jsonerr).
		writeRPCError(w, http.StatusBadRequest, nil, codeParseError, "the body is not valid JSON: "+jsonerr.Syntax(body))
		return nil
	}
	if jsonsize.Values(body, maxValues) > maxValues {
		writeRPCError(w, http.StatusRequestEntityTooLarge, nil, codeInvalidRequest,
			fmt.Sprintf("the message holds more than %d JSON values, this server's limit", maxValues))
		return nil
	}
	msgs := []json.RawMessage{body}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '[' {
		// A fresh slice: decoding into msgs would copy the first message over
		// body itself (RawMessage appends into the element it replaces).
		var batch []json.RawMessage
		if json.Unmarshal(body, &batch) != nil || len(batch) == 0 {
			writeRPCError(w, http.StatusBadRequest, nil, codeInvalidRequest, "a batch must be a non-empty array of messages")
			return nil
		}
		msgs = batch
	}
	for _, m := range msgs {
		if id, problem := checkMessage(m); problem != "" {
			writeRPCError(w, http.StatusBadRequest, id, codeInvalidRequest, "invalid JSON-RPC message: "+problem)
			return nil
		}
	}
	return body
}

// writeRPCError answers with one JSON-RPC error response.
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": msg}})
}
