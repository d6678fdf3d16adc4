package apibase_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/toolfleet/toolfleet/orchestrator/toolcall/apibase"
)

// service stands in for a Connect service: it makes its own handler.
type service struct{ answer string }

func (s *service) Handler() (string, http.Handler) {
	return "/test.v1.Service/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, s.answer)
	})
}

// A Late service is Unavailable until Set, then served by the handler the
// service makes, and Get returns it.
func TestLate(t *testing.T) {
	t.Parallel()
	var late apibase.Late[service, *service]
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		late.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/test.v1.Service/Do", nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get(); code != http.StatusServiceUnavailable || late.Get() != nil {
		t.Fatalf("before Set: status %d, service %v; want 503 and none", code, late.Get())
	}
	s := &service{answer: "ok"}
	late.Set(s)
	if code, body := get(); code != http.StatusOK || body != "ok" || late.Get() != s {
		t.Fatalf("after Set: status %d, body %q; want 200 and the service's answer", code, body)
	}
}
