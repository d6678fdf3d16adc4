package orchestration

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

// Connections is what MCP tasks call of the ConnectionService
// (connections.API in process, or toolfleetv1connect.ConnectionServiceClient).
type Connections interface {
	StartConnection(context.Context, *connect.Request[toolfleetv1.StartConnectionRequest]) (*connect.Response[toolfleetv1.StartConnectionResponse], error)
}

// Bounds of the connect links kept for reuse.
const (
	// linkReuse is how long a link is shown again: tasks/get is polled
	// every second or so, and each new link is a pending connect the
	// gateway keeps (bounded per principal) until the flow's state expires
	// (10 minutes by default), so one link serves a while.
	linkReuse = 2 * time.Minute
	maxLinks  = 1024
)

// errNoConnections: the gateway has no connections configured.
var errNoConnections = errors.New("orchestration: no connections configured")

// ConnectLink implements mcp.ConnectLinker: a link for the MCP caller (its
// Authorization) to connect provider, the same one for linkReuse.
func (b *Tasks) ConnectLink(ctx context.Context, provider string, scopes []string) (string, error) {
	if b.s.Connections == nil {
		return "", errNoConnections
	}
	sum := sha256.Sum256([]byte(mcp.Authorization(ctx) + "\x00" + provider + "\x00" + strings.Join(scopes, " ")))
	key := string(sum[:])
	if url, ok := b.links.get(key); ok {
		return url, nil
	}
	get := func() (Connections, error) { return b.s.Connections, nil }
	resp, err := call(ctx, get, &toolfleetv1.StartConnectionRequest{Provider: provider, Scopes: scopes}, Connections.StartConnection)
	if err != nil {
		return "", err
	}
	b.links.put(key, resp.GetAuthorizationUrl())
	return resp.GetAuthorizationUrl(), nil
}

// linkCache keeps connect links by caller, provider and scopes, at most
// maxLinks, each for linkReuse. Not golang-lru's expirable LRU (a module
// dependency already): it starts a goroutine nothing can stop.
type linkCache struct {
	mu    sync.Mutex
	links map[string]link
	now   func() time.Time
}

type link struct {
	url     string
	expires time.Time
}

func newLinkCache() *linkCache { return &linkCache{links: map[string]link{}, now: time.Now} }

func (c *linkCache) get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.links[key]
	if !ok || !c.now().Before(l.expires) {
		return "", false
	}
	return l.url, true
}

func (c *linkCache) put(key, url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if len(c.links) >= maxLinks {
		for k, l := range c.links { // drop the expired; if none, everything (a new link is only a new connect)
			if !now.Before(l.expires) {
				delete(c.links, k)
			}
		}
		if len(c.links) >= maxLinks {
			clear(c.links)
		}
	}
	c.links[key] = link{url: url, expires: now.Add(linkReuse)}
}
