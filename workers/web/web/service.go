// Package web implements the Web toolkit (tools.web.v1.WebService): fetch a URL and
// return its status, main headers, readable text and links.
//
// Models choose the URLs, so the fetcher defends the network it runs in (SSRF): a
// Policy checks the address of every connection at dial time, after DNS resolution,
// which covers redirects and DNS rebinding; proxies from the environment are
// ignored so that the check sees the real destination. Time, body size and the
// number of redirects are capped, and only http and https are fetched.
package web

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/charset"

	webv1 "github.com/toolfleet/toolfleet/gen/tools/web/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// Defaults of Config.
const (
	DefaultTimeout      = 20 * time.Second
	DefaultMaxBodyBytes = 4 << 20
	DefaultMaxRedirects = 5
	DefaultMaxTextBytes = 1 << 20
	DefaultUserAgent    = "toolfleet-web/1.0 (+https://github.com/toolfleet/toolfleet)"
	// DefaultRequestBytes is the text and body size when the request sets none.
	DefaultRequestBytes = 100_000
	// maxLinks caps the links returned per page.
	maxLinks = 100
)

// Config configures the fetcher. Zero fields take the defaults.
type Config struct {
	// Policy decides which addresses may be connected to. The zero value allows
	// public addresses only.
	Policy Policy
	// Timeout bounds a whole fetch: connecting, redirects and reading the body.
	// Default 20s.
	Timeout time.Duration
	// MaxBodyBytes caps the bytes downloaded (after decompression). Default 4 MiB.
	MaxBodyBytes int64
	// MaxRedirects caps the redirects followed. Default 5.
	MaxRedirects int
	// MaxTextBytes caps text and body in a response, whatever the request asks.
	// Default 1 MiB.
	MaxTextBytes int
	// UserAgent is sent with every request. Default DefaultUserAgent.
	UserAgent string
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxRedirects <= 0 {
		c.MaxRedirects = DefaultMaxRedirects
	}
	if c.MaxTextBytes <= 0 {
		c.MaxTextBytes = DefaultMaxTextBytes
	}
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
	return c
}

// Service implements webv1.WebServiceServer.
type Service struct {
	webv1.UnimplementedWebServiceServer

	cfg    Config
	client *http.Client
}

var _ webv1.WebServiceServer = (*Service)(nil)

// Errors a fetch can stop with, besides a *BlockedError.
var (
	errFetchTimeout     = errors.New("web: fetch timed out")
	errTooManyRedirects = errors.New("web: too many redirects")
	errBadScheme        = errors.New("web: only http and https URLs can be fetched")
)

// New returns the Web service. Close it to release idle connections.
func New(cfg Config) *Service {
	cfg = cfg.withDefaults()
	policy := cfg.Policy
	guarded := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: policy.control}
	trusted := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		// No proxy: a proxy would dial for us and the address check would see only it.
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if policy.hostAllowed(addr) {
				return trusted.DialContext(ctx, network, addr)
			}
			return guarded.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConns:           32,
		IdleConnTimeout:        60 * time.Second,
	}
	client := &http.Client{
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > cfg.MaxRedirects {
				return fmt.Errorf("%w (more than %d)", errTooManyRedirects, cfg.MaxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("%w: redirect to %q", errBadScheme, req.URL.Scheme+":")
			}
			return nil // the dialer checks the new destination's address
		},
	}
	return &Service{cfg: cfg, client: client}
}

// Close releases idle connections.
func (s *Service) Close() { s.client.CloseIdleConnections() }

// keptHeaders are the response headers returned to the model.
var keptHeaders = []string{
	"Content-Type", "Content-Length", "Content-Language", "Last-Modified", "ETag",
	"Cache-Control", "Location", "Retry-After",
}

// Fetch GETs req.Url and returns the response's readable content.
func (s *Service) Fetch(ctx context.Context, req *webv1.FetchRequest) (*webv1.FetchResponse, error) {
	target, err := url.Parse(req.GetUrl())
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return nil, tool.NewError(fmt.Sprintf("cannot fetch %q: give an absolute http:// or https:// URL", req.GetUrl()))
	}
	limit := s.cfg.MaxTextBytes
	if n := int(req.GetMaxBytes()); n > 0 {
		limit = min(limit, n)
	} else {
		limit = min(limit, DefaultRequestBytes)
	}

	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.Timeout, errFetchTimeout)
	defer cancel()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return nil, tool.NewError(fmt.Sprintf("cannot fetch %q: %v", req.GetUrl(), err))
	}
	httpReq.Header.Set("User-Agent", s.cfg.UserAgent)
	httpReq.Header.Set("Accept", "text/html,application/xhtml+xml,application/json,text/plain;q=0.9,*/*;q=0.5")

	resp, err := s.client.Do(httpReq)
	if err != nil {
		return nil, s.fetchError(ctx, req.GetUrl(), err)
	}
	defer func() { _ = resp.Body.Close() }()

	body, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxBodyBytes+1))
	if err != nil {
		return nil, s.fetchError(ctx, req.GetUrl(), err)
	}
	return s.describe(resp, body, limit, req.GetIncludeHtml())
}

// describe builds the answer from a response and its body (read up to one byte
// past the download cap); text and body are cut at limit bytes.
func (s *Service) describe(resp *http.Response, body []byte, limit int, includeHTML bool) (*webv1.FetchResponse, error) {
	out := &webv1.FetchResponse{
		StatusCode: int32(resp.StatusCode),
		FinalUrl:   resp.Request.URL.String(),
		Headers:    map[string]string{},
	}
	if int64(len(body)) > s.cfg.MaxBodyBytes {
		body, out.Truncated = body[:s.cfg.MaxBodyBytes], true
	}
	out.BodyBytes = int64(len(body))
	for _, h := range keptHeaders {
		if v := resp.Header.Get(h); v != "" {
			out.Headers[strings.ToLower(h)] = truncateUTF8(strings.ToValidUTF8(v, "\uFFFD"), 1024)
		}
	}
	contentType := resp.Header.Get("Content-Type")
	if contentType == "" {
		contentType = http.DetectContentType(body)
	}
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mediaType = strings.ToLower(strings.TrimSpace(strings.Split(contentType, ";")[0]))
	}
	out.ContentType = mediaType

	if !isText(mediaType) {
		return out, nil // binary: status, headers and size only
	}
	text := toUTF8(body, contentType)
	if isHTML(mediaType) {
		doc, err := html.Parse(strings.NewReader(text))
		if err != nil {
			return nil, tool.NewError(fmt.Sprintf("the page at %s could not be parsed as HTML: %v", out.FinalUrl, err))
		}
		page := ExtractPage(doc, resp.Request.URL, limit, maxLinks)
		out.Title, out.Text, out.Truncated = truncateUTF8(page.Title, 1024), page.Text, out.Truncated || page.Truncated
		for _, l := range page.Links {
			out.Links = append(out.Links, &webv1.Link{Text: l.Text, Url: l.URL})
		}
		if !includeHTML {
			return out, nil
		}
	}
	out.Body = truncateUTF8(text, limit)
	out.Truncated = out.Truncated || len(out.Body) < len(text)
	return out, nil
}

// fetchError turns a failed request into an execution error the model can act on,
// passing the caller's own cancellation through.
func (s *Service) fetchError(ctx context.Context, rawURL string, err error) error {
	var blocked *BlockedError
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &blocked):
		return tool.NewError(
			fmt.Sprintf("fetching %s was refused: its address %s is %s; only public internet addresses can be fetched", rawURL, blocked.Addr, blocked.Reason),
			tool.WithPromptHint("Do not retry this URL or other internal addresses; use a public URL."),
			tool.WithDeveloperMessage("allow it with the worker's allow-private, allow-cidrs or allow-hosts settings if this is intended"))
	case errors.Is(err, errTooManyRedirects):
		return tool.NewError(fmt.Sprintf("fetching %s was stopped after %d redirects", rawURL, s.cfg.MaxRedirects))
	case errors.Is(err, errBadScheme):
		return tool.NewError(fmt.Sprintf("fetching %s was stopped: %v", rawURL, err))
	case errors.Is(context.Cause(ctx), errFetchTimeout):
		return tool.NewError(fmt.Sprintf("fetching %s took longer than %s", rawURL, s.cfg.Timeout),
			tool.WithRetry(0), tool.WithDeveloperMessage(err.Error()))
	case ctx.Err() != nil:
		return ctx.Err() // the caller gave up
	case errors.As(err, &certErr):
		return tool.NewError(fmt.Sprintf("fetching %s failed: the site's TLS certificate is not valid (%v)", rawURL, certErr.Err),
			tool.WithPromptHint("Do not retry: the site is misconfigured or not the one intended."))
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return tool.NewError(fmt.Sprintf("the host of %s does not exist (DNS: %s)", rawURL, dnsErr.Name),
			tool.WithPromptHint("Check the URL for typos."))
	}
	return tool.NewError(fmt.Sprintf("fetching %s failed: %s", rawURL, cleanNetError(err)),
		tool.WithRetry(time.Second), tool.WithDeveloperMessage(err.Error()))
}

// cleanNetError drops the request wrapper ("Get \"…\": ") that repeats the URL.
func cleanNetError(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err.Error()
	}
	return err.Error()
}

// isText reports media types whose body is readable text.
func isText(mediaType string) bool {
	switch {
	case strings.HasPrefix(mediaType, "text/"),
		strings.HasSuffix(mediaType, "+json"), strings.HasSuffix(mediaType, "+xml"):
		return true
	}
	switch mediaType {
	case "application/json", "application/xml", "application/xhtml+xml", "application/javascript",
		"application/ecmascript", "application/x-javascript", "application/x-ndjson", "application/yaml",
		"application/x-yaml", "application/toml", "application/csv", "application/sql", "application/graphql":
		return true
	}
	return false
}

func isHTML(mediaType string) bool {
	return mediaType == "text/html" || mediaType == "application/xhtml+xml"
}

// toUTF8 decodes body using the charset of contentType or, for HTML, of its <meta>
// tags; invalid bytes become U+FFFD (protobuf strings must be UTF-8).
func toUTF8(body []byte, contentType string) string {
	if utf8.Valid(body) {
		return string(body)
	}
	r, err := charset.NewReader(bytes.NewReader(body), contentType)
	if err == nil {
		if decoded, err := io.ReadAll(r); err == nil {
			body = decoded
		}
	}
	return strings.ToValidUTF8(string(body), "\uFFFD")
}
