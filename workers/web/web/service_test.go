package web

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	webv1 "github.com/toolfleet/toolfleet/gen/tools/web/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// All servers below listen on loopback; the tests never touch another network.

// serveOn starts an HTTP server on host (a loopback address) until the test ends.
func serveOn(t *testing.T, host string, h http.Handler) *httptest.Server {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", host, err)
	}
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = lis
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

const page = `<!doctype html><html><head><title>Test page</title></head><body>
<nav><a href="/menu">Menu</a></nav><main><h1>Hello</h1><p>Some <a href="/next">next page</a> text.</p></main></body></html>`

// site serves a small site: an HTML page, JSON, plain text in Latin-1, an image,
// redirect chains and a big body.
func site() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("X-Internal-Secret", "not for models")
		_, _ = fmt.Fprint(w, page)
	})
	mux.HandleFunc("/data.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"ok": true}`)
	})
	mux.HandleFunc("/latin1.txt", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=iso-8859-1")
		_, _ = w.Write([]byte("caf\xe9 cr\xe8me"))
	})
	mux.HandleFunc("/image.png", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
	})
	mux.HandleFunc("/big.txt", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = fmt.Fprint(w, strings.Repeat("0123456789", 1000))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	})
	// /hops/N redirects N times before landing on /page.
	mux.HandleFunc("/hops/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		if n <= 0 {
			http.Redirect(w, r, "/page", http.StatusFound)
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/hops/%d", n-1), http.StatusFound)
	})
	mux.HandleFunc("/to", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
	})
	// /slow answers only when the client gives up.
	mux.HandleFunc("/slow", func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	return mux
}

func fetch(t *testing.T, svc *Service, u string, maxBytes int32) (*webv1.FetchResponse, error) {
	t.Helper()
	return svc.Fetch(t.Context(), &webv1.FetchRequest{Url: u, MaxBytes: maxBytes})
}

func wantRefused(t *testing.T, err error, want string) {
	t.Helper()
	te, ok := tool.AsToolError(err)
	if !ok {
		t.Fatalf("err = %v (%T), want an execution error", err, err)
	}
	if !strings.Contains(te.GetMessage(), want) {
		t.Errorf("message = %q, want it to contain %q", te.GetMessage(), want)
	}
}

// newService returns a service that is closed when the test ends.
func newService(t *testing.T, cfg Config) *Service {
	t.Helper()
	svc := New(cfg)
	t.Cleanup(svc.Close)
	return svc
}

func TestFetchBlockedByDefault(t *testing.T) {
	t.Parallel()
	srv := serveOn(t, "127.0.0.1", site())
	svc := newService(t, Config{})
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	tests := []struct{ name, url, want string }{
		{"loopback IP", srv.URL + "/page", "its address 127.0.0.1 is loopback"},
		// The name is resolved first; the address actually dialled is what is checked.
		{"name resolving to loopback", "http://localhost:" + port + "/page", "is loopback"},
		{"IPv4-mapped IPv6 literal", "http://[::ffff:127.0.0.1]:" + port + "/page", "its address 127.0.0.1 is loopback"},
		{"cloud metadata", "http://169.254.169.254/latest/meta-data/", "is a cloud metadata endpoint"},
		{"unspecified", "http://0.0.0.0:" + port + "/page", "is unspecified"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := fetch(t, svc, tt.url, 0)
			wantRefused(t, err, tt.want)
		})
	}
}

func TestFetchAllowed(t *testing.T) {
	t.Parallel()
	srv := serveOn(t, "127.0.0.1", site())
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	tests := []struct {
		name string
		cfg  Config
		base string
	}{
		{"allow private", Config{Policy: Policy{AllowPrivate: true}}, srv.URL},
		{"allow CIDR", Config{Policy: Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}, srv.URL},
		{"allow host:port", Config{Policy: Policy{AllowHosts: []string{srv.Listener.Addr().String()}}}, srv.URL},
		{"allow host name", Config{Policy: Policy{AllowHosts: []string{"LocalHost"}}}, "http://localhost:" + port},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := fetch(t, newService(t, tt.cfg), tt.base+"/page", 0)
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if resp.GetStatusCode() != 200 || resp.GetContentType() != "text/html" || resp.GetTitle() != "Test page" {
				t.Errorf("status %d, type %q, title %q", resp.GetStatusCode(), resp.GetContentType(), resp.GetTitle())
			}
			if resp.GetText() != "# Hello\n\nSome next page text." {
				t.Errorf("text = %q", resp.GetText())
			}
			if len(resp.GetLinks()) != 1 || resp.GetLinks()[0].GetUrl() != tt.base+"/next" {
				t.Errorf("links = %v, want only %s/next", resp.GetLinks(), tt.base)
			}
			if resp.GetHeaders()["etag"] != `"v1"` || resp.GetHeaders()["x-internal-secret"] != "" {
				t.Errorf("headers = %v, want etag and no unlisted header", resp.GetHeaders())
			}
			if resp.GetBody() != "" {
				t.Errorf("body = %q, want none for HTML without include_html", resp.GetBody())
			}
		})
	}
}

func TestFetchContent(t *testing.T) {
	t.Parallel()
	srv := serveOn(t, "127.0.0.1", site())
	svc := newService(t, Config{Policy: Policy{AllowPrivate: true}, MaxBodyBytes: 5000})
	tests := []struct {
		path        string
		maxBytes    int32
		includeHTML bool
		wantStatus  int32
		wantType    string
		wantBody    string
		wantBytes   int64
		wantTrunc   bool
	}{
		{path: "/data.json", wantStatus: 200, wantType: "application/json", wantBody: `{"ok": true}`, wantBytes: 12},
		{path: "/latin1.txt", wantStatus: 200, wantType: "text/plain", wantBody: "café crème", wantBytes: 10},
		{path: "/image.png", wantStatus: 200, wantType: "image/png", wantBody: "", wantBytes: 16},
		{path: "/missing", wantStatus: 404, wantType: "text/plain", wantBody: "no such page\n", wantBytes: 13},
		// The download stops at MaxBodyBytes, the answer at max_bytes.
		{path: "/big.txt", wantStatus: 200, wantType: "text/plain", wantBody: strings.Repeat("0123456789", 500), wantBytes: 5000, wantTrunc: true},
		{path: "/big.txt", maxBytes: 25, wantStatus: 200, wantType: "text/plain", wantBody: "0123456789012345678901234", wantBytes: 5000, wantTrunc: true},
		{path: "/page", includeHTML: true, wantStatus: 200, wantType: "text/html", wantBody: page, wantBytes: int64(len(page))},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.path, tt.maxBytes), func(t *testing.T) {
			t.Parallel()
			resp, err := svc.Fetch(t.Context(), &webv1.FetchRequest{Url: srv.URL + tt.path, MaxBytes: tt.maxBytes, IncludeHtml: tt.includeHTML})
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if resp.GetStatusCode() != tt.wantStatus || resp.GetContentType() != tt.wantType || resp.GetBodyBytes() != tt.wantBytes {
				t.Errorf("status %d, type %q, %d bytes; want %d, %q, %d", resp.GetStatusCode(), resp.GetContentType(), resp.GetBodyBytes(),
					tt.wantStatus, tt.wantType, tt.wantBytes)
			}
			if resp.GetBody() != tt.wantBody {
				t.Errorf("body = %q, want %q", resp.GetBody(), tt.wantBody)
			}
			if resp.GetTruncated() != tt.wantTrunc {
				t.Errorf("truncated = %v, want %v", resp.GetTruncated(), tt.wantTrunc)
			}
		})
	}
}

func TestFetchRedirects(t *testing.T) {
	t.Parallel()
	// The allowed server lives on 127.0.0.2, the forbidden one on 127.0.0.1: only
	// the address tells them apart, as for an internal service behind a public site.
	blocked := serveOn(t, "127.0.0.1", site())
	allowed := serveOn(t, "127.0.0.2", site())
	svc := newService(t, Config{
		Policy:       Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}},
		MaxRedirects: 3,
	})

	t.Run("redirects within the allowed server are followed", func(t *testing.T) {
		t.Parallel()
		resp, err := fetch(t, svc, allowed.URL+"/hops/0", 0)
		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		if resp.GetFinalUrl() != allowed.URL+"/page" || resp.GetTitle() != "Test page" {
			t.Errorf("final URL %s, title %q", resp.GetFinalUrl(), resp.GetTitle())
		}
	})
	t.Run("exactly the redirect cap is followed", func(t *testing.T) {
		t.Parallel()
		if _, err := fetch(t, svc, allowed.URL+"/hops/2", 0); err != nil { // 3 redirects
			t.Fatalf("Fetch: %v", err)
		}
	})
	t.Run("one redirect more than the cap is refused", func(t *testing.T) {
		t.Parallel()
		_, err := fetch(t, svc, allowed.URL+"/hops/3", 0) // 4 redirects
		wantRefused(t, err, "was stopped after 3 redirects")
	})
	t.Run("a redirect to a blocked address is refused", func(t *testing.T) {
		t.Parallel()
		_, err := fetch(t, svc, allowed.URL+"/to?u="+blocked.URL+"/page", 0)
		wantRefused(t, err, "its address 127.0.0.1 is loopback")
	})
	t.Run("a redirect to cloud metadata is refused", func(t *testing.T) {
		t.Parallel()
		_, err := fetch(t, svc, allowed.URL+"/to?u=http://169.254.169.254/latest/", 0)
		wantRefused(t, err, "is a cloud metadata endpoint")
	})
	t.Run("a redirect to another scheme is refused", func(t *testing.T) {
		t.Parallel()
		_, err := fetch(t, svc, allowed.URL+"/to?u=file:///etc/passwd", 0)
		wantRefused(t, err, "only http and https URLs can be fetched")
	})
}

func TestFetchErrors(t *testing.T) {
	t.Parallel()
	srv := serveOn(t, "127.0.0.1", site())
	svc := newService(t, Config{Policy: Policy{AllowPrivate: true}})
	// Only the slow server meets the short deadline; the other cases must not race it.
	impatient := newService(t, Config{Policy: Policy{AllowPrivate: true}, Timeout: 200 * time.Millisecond})

	// A port nobody listens on: take a free one and release it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	closedURL := "http://" + lis.Addr().String() + "/"
	_ = lis.Close()

	tlsSite := httptest.NewUnstartedServer(site())       // its certificate is not trusted by the fetcher
	tlsSite.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshake is expected
	tlsSite.StartTLS()
	t.Cleanup(tlsSite.Close)

	tests := []struct {
		name, url, want string
		svc             *Service // default svc
		wantRetry       bool
	}{
		{name: "untrusted certificate", url: tlsSite.URL + "/page", want: "TLS certificate is not valid"},
		{name: "slow server", svc: impatient, url: srv.URL + "/slow", want: "took longer than 200ms", wantRetry: true},
		{name: "connection refused", url: closedURL, want: "failed: dial tcp", wantRetry: true},
		{name: "not http", url: "ftp://127.0.0.1/file", want: "give an absolute http:// or https:// URL"},
		{name: "relative URL", url: "/page", want: "give an absolute http:// or https:// URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := svc
			if tt.svc != nil {
				s = tt.svc
			}
			_, err := fetch(t, s, tt.url, 0)
			te, ok := tool.AsToolError(err)
			if !ok {
				t.Fatalf("err = %v (%T), want an execution error", err, err)
			}
			if !strings.Contains(te.GetMessage(), tt.want) || te.GetCanRetry() != tt.wantRetry {
				t.Errorf("error %q retry=%v, want it to contain %q with retry=%v", te.GetMessage(), te.GetCanRetry(), tt.want, tt.wantRetry)
			}
		})
	}
}
