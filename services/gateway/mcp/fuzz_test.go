package mcp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzCheckBody: a POSTed /mcp body is either passed on — valid JSON within
// the limits, one JSON-RPC 2.0 message or a non-empty batch of them — or
// refused with a JSON-RPC error response (a 4xx whose body is valid JSON and
// says what is wrong). Nothing in between, and never a panic.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Calculator_Add","arguments":{"a":1,"b":2}}}]`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`, `[]`, `{"jsonrpc":"1.0","method":"x"}`, `{"JSONRPC":"2.0"}`,
		`[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]`, `{"jsonrpc":"2.0","method":""}`, "\xff\xfe", `null`,
	} {
		f.Add([]byte(s))
	}
	const limit, maxValues = 4096, 64
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(body))
		got := checkBody(w, r, limit, maxValues)
		if got != nil {
			if w.Code != http.StatusOK || w.Body.Len() != 0 {
				t.Fatalf("passed on %q but also answered %d %s", body, w.Code, w.Body)
			}
			if !bytes.Equal(got, body) || !json.Valid(got) || len(got) > limit {
				t.Fatalf("passed on %q", body)
			}
			return
		}
		if w.Code < 400 || w.Code > 499 {
			t.Fatalf("refused %q with status %d", body, w.Code)
		}
		var resp struct {
			JSONRPC string `json:"jsonrpc"`
			Error   struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.JSONRPC != "2.0" || resp.Error.Code == 0 || resp.Error.Message == "" {
			t.Fatalf("refusal of %q is not a JSON-RPC error: %s (%v)", body, w.Body, err)
		}
	})
}
