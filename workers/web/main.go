// Command web serves the Web toolkit: fetch a URL and read its text, with an SSRF
// guard that refuses loopback, private, link-local and cloud-metadata addresses.
//
//	go run ./workers/web --listen 127.0.0.1:19103
//
// Besides the flags and environment of every worker (see sdk/tool.Main):
//
//	TOOLFLEET_WEB_ALLOW_PRIVATE  "true" allows non-public addresses (never metadata endpoints)
//	TOOLFLEET_WEB_ALLOW_CIDRS    comma-separated networks or addresses to allow, e.g. 10.20.0.0/16,127.0.0.1
//	TOOLFLEET_WEB_ALLOW_HOSTS    comma-separated host names or host:port whose address is not checked
//	TOOLFLEET_WEB_TIMEOUT        bound on one fetch, e.g. 20s
//	TOOLFLEET_WEB_MAX_BODY_BYTES download cap per fetch, in bytes
//	TOOLFLEET_WEB_MAX_REDIRECTS  redirects followed per fetch
package main

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	webv1 "github.com/toolfleet/toolfleet/gen/tools/web/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/web/web"
)

// Environment variables of this worker.
const (
	EnvAllowPrivate = "TOOLFLEET_WEB_ALLOW_PRIVATE"
	EnvAllowCIDRs   = "TOOLFLEET_WEB_ALLOW_CIDRS"
	EnvAllowHosts   = "TOOLFLEET_WEB_ALLOW_HOSTS"
	EnvTimeout      = "TOOLFLEET_WEB_TIMEOUT"
	EnvMaxBodyBytes = "TOOLFLEET_WEB_MAX_BODY_BYTES"
	EnvMaxRedirects = "TOOLFLEET_WEB_MAX_REDIRECTS"
)

func main() {
	tool.Main("web", func(w *tool.Worker) error {
		cfg, err := configFromEnv(os.Getenv)
		if err != nil {
			return err
		}
		svc := web.New(cfg)
		w.OnStop(svc.Close)
		webv1.RegisterWebServiceServer(w, svc)
		return nil
	})
}

// configFromEnv reads the fetcher's settings; a malformed value is an error, so
// that a typo never silently widens or narrows what the worker may reach.
func configFromEnv(getenv func(string) string) (web.Config, error) {
	var cfg web.Config
	if v := getenv(EnvAllowPrivate); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("web: %s=%q: want true or false", EnvAllowPrivate, v)
		}
		cfg.Policy.AllowPrivate = b
	}
	for _, s := range list(getenv(EnvAllowCIDRs)) {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			addr, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return cfg, fmt.Errorf("web: %s: %q is neither a network (10.0.0.0/8) nor an address", EnvAllowCIDRs, s)
			}
			pfx = netip.PrefixFrom(addr, addr.BitLen())
		}
		cfg.Policy.AllowCIDRs = append(cfg.Policy.AllowCIDRs, pfx.Masked())
	}
	cfg.Policy.AllowHosts = list(getenv(EnvAllowHosts))
	if v := getenv(EnvTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("web: %s=%q: want a positive duration such as 20s", EnvTimeout, v)
		}
		cfg.Timeout = d
	}
	if v := getenv(EnvMaxBodyBytes); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("web: %s=%q: want a positive number of bytes", EnvMaxBodyBytes, v)
		}
		cfg.MaxBodyBytes = n
	}
	if v := getenv(EnvMaxRedirects); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 20 {
			return cfg, fmt.Errorf("web: %s=%q: want a number from 1 to 20", EnvMaxRedirects, v)
		}
		cfg.MaxRedirects = n
	}
	return cfg, nil
}

// list splits a comma-separated setting, dropping blanks.
func list(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
