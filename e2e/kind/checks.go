package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// demoTools are what the scripted demo model uses.
var demoTools = []string{"Calculator.*", "Clock.*", "JSONQuery.*", "KV.*"}

func (h *harness) checks() []check {
	stamp := time.Now().UTC().Format("150405")
	return []check{
		{name: "kube context", fatal: true, always: true, fn: h.checkContext},
		{name: "tilt ci", fatal: true, always: true, fn: h.checkUp},
		{name: "pods ready", fatal: true, always: true, fn: h.checkPods},
		{name: "connect as a user", fatal: true, always: true, fn: func(ctx context.Context) (err error) {
			h.fleet, err = h.connectFleet(ctx)
			return err
		}},
		{name: "nats cluster R3", fn: h.checkNATS},
		{name: "tools list", fn: h.checkToolsList},
		{name: "tool calls", fn: func(ctx context.Context) error { return h.checkToolCalls(ctx, stamp) }},
		{name: "agent run", fn: func(ctx context.Context) error { return h.checkAgentRun(ctx, stamp) }},
		{name: "console", fn: func(ctx context.Context) error { return h.checkConsole(ctx, stamp) }},
		{name: "program", fn: func(ctx context.Context) error { return h.checkProgram(ctx, stamp) }},
		{name: "approval", fn: func(ctx context.Context) error { return h.checkApproval(ctx, stamp) }},
		{name: "nats trigger", fn: func(ctx context.Context) error { return h.checkTrigger(ctx, stamp) }},
		{name: "hydra connect", fn: h.checkHydraConnect},
		{name: "chaos", fn: func(ctx context.Context) error { return h.checkChaos(ctx, stamp) }},
		{name: "after chaos: pods ready", fn: h.checkPods},
		{name: "after chaos: nats cluster R3", fn: h.checkNATS},
		{name: "scaffolded toolkit", fn: h.checkScaffold},
	}
}

func (h *harness) checkContext(ctx context.Context) error {
	out, err := h.kubectl(ctx, "get", "nodes", "--no-headers")
	if err != nil {
		return err
	}
	if !strings.Contains(string(out), " Ready") {
		return errf("no Ready node: %s", out)
	}
	h.figure("%d node(s)", len(strings.Split(strings.TrimSpace(string(out)), "\n")))
	return nil
}

func (h *harness) checkUp(ctx context.Context) error {
	if h.cfg.skipUp {
		h.note = "skipped (-skip-up)"
		return nil
	}
	begin := time.Now()
	if err := h.tilt(ctx); err != nil {
		return err
	}
	h.figure("tilt ci green in %s", time.Since(begin).Round(time.Second))
	return nil
}

// jsz is what the check reads of NATS's /jsz?accounts=true&streams=true&config=true.
type jsz struct {
	ServerName  string `json:"server_name"`
	MetaCluster struct {
		Leader      string `json:"leader"`
		ClusterSize int    `json:"cluster_size"`
	} `json:"meta_cluster"`
	AccountDetails []struct {
		StreamDetail []struct {
			Name   string `json:"name"`
			Config struct {
				Replicas int    `json:"num_replicas"`
				Storage  string `json:"storage"`
			} `json:"config"`
			Cluster struct {
				Leader   string `json:"leader"`
				Replicas []struct {
					Name    string `json:"name"`
					Current bool   `json:"current"`
				} `json:"replicas"`
			} `json:"cluster"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

// checkNATS asks every NATS node for its JetStream view: a 3-node meta
// cluster with a leader, and every stream (KV buckets and object stores are
// streams) with 3 replicas, a leader and its 2 followers current.
func (h *harness) checkNATS(ctx context.Context) error {
	var problems []string
	streams, led := map[string]bool{}, map[string]bool{}
	for i := range 3 {
		name := fmt.Sprintf("nats-%d", i)
		f, err := h.forward(ctx, "pod/"+name, 8222)
		if err != nil {
			return err
		}
		var z jsz
		err = getJSON(ctx, "http://"+f.addr()+"/jsz?accounts=true&streams=true&config=true", &z)
		f.close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if z.MetaCluster.ClusterSize != 3 || z.MetaCluster.Leader == "" {
			problems = append(problems, fmt.Sprintf("%s: meta cluster size %d, leader %q", name, z.MetaCluster.ClusterSize, z.MetaCluster.Leader))
		}
		for _, a := range z.AccountDetails {
			for _, s := range a.StreamDetail {
				streams[s.Name] = true
				if s.Cluster.Leader != "" && s.Cluster.Leader != name {
					// Only the leader knows how far its followers are: a
					// follower reports the other follower as not current.
					continue
				}
				led[s.Name] = true
				current := 0
				for _, r := range s.Cluster.Replicas {
					if r.Current {
						current++
					}
				}
				if s.Config.Replicas != 3 || s.Cluster.Leader == "" || current != 2 {
					p := fmt.Sprintf("%s R%d (leader %q, %d of 2 followers current)", s.Name, s.Config.Replicas, s.Cluster.Leader, current)
					if !slices.Contains(problems, p) {
						problems = append(problems, p)
					}
				}
			}
		}
	}
	if len(streams) == 0 {
		return errf("no JetStream streams at all")
	}
	for name := range streams {
		if !led[name] {
			problems = append(problems, name+": no node reports itself its leader")
		}
	}
	if len(problems) > 0 {
		return errf("%d streams, not all R3 and current: %s", len(streams), strings.Join(problems, "; "))
	}
	h.figure("3-node meta cluster with a leader; %d streams/buckets, all R3 with 2 current followers", len(streams))
	return nil
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errf("GET %s: %s: %s", url, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

func (h *harness) checkToolsList(ctx context.Context) error {
	f := h.fleet
	res, err := retry(ctx, outage, func(ctx context.Context) (*toolfleetv1.ListToolsResponse, error) {
		return f.tools.ListTools(ctx, &toolfleetv1.ListToolsRequest{})
	})
	if err != nil {
		return err
	}
	kits := map[string]int{}
	for _, t := range res.GetTools() {
		kit, _, _ := strings.Cut(t.GetId(), ".")
		kits[kit]++
	}
	for _, want := range []string{"Calculator", "Clock", "JSONQuery", "KV", "Web"} {
		if kits[want] == 0 {
			return errf("no %s tools among %d (%v)", want, len(res.GetTools()), kits)
		}
	}
	h.figure("%d tools in %d toolkits", len(res.GetTools()), len(kits))
	return nil
}

func (h *harness) checkToolCalls(ctx context.Context, stamp string) error {
	f := h.fleet
	var sum struct {
		Result float64 `json:"result"`
	}
	if err := f.call(ctx, "Calculator.Add", map[string]any{"a": 2, "b": 3}, &sum); err != nil {
		return err
	}
	if sum.Result != 5 {
		return errf("Calculator.Add(2, 3) = %v", sum.Result)
	}
	key := "kind-test-" + stamp
	if err := f.callID(ctx, "KV.Put", "kind-test/"+stamp+"/put", map[string]any{"key": key, "value": "41"}, nil); err != nil {
		return err
	}
	// The same call_id again is answered from the idempotency store: it must
	// not overwrite the newer value written in between.
	if err := f.call(ctx, "KV.Put", map[string]any{"key": key, "value": "42"}, nil); err != nil {
		return err
	}
	if err := f.callID(ctx, "KV.Put", "kind-test/"+stamp+"/put", map[string]any{"key": key, "value": "41"}, nil); err != nil {
		return err
	}
	if v, err := f.kvValue(ctx, key); err != nil || v != 42 {
		return errf("KV %s = %d, %v after a repeated call_id; want 42 (the repeat answered from the store)", key, v, err)
	}
	h.figure("Calculator.Add, KV.Put/Get, a repeated call_id answered from the store")
	return nil
}

// demoRun starts a scripted:demo run that adds a and b and saves the sum
// under key, and returns its id.
func (h *harness) demoRun(ctx context.Context, id string, a, b int, key string, approval []string) error {
	req := &toolfleetv1.StartRunRequest{
		RunId:       id,
		Model:       "scripted:demo",
		Messages:    []*toolfleetv1.Message{userMessage(fmt.Sprintf("add %d and %d and save it as %s", a, b, key))},
		Tools:       demoTools,
		IdleTimeout: durationpb.New(-time.Second), // close the workflow once answered
	}
	if len(approval) > 0 {
		req.Approval = &toolfleetv1.ApprovalPolicy{Tools: approval, Timeout: durationpb.New(10 * time.Minute)}
	}
	return h.fleet.startRun(ctx, req)
}

// checkRunSaved: run id completed and saved want under key.
func (h *harness) checkRunSaved(ctx context.Context, id, key string, want int64, within time.Duration) error {
	r, err := h.fleet.waitRun(ctx, id, within, finished)
	if err != nil {
		return err
	}
	if r.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED && !r.GetIdle() {
		return errf("run %s: %s", id, describeRun(r))
	}
	if v, err := h.fleet.kvValue(ctx, key); err != nil || v != want {
		return errf("run %s saved %s = %d (%v), want %d; run: %s", id, key, v, err, want, describeRun(r))
	}
	return nil
}

func (h *harness) checkAgentRun(ctx context.Context, stamp string) error {
	id, key := "kind-run-"+stamp, "kind-run-"+stamp
	begin := time.Now()
	if err := h.demoRun(ctx, id, 20, 22, key, nil); err != nil {
		return err
	}
	if err := h.checkRunSaved(ctx, id, key, 42, 5*time.Minute); err != nil {
		return err
	}
	r, _ := h.fleet.getRun(ctx, id)
	h.figure("run completed in %s (%d turns, %d tool calls)", time.Since(begin).Round(100*time.Millisecond), r.GetTurns(), r.GetToolCalls())
	return nil
}

const sumProgram = `
total = 0
for n in args["numbers"]:
    total = Calculator_Add(a=total, b=n).value["result"]
result = {"total": total}
`

func (h *harness) checkProgram(ctx context.Context, stamp string) error {
	args, _ := structpb.NewStruct(map[string]any{"numbers": []any{3, 4, 5}})
	begin := time.Now()
	p, err := h.fleet.runProgram(ctx, &toolfleetv1.RunProgramRequest{ProgramId: "kind-prog-" + stamp, Source: sumProgram,
		Args: args, Tools: []string{"Calculator.*"}}, 5*time.Minute)
	if err != nil {
		return err
	}
	total := p.GetResult().GetStructValue().GetFields()["total"].GetNumberValue()
	if p.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED || total != 12 {
		return errf("program: %s total %v (%s)", p.GetStatus(), total, p.GetProgramError().GetMessage())
	}
	h.figure("program completed in %s (%d tool calls)", time.Since(begin).Round(100*time.Millisecond), p.GetToolCalls())
	return nil
}

func (h *harness) checkApproval(ctx context.Context, stamp string) error {
	f := h.fleet
	id, key := "kind-approve-"+stamp, "kind-approve-"+stamp
	if err := h.demoRun(ctx, id, 30, 12, key, []string{"KV.Put"}); err != nil {
		return err
	}
	r, err := f.waitRun(ctx, id, 5*time.Minute, func(r *toolfleetv1.GetRunResponse) bool {
		return len(r.GetPendingApprovals()) > 0 || finished(r)
	})
	if err != nil {
		return err
	}
	if len(r.GetPendingApprovals()) == 0 {
		return errf("run %s never waited for approval: %s", id, describeRun(r))
	}
	pending := r.GetPendingApprovals()[0]
	if pending.GetToolId() != "KV.Put" && !strings.HasPrefix(pending.GetToolId(), "KV.Put@") {
		return errf("run %s waits for approval of %s, want KV.Put", id, pending.GetToolId())
	}
	waitedAt := time.Now()
	if _, err := retry(ctx, outage, func(ctx context.Context) (*connect.Response[toolfleetv1.DecideApprovalResponse], error) {
		return f.agents.DecideApproval(ctx, connect.NewRequest(&toolfleetv1.DecideApprovalRequest{RunId: id, CallId: pending.GetCallId(), Approved: true, Reason: "kind-test"}))
	}); err != nil {
		return err
	}
	if err := h.checkRunSaved(ctx, id, key, 42, 5*time.Minute); err != nil {
		return err
	}
	h.figure("approved %s; run completed %s later", pending.GetToolId(), time.Since(waitedAt).Round(100*time.Millisecond))
	return nil
}

func (h *harness) checkTrigger(ctx context.Context, stamp string) error {
	f := h.fleet
	msgID := "kt-" + stamp
	key := "kind-trigger-" + stamp
	msg := nats.NewMsg("toolfleet.triggers.kind.agent")
	msg.Header.Set(nats.MsgIdHdr, msgID)
	msg.Data = []byte(fmt.Sprintf("add 7 and 8 and save it as %s", key))
	if err := publishJS(ctx, f.nc, msg); err != nil {
		return err
	}
	if err := h.checkRunSaved(ctx, "trg_kind-agent_m"+msgID, key, 15, 5*time.Minute); err != nil {
		return err
	}
	h.figure("message %s started run trg_kind-agent_m%s, which completed", msgID, msgID)
	return nil
}

// publishJS publishes msg and waits for the JetStream ack (the trigger stream
// stored it), retrying while NATS is unreachable.
func publishJS(ctx context.Context, nc *nats.Conn, msg *nats.Msg) error {
	_, err := retry(ctx, 2*time.Minute, func(ctx context.Context) (*nats.Msg, error) {
		reply, err := nc.RequestMsgWithContext(ctx, msg)
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", msg.Subject, context.DeadlineExceeded) // passing
		}
		var ack struct {
			Stream string `json:"stream"`
			Error  *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil || ack.Stream == "" {
			return nil, fmt.Errorf("publish %s: no JetStream ack: %s", msg.Subject, reply.Data)
		}
		return reply, nil
	})
	return err
}

// chaosProgram makes args["n"] non-idempotent increments of args["key"], one
// after the other.
const chaosProgram = `
last = None
for i in range(int(args["n"])):
    r = call("KV.Increment", key=args["key"], by=1)
    if not r.ok:
        fail("increment %d: %s" % (i, r.error.message))
    last = r.value
result = {"last": last}
`

// checkChaos runs programs, agent runs and trigger messages that change KV
// while pods are deleted with --force and every Deployment is rolled: all
// must complete and every counter must end exact.
func (h *harness) checkChaos(ctx context.Context, stamp string) error {
	f := h.fleet
	cfg := h.cfg
	begin := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// Programs: cfg.programs × cfg.counts increments.
	for i := range cfg.programs {
		wg.Go(func() {
			id := fmt.Sprintf("kind-chaos-%s-p%d", stamp, i)
			key := id
			args, _ := structpb.NewStruct(map[string]any{"key": key, "n": cfg.counts})
			p, err := f.runProgram(ctx, &toolfleetv1.RunProgramRequest{ProgramId: id, Source: chaosProgram, Args: args,
				Tools: []string{"KV.*"}, Limits: &toolfleetv1.ProgramLimits{MaxToolCalls: int32(cfg.counts + 10), Deadline: durationpb.New(20 * time.Minute)}},
				20*time.Minute)
			if err != nil {
				fail("%v", err)
				return
			}
			if p.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED {
				fail("program %s: %s %s", id, p.GetStatus(), p.GetProgramError().GetMessage())
				return
			}
			if v, err := f.kvValue(ctx, key); err != nil || v != int64(cfg.counts) {
				fail("program %s: counter %s = %d (%v), want %d", id, key, v, err, cfg.counts)
			}
		})
	}
	// Agent runs: each saves its own sum.
	for i := range cfg.runs {
		wg.Go(func() {
			id := fmt.Sprintf("kind-chaos-%s-r%d", stamp, i)
			if err := h.demoRun(ctx, id, i, 1000, id, nil); err != nil {
				fail("run %s: %v", id, err)
				return
			}
			if err := h.checkRunSaved(ctx, id, id, int64(i+1000), 20*time.Minute); err != nil {
				fail("%v", err)
			}
		})
	}
	// Trigger messages: each adds 1 to one counter, exactly once.
	const messages = 20
	triggerKey := "kind-chaos-" + stamp + "-t"
	wg.Go(func() {
		for i := range messages {
			msg := nats.NewMsg("toolfleet.triggers.kind.count")
			msg.Header.Set(nats.MsgIdHdr, fmt.Sprintf("kc-%s-%d", stamp, i))
			msg.Data, _ = json.Marshal(map[string]string{"key": triggerKey})
			if err := publishJS(ctx, f.nc, msg); err != nil {
				fail("trigger message %d: %v", i, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	// Direct callers, retrying each call_id across the gateway pod's deletion.
	direct, err := h.startDirectCallers(ctx, stamp, cfg.directCallers)
	if err != nil {
		fail("direct callers: %v", err)
	}

	// The chaos, while that runs.
	kills := 0
	var chaosErrs []string
	step := func(what string, args ...string) {
		if cfg.calm {
			return
		}
		if _, err := h.kubectl(ctx, args...); err != nil {
			chaosErrs = append(chaosErrs, what+": "+err.Error())
			return
		}
		kills++
	}
	time.Sleep(3 * time.Second)
	if pods, err := h.pods(ctx, "app.kubernetes.io/name=orchestrator"); err == nil && len(pods) > 0 {
		step("delete orchestrator", "delete", "pod", pods[0].Metadata.Name, "--force", "--grace-period=0")
	}
	time.Sleep(5 * time.Second)
	step("delete nats-1", "delete", "pod", "nats-1", "--force", "--grace-period=0")
	time.Sleep(5 * time.Second)
	if pods, err := h.pods(ctx, "app.kubernetes.io/name=gateway"); err == nil && len(pods) > 0 {
		step("delete gateway", "delete", "pod", pods[0].Metadata.Name, "--force", "--grace-period=0")
	}
	time.Sleep(5 * time.Second)
	step("rollout restart", "rollout", "restart", "deployment")
	var deps struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
		} `json:"items"`
	}
	if err := h.kubectlJSON(ctx, &deps, "get", "deployments"); err == nil {
		for _, d := range deps.Items {
			if _, err := h.kubectl(ctx, "rollout", "status", "deployment/"+d.Metadata.Name, "--timeout=10m"); err != nil {
				chaosErrs = append(chaosErrs, err.Error())
			}
		}
	}
	rolled := time.Since(begin)
	var directCalls []*directCall
	if direct != nil {
		directCalls = direct.wait() // the calls in flight end first
	}
	wg.Wait()
	if direct != nil {
		for _, p := range h.checkDirectCalls(ctx, directCalls) {
			fail("%s", p)
		}
	}

	// The trigger counter: every message once, however often it was delivered.
	deadline := time.Now().Add(5 * time.Minute)
	var got int64
	for {
		v, err := f.kvValue(ctx, triggerKey)
		if err == nil {
			got = v
		}
		if got == messages || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if got != messages {
		fail("trigger counter %s = %d, want %d (one increment per message)", triggerKey, got, messages)
	}
	h.figure("%d programs × %d increments, %d agent runs, %d trigger messages; %d kills/rollouts done, rolled in %s, all settled in %s",
		cfg.programs, cfg.counts, cfg.runs, messages, kills, rolled.Round(time.Second), time.Since(begin).Round(time.Second))
	if len(chaosErrs) > 0 {
		errs = append(errs, "chaos steps: "+strings.Join(chaosErrs, "; "))
	}
	if len(errs) > 0 {
		return errf("%d problems: %s", len(errs), strings.Join(errs, " | "))
	}
	return nil
}
