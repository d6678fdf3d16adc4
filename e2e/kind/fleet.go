package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// userScopes are the scopes of the test's user: a developer running agents
// and programs on the cluster, and an operator who reads the runs and
// programs triggers started (they belong to the triggers' principal).
var userScopes = []string{
	"tools:call", "runs:start", "runs:read", "runs:approve", "runs:cancel", "runs:admin",
	"programs:run", "programs:read", "programs:approve", "programs:admin",
}

// fleet is the user's view of the deployed fleet: clients over port-forwards.
type fleet struct {
	token    string
	gateway  *forward
	nats     *forward
	tools    *client.Client
	agents   toolfleetv1connect.AgentServiceClient
	programs toolfleetv1connect.ProgramServiceClient
	nc       *nats.Conn
}

func (f *fleet) close() {
	if f.tools != nil {
		_ = f.tools.Close()
	}
	if f.nc != nil {
		f.nc.Close()
	}
}

// connectFleet opens the port-forwards and clients, with a token for subject
// sub signed with the gateway's HS256 secret read from the cluster.
func (h *harness) connectFleet(ctx context.Context) (*fleet, error) {
	token, err := h.signToken(ctx, "kind-test", userScopes)
	if err != nil {
		return nil, err
	}
	f := &fleet{token: token}
	if f.gateway, err = h.forward(ctx, "svc/gateway", 8080); err != nil {
		return nil, err
	}
	if f.nats, err = h.forward(ctx, "svc/nats", 4222); err != nil {
		return nil, err
	}
	if f.tools, err = client.New(f.gateway.addr(), client.WithToken(token), client.WithTimeout(time.Minute)); err != nil {
		return nil, err
	}
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	})
	base := "http://" + f.gateway.addr()
	hc := &http.Client{Timeout: 2 * time.Minute}
	f.agents = toolfleetv1connect.NewAgentServiceClient(hc, base, connect.WithInterceptors(auth))
	f.programs = toolfleetv1connect.NewProgramServiceClient(hc, base, connect.WithInterceptors(auth))
	f.nc, err = nats.Connect("nats://"+f.nats.addr(), nats.Name("kind-test"), nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, err
	}
	return f, nil
}

// signToken makes a two-hour token for subject sub with scopes, signed with
// the gateway's HS256 secret read from the cluster.
func (h *harness) signToken(ctx context.Context, sub string, scopes []string) (string, error) {
	raw, err := h.kubectl(ctx, "get", "secret", "toolfleet-gateway-jwt", "-o", "jsonpath={.data.hs256}")
	if err != nil {
		return "", err
	}
	secret, err := base64.StdEncoding.DecodeString(string(raw))
	if err != nil || len(secret) == 0 {
		return "", fmt.Errorf("the gateway's JWT secret: %v", err)
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "scope": strings.Join(scopes, " "),
		"iat": time.Now().Unix(), "exp": time.Now().Add(2 * time.Hour).Unix(),
	}).SignedString(secret)
}

// passing reports whether err is one a port-forward or pod restart causes
// and a retry can get past.
func passing(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeAborted:
		return true
	case connect.CodeUnknown, connect.CodeCanceled:
		// A port-forward whose pod went away resets the connection; connect
		// reports that as unknown, or as canceled when the read was cut.
		s := err.Error()
		return strings.Contains(s, "connection refused") || strings.Contains(s, "EOF") || strings.Contains(s, "connection reset")
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// outage is how long a request keeps being retried while the fleet is
// unreachable: as long as the chaos waits for its rollouts (rollout status
// --timeout=10m). On a loaded 2-core node a rollout of everything, Temporal's
// server included, took over 7 minutes (docs/reliability.md).
const outage = 10 * time.Minute

// retry calls f until it succeeds, fails for good, or within passes.
func retry[T any](ctx context.Context, within time.Duration, f func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	delay := 250 * time.Millisecond
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		v, err := f(cctx)
		ccancel()
		if err == nil || !passing(err) || ctx.Err() != nil {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(delay):
		}
		delay = min(2*delay, 3*time.Second)
	}
}

// call calls a tool and decodes its output into out.
func (f *fleet) call(ctx context.Context, toolID string, input map[string]any, out any) error {
	return f.callID(ctx, toolID, "", input, out)
}

// callID is call with a call_id (idempotency key): a retry of the same id is
// answered from the gateway's idempotency store.
func (f *fleet) callID(ctx context.Context, toolID, callID string, input map[string]any, out any) error {
	res, err := retry(ctx, outage, func(ctx context.Context) (*client.Result, error) {
		if callID == "" {
			return f.tools.Call(ctx, toolID, input)
		}
		in, err := structpb.NewStruct(input)
		if err != nil {
			return nil, err
		}
		return f.tools.CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: toolID, CallId: callID, Input: in})
	})
	if err != nil {
		return fmt.Errorf("%s: %w", toolID, err)
	}
	if err := res.Err(); err != nil {
		return fmt.Errorf("%s: %w", toolID, err)
	}
	if out != nil {
		if err := res.Decode(out); err != nil {
			return fmt.Errorf("%s: decode: %w", toolID, err)
		}
	}
	return nil
}

// kvValue reads a KV key as an integer counter.
func (f *fleet) kvValue(ctx context.Context, key string) (int64, error) {
	var got struct {
		Value string `json:"value"`
	}
	if err := f.call(ctx, "KV.Get", map[string]any{"key": key}, &got); err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(got.Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("KV %s = %q: not a counter", key, got.Value)
	}
	return n, nil
}

func userMessage(text string) *toolfleetv1.Message {
	return &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_USER,
		Parts: []*toolfleetv1.Part{{Kind: &toolfleetv1.Part_Text{Text: text}}}}
}

// startRun starts an agent run with id (an idempotency key: a retry after a
// lost answer attaches to the same run).
func (f *fleet) startRun(ctx context.Context, req *toolfleetv1.StartRunRequest) error {
	_, err := retry(ctx, outage, func(ctx context.Context) (*connect.Response[toolfleetv1.StartRunResponse], error) {
		return f.agents.StartRun(ctx, connect.NewRequest(req))
	})
	return err
}

func (f *fleet) getRun(ctx context.Context, id string) (*toolfleetv1.GetRunResponse, error) {
	res, err := retry(ctx, outage, func(ctx context.Context) (*connect.Response[toolfleetv1.GetRunResponse], error) {
		return f.agents.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: id}))
	})
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// waitRun polls a run until until says it is done, or within passes.
func (f *fleet) waitRun(ctx context.Context, id string, within time.Duration, until func(*toolfleetv1.GetRunResponse) bool) (*toolfleetv1.GetRunResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last *toolfleetv1.GetRunResponse
	for {
		r, err := f.getRun(ctx, id)
		if err == nil {
			last = r
			if until(r) {
				return r, nil
			}
		} else if connect.CodeOf(err) != connect.CodeNotFound || ctx.Err() != nil {
			return nil, fmt.Errorf("run %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("run %s: not done within %s (last: %v)", id, within, describeRun(last))
		case <-time.After(time.Second):
		}
	}
}

func finished(r *toolfleetv1.GetRunResponse) bool {
	switch r.GetStatus() {
	case toolfleetv1.RunStatus_RUN_STATUS_COMPLETED, toolfleetv1.RunStatus_RUN_STATUS_FAILED,
		toolfleetv1.RunStatus_RUN_STATUS_CANCELED, toolfleetv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED:
		return true
	}
	return r.GetIdle() // an answered run waits for SendMessage
}

func describeRun(r *toolfleetv1.GetRunResponse) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%s, %d turns, %d tool calls, %q %s", r.GetStatus(), r.GetTurns(), r.GetToolCalls(), r.GetAnswer(), r.GetFailureMessage())
}

// runProgram starts a program with id and waits for its outcome.
func (f *fleet) runProgram(ctx context.Context, req *toolfleetv1.RunProgramRequest, within time.Duration) (*toolfleetv1.GetProgramResponse, error) {
	if _, err := retry(ctx, outage, func(ctx context.Context) (*connect.Response[toolfleetv1.RunProgramResponse], error) {
		return f.programs.RunProgram(ctx, connect.NewRequest(req))
	}); err != nil {
		return nil, fmt.Errorf("program %s: %w", req.GetProgramId(), err)
	}
	return f.waitProgram(ctx, req.GetProgramId(), within)
}

func (f *fleet) waitProgram(ctx context.Context, id string, within time.Duration) (*toolfleetv1.GetProgramResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last *toolfleetv1.GetProgramResponse
	for {
		res, err := retry(ctx, outage, func(ctx context.Context) (*connect.Response[toolfleetv1.GetProgramResponse], error) {
			return f.programs.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: id}))
		})
		if err == nil {
			last = res.Msg
			if last.GetDone() {
				return last, nil
			}
		} else if connect.CodeOf(err) != connect.CodeNotFound || ctx.Err() != nil {
			return nil, fmt.Errorf("program %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("program %s: not done within %s (last: %v)", id, within, last)
		case <-time.After(time.Second):
		}
	}
}
