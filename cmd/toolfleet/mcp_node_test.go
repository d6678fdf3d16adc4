package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
)

// The npm packages the MCP tests run, pinned: the conformance suite, the
// TypeScript SDK client (2.x: 2026-07-28 through server/discover, and the
// 2025 handshake; 1.x, still the most used), and the MCP Inspector (its CLI
// mode).
var nodePackages = map[string]string{
	"@modelcontextprotocol/conformance": conformanceVersion,
	"@modelcontextprotocol/sdk":         "1.32.2",
	"@modelcontextprotocol/client":      "2.4.0",
	"@modelcontextprotocol/inspector":   "2.12.0",
}

// nodeMinimum is the least node the packages need (the Inspector: 22.19).
var nodeMinimum = [2]int{22, 19}

// installedNodeTools is a folder with nodePackages installed and a node to run them.
type installedNodeTools struct {
	dir, node string
}

var (
	nodeToolsOnce sync.Once
	nodeToolsDir  installedNodeTools
	nodeToolsErr  error
)

// nodeTools installs nodePackages once per test binary (tests share it; npm
// runs once) into the user cache (TOOLFLEET_MCP_NODE_DIR overrides it), with
// node from npm when the machine's node is older than nodeMinimum. Without npm
// and node the test is skipped, or fails under CI=true: in CI a missing client
// must never make a test silently not run.
func nodeTools(t *testing.T) installedNodeTools {
	t.Helper()
	if testing.Short() {
		t.Skip("slow (npm install): runs without -short")
	}
	_, errNPM := exec.LookPath("npm")
	_, errNode := exec.LookPath("node")
	if errNPM != nil || errNode != nil {
		const why = "npm and node are not on PATH: the MCP client and conformance tests need them (.ci/run installs them)"
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	nodeToolsOnce.Do(func() { nodeToolsDir, nodeToolsErr = installNodeTools() })
	if nodeToolsErr != nil {
		t.Fatal(nodeToolsErr)
	}
	return nodeToolsDir
}

func installNodeTools() (installedNodeTools, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := os.Getenv("TOOLFLEET_MCP_NODE_DIR")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir = filepath.Join(cache, "toolfleet", "mcp-node")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return installedNodeTools{}, err
	}
	// npm prunes what package.json does not list: install every pin at once.
	var want []string
	stale := false
	for _, pkg := range slices.Sorted(maps.Keys(nodePackages)) {
		want = append(want, pkg+"@"+nodePackages[pkg])
		stale = stale || installedVersion(dir, pkg) != nodePackages[pkg]
	}
	node, _ := exec.LookPath("node")
	if !nodeAtLeast(ctx, node) {
		node = filepath.Join(dir, "node_modules", ".bin", "node")
		want = append(want, "node@"+conformanceNode)
		stale = stale || !nodeAtLeast(ctx, node)
	}
	if stale {
		missing := want
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name": "toolfleet-mcp-node", "private": true}`), 0o600); err != nil {
			return installedNodeTools{}, err
		}
		args := append([]string{"install", "--no-audit", "--no-fund", "--loglevel=error", "--save-exact"}, missing...)
		cmd := exec.CommandContext(ctx, "npm", args...)
		cmd.Dir = dir
		cmd.WaitDelay = 10 * time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			return installedNodeTools{}, fmt.Errorf("npm %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	if !nodeAtLeast(ctx, node) {
		return installedNodeTools{}, fmt.Errorf("node %s is older than %d.%d (node@%s from npm did not install?)", node, nodeMinimum[0], nodeMinimum[1], conformanceNode)
	}
	return installedNodeTools{dir: dir, node: node}, nil
}

// installedVersion is the version of pkg installed in dir ("" when none).
func installedVersion(dir, pkg string) string {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", filepath.FromSlash(pkg), "package.json"))
	if err != nil {
		return ""
	}
	var p struct {
		Version string `json:"version"`
	}
	_ = json.Unmarshal(b, &p)
	return p.Version
}

// nodeAtLeast reports whether a node binary runs and is at least nodeMinimum.
func nodeAtLeast(ctx context.Context, node string) bool {
	if node == "" {
		return false
	}
	out, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		return false
	}
	parts := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(parts[1])
	return major > nodeMinimum[0] || major == nodeMinimum[0] && minor >= nodeMinimum[1]
}

// devFleet runs the gateway and workers `toolfleet dev --conformance` runs
// (startFleet, on an embedded NATS; auth off), until the test ends, and
// returns the gateway's address. With temporal it runs all of that command's
// fleet (startDevServices) on an embedded NATS and Temporal: the gateway
// then serves the AgentService, the ProgramService and MCP tasks, run by an
// orchestrator.
func devFleet(ctx context.Context, t *testing.T, temporal bool) string {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if temporal {
		stack := devstacktest.Start(t)
		svc, err := startDevServices(ctx, stack, devConfig{Host: "127.0.0.1", Conformance: true},
			devServiceOptions{Logger: logger, MemoryStorage: true})
		if err != nil {
			t.Fatalf("startDevServices: %v", err)
		}
		t.Cleanup(func() {
			if err := svc.stop(); err != nil {
				t.Errorf("stop the fleet: %v", err)
			}
		})
		return svc.fleet.Gateway.Addr()
	}
	srv := natstest.Start(t)
	f, err := startFleet(ctx, fleetConfig{Host: "127.0.0.1", NATSURL: srv.URL(), Conformance: true, Logger: logger})
	if err != nil {
		t.Fatalf("startFleet: %v", err)
	}
	t.Cleanup(func() {
		if err := f.stop(); err != nil {
			t.Errorf("stop the fleet: %v", err)
		}
	})
	if err := f.waitToolkits(ctx, f.Toolkits...); err != nil {
		t.Fatal(err)
	}
	return f.Gateway.Addr()
}
