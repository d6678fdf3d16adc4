package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/syncbuf"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// shellWords splits a command line as a POSIX shell would for the hints'
// quoting: '…' literal, "…" with \" and \\, words split on spaces.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == ' ':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				t.Fatalf("unbalanced ' in %s", line)
			}
			cur.WriteString(line[i+1 : i+1+j])
			i, inWord = i+1+j, true
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
					i++
				}
				cur.WriteByte(line[i])
			}
			if i == len(line) {
				t.Fatalf("unbalanced \" in %s", line)
			}
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// flagValue returns the word after name in words.
func flagValue(t *testing.T, words []string, name string) string {
	t.Helper()
	for i, w := range words {
		if w == name && i+1 < len(words) {
			return words[i+1]
		}
	}
	t.Fatalf("%q has no %s", strings.Join(words, " "), name)
	return ""
}

// runInProcess runs the toolfleet command line args in this process (main's entry
// point without the exit) and returns its output.
func runInProcess(ctx context.Context, args ...string) (string, error) {
	var out syncbuf.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(""))
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// TestDevOnOtherPortsHintsWork starts `toolfleet dev` with every port moved
// off its default, then runs each command its banner prints, as printed:
// `toolfleet …` lines through the CLI's entry point, grpcurl, curl and nats
// lines as the same requests in Go, the URLs as GETs. The CLI without
// --gateway finds this dev through its dev file, which is 0600, holds no
// secret and is gone after dev stops. Not parallel: it sets
// TOOLFLEET_DEV_FILE.
func TestDevOnOtherPortsHintsWork(t *testing.T) {
	if testing.Short() {
		t.Skip("runs toolfleet dev")
	}
	devFile := filepath.Join(t.TempDir(), "run", "dev.json")
	t.Setenv(devFileEnv, devFile)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ports := map[string]int{"--nats-port": freePort(t), "--temporal-port": freePort(t), "--temporal-ui-port": freePort(t), "--gateway-port": freePort(t)}
	args := []string{"dev", "--data-dir", t.TempDir()}
	for f, p := range ports {
		args = append(args, f, strconv.Itoa(p))
	}
	var stdout, stderr syncbuf.Buffer
	devCmd := newRootCommand()
	devCmd.SetOut(&stdout)
	devCmd.SetErr(&stderr)
	devCmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- devCmd.ExecuteContext(ctx) }()
	for !strings.Contains(stdout.String(), "Press Ctrl-C to stop.") {
		select {
		case err := <-done:
			t.Fatalf("dev stopped: %v\n%s\n%s", err, stdout.String(), stderr.String())
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("dev not up:\n%s\n%s", stdout.String(), stderr.String())
		}
	}
	banner := stdout.String()
	t.Logf("banner:\n%s", banner)
	gw := fmt.Sprintf("127.0.0.1:%d", ports["--gateway-port"])

	// The dev file: where the CLI looks, 0600, the addresses, no secret.
	st, err := os.Stat(devFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("dev file: %v %v, want mode 0600", st, err)
	}
	a, ok := runningDev()
	if !ok || a.Gateway != gw || a.PID != os.Getpid() || a.NATS != fmt.Sprintf("nats://127.0.0.1:%d", ports["--nats-port"]) ||
		a.Temporal != fmt.Sprintf("127.0.0.1:%d", ports["--temporal-port"]) || a.Auth {
		t.Fatalf("dev file: %+v %v", a, ok)
	}
	// The CLI without --gateway finds it.
	if out, err := runInProcess(ctx, "tools", "call", "Calculator.Add", `{"a": 2, "b": 3}`, "-o", "json"); err != nil || !strings.Contains(out, `"result": 5`) && !strings.Contains(out, `"result":5`) {
		t.Fatalf("tools call without --gateway: %v\n%s", err, out)
	}
	if out, err := runInProcess(ctx, "program", "stubs", "Calculator.*"); err != nil || !strings.Contains(out, "Calculator_Add(") {
		t.Fatalf("program stubs without --gateway: %v\n%s", err, out)
	}

	// Every hint, as printed.
	var ran int
	var nc *nats.Conn
	var events *nats.Subscription
	for _, line := range strings.Split(banner, "\n") {
		line = strings.TrimSpace(line)
		cli := false // a "precondition: toolfleet …" hint
		if i := strings.Index(line, ": toolfleet "); i >= 0 {
			if strings.Contains(line[:i], "OPENAI_API_KEY") && os.Getenv("OPENAI_API_KEY") == "" {
				t.Logf("skipped (needs OPENAI_API_KEY): %s", line)
				continue
			}
			line, cli = line[i+2:], true
		}
		if !cli && !strings.HasPrefix(line, "grpcurl ") && !strings.HasPrefix(line, "curl ") && !strings.HasPrefix(line, "nats ") {
			continue
		}
		words := shellWords(t, line)
		switch words[0] {
		case "toolfleet":
			out, err := runInProcess(ctx, words[1:]...)
			if err != nil {
				t.Errorf("%s: %v\n%s", line, err, out)
			}
		case "grpcurl":
			req := &toolfleetv1.CallToolRequest{}
			if err := protojson.Unmarshal([]byte(flagValue(t, words, "-d")), req); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			conn := tooltest.Dial(t, words[len(words)-2])
			if words[len(words)-1] != "toolfleet.v1.ToolGatewayService/CallTool" {
				t.Fatalf("%s: unexpected method", line)
			}
			resp, err := toolfleetv1.NewToolGatewayServiceClient(conn).CallTool(ctx, req)
			if err != nil || !resp.GetSuccess() {
				t.Errorf("%s: %v %v", line, resp, err)
			}
		case "curl":
			url := ""
			for _, w := range words {
				if strings.HasPrefix(w, "http://") {
					url = w
				}
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(flagValue(t, words, "-d")))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			var got struct {
				Result struct {
					Success bool `json:"success"`
				} `json:"result"`
			}
			if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &got) != nil || !got.Result.Success {
				t.Errorf("%s: %d %s", line, resp.StatusCode, b)
			}
		case "nats":
			if words[1] != "--server" || words[3] != "sub" {
				t.Fatalf("%s: unexpected nats command", line)
			}
			if nc, err = nats.Connect(words[2]); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			defer nc.Close()
			if events, err = nc.SubscribeSync(words[4]); err != nil || nc.Flush() != nil {
				t.Fatalf("%s: %v", line, err)
			}
		}
		ran++
	}
	if ran < 4 {
		t.Fatalf("ran %d hints, want grpcurl, curl, nats and the toolfleet ones:\n%s", ran, banner)
	}
	if events == nil {
		t.Fatal("no nats hint")
	}
	if _, err := runInProcess(ctx, "tools", "call", "Calculator.Add", `{"a": 1, "b": 1}`, "-o", "json"); err != nil {
		t.Fatal(err)
	}
	// The subscription also sees the agent run's events; it must see a call's.
	for deadline := time.Now().Add(20 * time.Second); ; {
		m, err := events.NextMsg(time.Until(deadline))
		if err != nil {
			t.Errorf("nats hint saw no call event: %v", err)
			break
		}
		if strings.HasPrefix(m.Subject, "toolfleet.events.call.") {
			break
		}
	}
	// The URLs it prints answer.
	for _, url := range []string{"http://" + gw + "/metrics", "http://" + gw + OrchestratorMetricsPath, fmt.Sprintf("http://127.0.0.1:%d", ports["--temporal-ui-port"])} {
		if !strings.Contains(banner, strings.TrimPrefix(url, "http://")) {
			t.Errorf("banner does not show %s", url)
		}
		resp, err := http.Get(url)
		if err != nil {
			t.Errorf("GET %s: %v", url, err)
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", url, resp.StatusCode)
		}
	}

	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("dev did not stop")
	}
	if _, err := os.Stat(devFile); !os.IsNotExist(err) {
		t.Fatalf("dev file after stop: %v", err)
	}
}

// TestDevFileStaleOrForeign: a dev file whose process is gone, a broken one
// and an oversized one are ignored; flags and variables win over a live one;
// a dev that stops leaves another dev's file alone.
func TestDevFileStaleOrForeign(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dev.json")
	t.Setenv(devFileEnv, path)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		"process gone": []byte(fmt.Sprintf(`{"pid": %d, "gateway": "127.0.0.1:1"}`, dead.Process.Pid)),
		"not JSON":     []byte(`{"pid": `),
		"no pid":       []byte(`{"gateway": "127.0.0.1:1"}`),
		"oversized":    append([]byte(fmt.Sprintf(`{"pid": %d, "gateway": "127.0.0.1:1", "x": "`, os.Getpid())), append(bytes.Repeat([]byte("x"), maxDevFile), `"}`...)...),
	} {
		if err := os.WriteFile(path, body, 0o600); err != nil {
			t.Fatal(err)
		}
		if a, ok := runningDev(); ok {
			t.Errorf("%s: found %+v", name, a)
		}
	}
	remove, err := writeDevFile(path, devAddresses{PID: os.Getpid(), Gateway: "127.0.0.1:18080"})
	if err != nil {
		t.Fatal(err)
	}
	pf := newToolsCommand().PersistentFlags()
	if err := applyEnvAndDev(pf); err != nil || pf.Lookup("gateway").Value.String() != "127.0.0.1:18080" {
		t.Fatalf("live dev file: gateway %s, %v", pf.Lookup("gateway").Value, err)
	}
	t.Setenv("TOOLFLEET_GATEWAY", "127.0.0.1:9999")
	pf = newToolsCommand().PersistentFlags()
	if err := applyEnvAndDev(pf); err != nil || pf.Lookup("gateway").Value.String() != "127.0.0.1:9999" {
		t.Fatalf("variable vs dev file: gateway %s, %v", pf.Lookup("gateway").Value, err)
	}
	// Another dev wrote the file since: stopping this one leaves it.
	if _, err := writeDevFile(path, devAddresses{PID: os.Getpid() + 1, Gateway: "127.0.0.1:28080"}); err != nil {
		t.Fatal(err)
	}
	remove()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("another dev's file removed: %v", err)
	}
}
