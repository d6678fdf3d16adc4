package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	webv1 "github.com/toolfleet/toolfleet/gen/tools/web/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/workers/web/web"
)

// serve runs the Web toolkit in a real worker on loopback until the test ends.
func serve(t *testing.T, cfg web.Config) webv1.WebServiceClient {
	t.Helper()
	conn := tooltest.Serve(t, tool.Config{Name: "web"}, func(w *tool.Worker) {
		svc := web.New(cfg)
		w.OnStop(svc.Close)
		webv1.RegisterWebServiceServer(w, svc)
	})
	return webv1.NewWebServiceClient(conn)
}

func TestWorkerEndToEnd(t *testing.T) {
	t.Parallel()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = fmt.Fprint(w, `<title>Docs</title><h1>Welcome</h1><p>Read <a href="/guide">the guide</a>.</p>`)
	}))
	t.Cleanup(site.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	// The default worker refuses the loopback site with an execution error.
	_, err := serve(t, web.Config{}).Fetch(ctx, &webv1.FetchRequest{Url: site.URL})
	if te, ok := tool.AsToolError(err); !ok || !strings.Contains(te.GetMessage(), "is loopback") || te.GetDeveloperMessage() == "" {
		t.Fatalf("Fetch of a loopback site err = %v, want a refusal", err)
	}

	// With private addresses allowed, the page comes back as text.
	resp, err := serve(t, web.Config{Policy: web.Policy{AllowPrivate: true}}).Fetch(ctx, &webv1.FetchRequest{Url: site.URL})
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if resp.GetTitle() != "Docs" || resp.GetText() != "# Welcome\n\nRead the guide." || len(resp.GetLinks()) != 1 {
		t.Errorf("Fetch = title %q, text %q, links %v", resp.GetTitle(), resp.GetText(), resp.GetLinks())
	}

	// A URL that is not http(s) never reaches the tool: the contract rejects it.
	_, err = serve(t, web.Config{}).Fetch(ctx, &webv1.FetchRequest{Url: "file:///etc/passwd"})
	if _, ok := tool.AsValidationError(err); !ok {
		t.Errorf("Fetch(file:///etc/passwd) err = %v, want a validation error", err)
	}
}
