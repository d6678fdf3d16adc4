package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/internal/syncbuf"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// TestMCPTasks runs two production gateways (cmd/gateway, auth on) on one
// NATS and Temporal with an orchestrator, and drives MCP tasks over /mcp as
// an MCP client would, at both revisions: a tool call that waits for an
// approval, an agent run and a program are started on gateway A; A stops;
// gateway B (and A once restarted) reads them, answers the approval with
// tasks/update and returns the results. Another tenant's get, result,
// update, cancel and list of them find nothing, forged ids and cursors are
// refused, and a long task list comes in bounded pages.
func TestMCPTasks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	stack := devstacktest.Start(t)
	f, err := startFleet(ctx, fleetConfig{Host: "127.0.0.1", NATSURL: stack.NATS.URL(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.stop() })
	if err := f.waitToolkits(ctx, f.Toolkits...); err != nil {
		t.Fatal(err)
	}
	secret := strings.Repeat("mcp-tasks-secret-", 3)
	secretFile := filepath.Join(t.TempDir(), "hs256")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gateway")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../gateway").CombinedOutput(); err != nil {
		t.Fatalf("go build ../gateway: %v\n%s", err, out)
	}
	args := []string{"--nats-url", stack.NATS.URL(), "--temporal-address", stack.Temporal.Address(),
		"--namespace", stack.Namespace(), "--jwt-hs256-secret-file", secretFile, "--model-endpoint", "none=http://127.0.0.1:*"}
	gwB := startGatewayProc(t, bin, "", args...)
	models := agent.NewResolver()
	models.Register("mcptask", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("Multiplying.", llm.CallPart("c1", "Calculator_Multiply", map[string]any{"a": 6, "b": 7})),
		llmtest.SayText("6 times 7 is 42."),
	}})
	o := startOrchestrator(ctx, t, stack, gwB.addr, secret, models)
	t.Cleanup(o.Stop)
	gwA := startGatewayProc(t, bin, "", args...)
	for _, addr := range []string{gwA.addr, gwB.addr} {
		waitServiceServing(ctx, t, addr, "toolfleet.v1.AgentService")
		waitServiceServing(ctx, t, addr, "toolfleet.v1.ProgramService")
	}
	scopes := []string{"runs:start", "runs:read", "runs:approve", "runs:cancel", "programs:run", "programs:read",
		"programs:approve", "tools:call", "tools:approve"}
	alice := &mcpClient{t: t, token: tenantToken(t, secret, "alice", scopes...)}
	bob := &mcpClient{t: t, token: tenantToken(t, secret, "bob", scopes...)}

	// Capabilities: the extension in server/discover, `tasks` and
	// execution.taskSupport at 2025-11-25.
	alice.addr = gwA.addr
	disc := alice.must(ctx, newRev, "server/discover", nil)
	if _, ok := dig(disc, "capabilities", "extensions").(map[string]any)["io.modelcontextprotocol/tasks"]; !ok {
		t.Errorf("server/discover lacks the tasks extension: %v", disc)
	}
	ini := alice.must(ctx, oldRev, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "test", "version": "1"}})
	if dig(ini, "capabilities", "tasks", "requests", "tools", "call") == nil {
		t.Errorf("initialize lacks capabilities.tasks.requests.tools.call: %v", ini)
	}
	list := alice.must(ctx, oldRev, "tools/list", map[string]any{})
	support := map[string]any{}
	for _, tl := range list["tools"].([]any) {
		tm := tl.(map[string]any)
		support[tm["name"].(string)] = dig(tm, "execution", "taskSupport")
	}
	if support["toolfleet_run_agent"] != "required" || support["Calculator_Add"] != "optional" {
		t.Errorf("execution.taskSupport: run_agent %v, Calculator_Add %v; want required, optional", support["toolfleet_run_agent"], support["Calculator_Add"])
	}

	// A key to delete: KV.Delete requires approval.
	alice.must(ctx, newRev, "tools/call", map[string]any{"name": "KV_Put", "arguments": map[string]any{"key": "mcp.task", "value": "v"}})

	// 1. Tasks started on A.
	created := alice.must(ctx, oldRev, "tools/call", map[string]any{"name": "KV_Delete", "arguments": map[string]any{"key": "mcp.task"},
		"task": map[string]any{"ttl": 60000}})
	delTask, _ := dig(created, "task", "taskId").(string)
	if dig(created, "task", "status") != "working" || !strings.HasPrefix(delTask, "mcp-t-") {
		t.Fatalf("task-augmented tools/call = %v, want a working task", created)
	}
	run := alice.must(ctx, newRev, "tools/call", map[string]any{"name": "toolfleet_run_agent",
		"arguments": map[string]any{"model": "scripted:mcptask", "prompt": "What is 6 times 7?", "tools": []any{"Calculator.*"}}})
	runTask, _ := run["taskId"].(string)
	if run["resultType"] != "task" || run["status"] != "working" || run["ttlMs"] == nil || run["pollIntervalMs"] == nil {
		t.Fatalf("run task = %v, want resultType task, working, ttlMs, pollIntervalMs", run)
	}
	prog := alice.must(ctx, newRev, "tools/call", map[string]any{"name": "toolfleet_run_program",
		"arguments": map[string]any{"source": `result = call("Calculator.Add", a=args["x"], b=2).value`, "args": map[string]any{"x": 40}, "tools": []any{"Calculator.*"}}})
	progTask, _ := prog["taskId"].(string)
	if prog["resultType"] != "task" || progTask == "" {
		t.Fatalf("program task = %v", prog)
	}
	// The run tools are tasks only: without the extension, the spec's error.
	if _, e := alice.call(ctx, newRevNoTasks, "tools/call", map[string]any{"name": "toolfleet_run_agent",
		"arguments": map[string]any{"model": "scripted:mcptask", "prompt": "x"}}); code(e) != -32021 {
		t.Errorf("run tool without the extension: %v, want -32021", e)
	}
	// A short tool declared with the extension is answered inline.
	if r := alice.must(ctx, newRev, "tools/call", map[string]any{"name": "Calculator_Add", "arguments": map[string]any{"a": 1, "b": 2}}); r["resultType"] == "task" {
		t.Errorf("a 2 s tool became a task: %v", r)
	}

	// 2. A stops.
	gwA.stop(t)

	// 3. B reads them.
	alice.addr = gwB.addr
	st := alice.waitTask(ctx, newRev, delTask, "input_required")
	reqs, _ := st["inputRequests"].(map[string]any)
	var key string
	for k := range reqs {
		key = k
	}
	if !strings.HasPrefix(key, "toolfleet/approval/") || dig(reqs, key, "method") != "elicitation/create" {
		t.Fatalf("input_required task = %v, want an approval elicitation", st)
	}
	if old := alice.must(ctx, oldRev, "tasks/get", map[string]any{"taskId": delTask}); old["status"] != "input_required" || old["ttl"] == nil {
		t.Errorf("tasks/get at 2025-11-25 = %v", old)
	}

	t.Run("another tenant finds nothing", func(t *testing.T) {
		bob.addr = gwB.addr
		for _, c := range []struct {
			rev    rev
			method string
			params map[string]any
		}{
			{newRev, "tasks/get", map[string]any{"taskId": delTask}},
			{newRev, "tasks/update", map[string]any{"taskId": delTask, "inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"approve": true}}}}},
			{newRev, "tasks/cancel", map[string]any{"taskId": runTask}},
			{oldRev, "tasks/get", map[string]any{"taskId": progTask}},
			{oldRev, "tasks/result", map[string]any{"taskId": progTask}},
			{oldRev, "tasks/cancel", map[string]any{"taskId": delTask}},
			// Forged ids: malformed, and well-formed but never issued.
			{newRev, "tasks/get", map[string]any{"taskId": "mcp-t-zzz-AAAA"}},
			{newRev, "tasks/get", map[string]any{"taskId": "mcp-p-" + "mh0000000-" + strings.Repeat("A", 26)}},
			{oldRev, "tasks/get", map[string]any{"taskId": strings.Repeat("x", 300)}},
		} {
			res, e := bob.call(ctx, c.rev, c.method, c.params)
			if code(e) != -32602 {
				t.Errorf("bob %s %v = %v, %v; want -32602 task not found", c.method, c.params["taskId"], res, e)
			}
			if e != nil && strings.Contains(fmt.Sprint(e), "alice") {
				t.Errorf("the error names the owner: %v", e)
			}
		}
		l := bob.must(ctx, oldRev, "tasks/list", map[string]any{})
		if s := fmt.Sprint(l); strings.Contains(s, delTask) || strings.Contains(s, runTask) || strings.Contains(s, progTask) {
			t.Errorf("bob's tasks/list shows alice's tasks: %v", l)
		}
		// A caller who may call only calculator tools gets no task for KV.Delete.
		dave := &mcpClient{t: t, addr: gwB.addr, token: tenantToken(t, secret, "dave", "tools:call:calculator.*", "programs:run", "programs:read")}
		if res, e := dave.call(ctx, oldRev, "tools/call", map[string]any{"name": "KV_Delete", "arguments": map[string]any{"key": "mcp.task"}, "task": map[string]any{}}); code(e) != -32602 {
			t.Errorf("a task for a tool the caller may not call: %v, %v; want -32602", res, e)
		}
		if st := alice.must(ctx, newRev, "tasks/get", map[string]any{"taskId": delTask}); st["status"] != "input_required" {
			t.Errorf("after bob's update and cancel, alice's task is %v", st["status"])
		}
	})

	// 4. Approve on B (tasks/update), then the result (tasks/result).
	ack := alice.must(ctx, newRev, "tasks/update", map[string]any{"taskId": delTask,
		"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"approve": true}}}})
	if ack["resultType"] != "complete" {
		t.Errorf("tasks/update = %v, want an empty complete result", ack)
	}
	res := alice.must(ctx, oldRev, "tasks/result", map[string]any{"taskId": delTask})
	if res["isError"] == true || dig(res, "_meta", "io.modelcontextprotocol/related-task", "taskId") != delTask || dig(res, "structuredContent", "revision") == nil {
		t.Errorf("tasks/result = %v, want KV.Delete's result with related-task", res)
	}

	// 5. A restarts; the run and the program are read from both.
	gwA2 := startGatewayProc(t, bin, gwA.addr, args...)
	waitServiceServing(ctx, t, gwA2.addr, "toolfleet.v1.AgentService")
	for _, addr := range []string{gwA2.addr, gwB.addr} {
		alice.addr = addr
		done := alice.waitTask(ctx, newRev, runTask, "completed")
		if a := dig(done, "result", "structuredContent", "answer"); a != "6 times 7 is 42." {
			t.Errorf("run task at %s = %v, want the answer", addr, done)
		}
		done = alice.waitTask(ctx, newRev, progTask, "completed")
		if r := dig(done, "result", "structuredContent", "result", "result"); r != 42.0 {
			t.Errorf("program task at %s = %v, want result 42", addr, done)
		}
	}

	t.Run("cancel", func(t *testing.T) {
		alice.addr = gwA2.addr
		// Completed: 2025-11-25 refuses, the extension acknowledges.
		if _, e := alice.call(ctx, oldRev, "tasks/cancel", map[string]any{"taskId": progTask}); code(e) != -32602 {
			t.Errorf("cancel of a completed task at 2025-11-25 = %v, want -32602", e)
		}
		// A call waiting for approval, cancelled by its owner.
		c := alice.must(ctx, oldRev, "tools/call", map[string]any{"name": "KV_Delete", "arguments": map[string]any{"key": "never.there"}, "task": map[string]any{}})
		id := dig(c, "task", "taskId").(string)
		alice.waitTask(ctx, newRev, id, "input_required")
		if got := alice.must(ctx, oldRev, "tasks/cancel", map[string]any{"taskId": id}); got["status"] != "cancelled" {
			t.Errorf("tasks/cancel = %v, want the cancelled task", got)
		}
		if _, e := alice.call(ctx, oldRev, "tasks/result", map[string]any{"taskId": id}); code(e) != -32602 {
			t.Errorf("tasks/result of a cancelled task = %v, want -32602", e)
		}
	})

	t.Run("list pages are bounded and complete", func(t *testing.T) {
		carol := &mcpClient{t: t, addr: gwB.addr, token: tenantToken(t, secret, "carol", scopes...)}
		const n = 55 // over one page (50)
		// One after another, as one client would: a burst of starts meets
		// Temporal's visibility rate limit (the per-principal quota check),
		// which the program service answers UNAVAILABLE.
		want := map[string]bool{}
		for i := range n {
			c := carol.must(ctx, oldRev, "tools/call", map[string]any{"name": "Calculator_Add", "arguments": map[string]any{"a": i, "b": 1}, "task": map[string]any{}})
			want[dig(c, "task", "taskId").(string)] = true
		}
		issued := "" // a cursor carol was given
		for {
			seen, pages := map[string]bool{}, 0
			cursor := ""
			for {
				p := map[string]any{}
				if cursor != "" {
					p["cursor"] = cursor
				}
				l, e := carol.call(ctx, oldRev, "tasks/list", p)
				if e != nil { // a read of Temporal failed: say so, try again
					t.Logf("tasks/list: %v", e)
					break
				}
				tasks, _ := l["tasks"].([]any)
				if len(tasks) > 50 {
					t.Fatalf("a page of %d tasks, over the bound of 50", len(tasks))
				}
				for _, tk := range tasks {
					seen[tk.(map[string]any)["taskId"].(string)] = true
				}
				pages++
				next, _ := l["nextCursor"].(string)
				if next == "" {
					break
				}
				if issued == "" {
					issued = next
				}
				cursor = next
			}
			if len(seen) == n && pages >= 2 {
				for id := range want {
					if !seen[id] {
						t.Errorf("task %s not listed", id)
					}
				}
				break
			}
			select { // visibility is eventually consistent
			case <-ctx.Done():
				t.Fatalf("listed %d of %d tasks in %d pages", len(seen), n, pages)
			case <-time.After(500 * time.Millisecond):
			}
		}
		if _, e := carol.call(ctx, oldRev, "tasks/list", map[string]any{"cursor": "forged!"}); code(e) != -32602 {
			t.Errorf("forged cursor: %v, want -32602", e)
		}
		if _, e := carol.call(ctx, oldRev, "tasks/list", map[string]any{"cursor": strings.Repeat("A", 5000)}); code(e) != -32602 {
			t.Errorf("huge cursor: %v, want -32602", e)
		}
		// A cursor that decodes but carries a page token the services did
		// not issue, and carol's cursor in bob's hands, are refused at once
		// as invalid params, never a server error after a wait (issue 32 §7).
		dave := &mcpClient{t: t, addr: gwB.addr, token: tenantToken(t, secret, "dave", scopes...)}
		for _, tc := range []struct {
			name   string
			who    *mcpClient
			cursor string
		}{
			{"made-up program page token", carol, base64.RawURLEncoding.EncodeToString([]byte(`{"t":"bWFkZSB1cA=="}`))},
			{"made-up run page token", carol, base64.RawURLEncoding.EncodeToString([]byte(`{"r":true,"t":"bWFkZSB1cA=="}`))},
			{"another caller's cursor", dave, issued},
		} {
			start := time.Now()
			_, e := tc.who.call(ctx, oldRev, "tasks/list", map[string]any{"cursor": tc.cursor})
			if code(e) != -32602 || time.Since(start) > 3*time.Second {
				t.Errorf("%s: %v after %s, want -32602 at once", tc.name, e, time.Since(start).Round(time.Millisecond))
			}
		}
	})
}

// rev is how a test request negotiates.
type rev int

const (
	oldRev        rev = iota // 2025-11-25
	newRev                   // 2026-07-28, tasks extension declared
	newRevNoTasks            // 2026-07-28 without the extension
	newRevNoAsk              // 2026-07-28, the extension declared but not elicitation
)

// mcpClient speaks MCP over streamable HTTP, one stateless request at a time.
type mcpClient struct {
	t     *testing.T
	addr  string
	token string
	id    int
	mu    sync.Mutex
}

// call sends one request; it returns the result or the JSON-RPC error.
func (c *mcpClient) call(ctx context.Context, r rev, method string, params map[string]any) (map[string]any, map[string]any) {
	c.t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	c.mu.Lock()
	c.id++
	id := c.id
	c.mu.Unlock()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.addr+"/mcp", nil)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if r == oldRev {
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	} else {
		caps := map[string]any{"elicitation": map[string]any{}}
		if r == newRevNoAsk {
			caps = map[string]any{}
		}
		if r == newRev || r == newRevNoAsk {
			caps["extensions"] = map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
		}
		params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": caps, "io.modelcontextprotocol/clientInfo": map[string]any{"name": "test", "version": "1"}}
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		if n, ok := params["name"].(string); ok && method == "tools/call" {
			req.Header.Set("Mcp-Name", n)
		}
		if id, ok := params["taskId"].(string); ok {
			req.Header.Set("Mcp-Name", id)
		}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	req.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(nil, 8<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(d, `"id"`) {
				raw = []byte(d)
			}
		}
	}
	var msg struct {
		Result map[string]any `json:"result"`
		Error  map[string]any `json:"error"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		c.t.Fatalf("%s: HTTP %d, not JSON-RPC: %s", method, resp.StatusCode, raw)
	}
	return msg.Result, msg.Error
}

// must is call that fails the test on an error.
func (c *mcpClient) must(ctx context.Context, r rev, method string, params map[string]any) map[string]any {
	c.t.Helper()
	res, e := c.call(ctx, r, method, params)
	if e != nil {
		c.t.Fatalf("%s %v: %v", method, params, e)
	}
	return res
}

// waitTask polls tasks/get until the task has status want.
func (c *mcpClient) waitTask(ctx context.Context, r rev, id, want string) map[string]any {
	c.t.Helper()
	for {
		st, e := c.call(ctx, r, "tasks/get", map[string]any{"taskId": id})
		switch {
		case e != nil && dig(e, "data", "code") == "UNAVAILABLE":
			// A loaded Temporal may not answer a query in time: the gateway
			// says so, and a client polls again, as here.
			c.t.Logf("tasks/get %s: %v", id, e)
		case e != nil:
			c.t.Fatalf("tasks/get %s: %v", id, e)
		case st["status"] == want:
			return st
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("task %s is %v, want %s: %v", id, st["status"], want, st)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// code is a JSON-RPC error's code (0 when none).
func code(e map[string]any) int {
	if e == nil {
		return 0
	}
	n, _ := e["code"].(float64)
	return int(n)
}

// dig walks nested JSON objects.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// tenantToken mints sub's token with scopes, signed with secret.
func tenantToken(t *testing.T, secret, sub string, scopes ...string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "scope": strings.Join(scopes, " "),
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// gatewayProc is a cmd/gateway process.
type gatewayProc struct {
	addr   string
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	once   sync.Once
}

// startGatewayProc runs bin on addr (a free port when empty) until stopped
// or the test ends.
func startGatewayProc(t *testing.T, bin, addr string, args ...string) *gatewayProc {
	t.Helper()
	if addr == "" {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = lis.Addr().String()
		_ = lis.Close()
	}
	g := &gatewayProc{addr: addr, stderr: &syncbuf.Buffer{}}
	g.cmd = exec.Command(bin, append([]string{"--listen", addr, "--log-format", "text", "--log-level", "warn"}, args...)...)
	g.cmd.Stderr = g.stderr
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.stop(t) })
	return g
}

// stop ends the process (SIGTERM, its graceful shutdown) and waits for it.
func (g *gatewayProc) stop(t *testing.T) {
	g.once.Do(func() {
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		_ = g.cmd.Wait()
		if t.Failed() {
			t.Logf("gateway %s stderr:\n%s", g.addr, g.stderr.String())
		}
	})
}
