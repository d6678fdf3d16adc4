package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// csrfInput is the console's hidden CSRF field.
var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// checkConsole opens the run console the kind overlays turn on
// (TOOLFLEET_CONSOLE=true on the gateway): the sign-in page with its
// headers, a sign-in with the test's bearer token (the cluster has no dev
// sign-in), and the runs page listing the run of the "agent run" check.
func (h *harness) checkConsole(ctx context.Context, stamp string) error {
	jar, _ := cookiejar.New(nil) // never fails without options
	hc := &http.Client{Jar: jar, Timeout: time.Minute}
	base := "http://" + h.fleet.gateway.addr() + "/console/"
	get := func(path string) (*http.Response, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return nil, "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, "", fmt.Errorf("GET /console/%s: %w", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return resp, string(b), nil
	}
	resp, page, err := get("signin")
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /console/signin: %s (is TOOLFLEET_CONSOLE=true on the gateway?)", resp.Status)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
		return fmt.Errorf("the console's Content-Security-Policy is %q", csp)
	}
	if strings.Contains(page, `name="subject"`) {
		return fmt.Errorf("the console in the cluster offers the dev sign-in")
	}
	m := csrfInput.FindStringSubmatch(page)
	if m == nil {
		return fmt.Errorf("the sign-in page has no CSRF field")
	}
	form := url.Values{"csrf": {m[1]}, "token": {h.fleet.token}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"signin", strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = hc.Do(req)
	if err != nil {
		return fmt.Errorf("POST /console/signin: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /console/signin with the test's token: %s", resp.Status)
	}
	run := "kind-run-" + stamp
	begin := time.Now()
	resp, page, err = get("runs")
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, run) {
		return fmt.Errorf("GET /console/runs: %s, the page does not list %s", resp.Status, run)
	}
	took := time.Since(begin).Round(10 * time.Millisecond)
	// The session lives in NATS, sealed with the overlay's shared key: each
	// gateway pod opens it (a Service may send the browser to either).
	pods, err := h.kubectl(ctx, "get", "pods", "-l", "app.kubernetes.io/component=gateway",
		"--field-selector", "status.phase=Running", "-o", "name")
	if err != nil {
		return err
	}
	names := strings.Fields(string(pods))
	for _, pod := range names {
		f, err := h.forward(ctx, pod, 8080)
		if err != nil {
			return err
		}
		base = "http://" + f.addr() + "/console/"
		resp, page, err = get("runs")
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(page, run) {
			return fmt.Errorf("GET /console/runs on %s with the session made through the Service: %s, the page does not list %s", pod, resp.Status, run)
		}
	}
	h.figure("signed in with a bearer token; the runs page lists %s (%s), with the same session on each of %d gateway pods", run, took, len(names))
	return nil
}
