package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/jsonerr"
	"github.com/toolfleet/toolfleet/internal/telemetry"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// tools/call: a listed tool's call through the backend, its logs,
// progress and trace context, and its result.

// handler calls toolID (the exact version listed) through the backend;
// required are the client capabilities the tool needs (clientinput.go).
func (s *Server) handler(toolID string, content bool, required []string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		if res, err := checkCapabilities(ctx, req, toolID, required); res != nil || err != nil {
			return res, err
		}
		input := &structpb.Struct{}
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			if err := protojson.Unmarshal(raw, input); err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
					Message: fmt.Sprintf("arguments of %s must be a JSON object: %v", req.Params.Name, jsonerr.Describe(raw, err))}
			}
		}
		call := &toolfleetv1.CallToolRequest{ToolId: toolID, Input: input}
		if id, ok := req.Params.Meta[MetaCallID].(string); ok {
			call.CallId = id
		}
		if a, ok := req.Params.Meta[MetaApprover].(string); ok && a != "" {
			call.Approval = &toolfleetv1.Approval{Approver: a}
		}
		call.ClientInput = clientInput(ctx, req)
		carriedApprover, state, carried := carriedApproval(req.Params.RequestState)
		if carried && call.Approval == nil {
			call.Approval = &toolfleetv1.Approval{Approver: carriedApprover}
		}
		responses, err := inputResponses(req.Params)
		if err != nil {
			return nil, err
		}
		call.InputResponses = responses
		answered, approval, err := approvalAnswer(req.Params, toolID, input)
		if err != nil {
			return nil, err
		}
		if !answered {
			call.RequestState = state // the gateway's, for the tool's own questions
		}
		if answered {
			if approval == nil {
				return errorResult(sdk.Meta{MetaToolID: toolID, "toolfleet/code": "FAILED_PRECONDITION"},
					fmt.Sprintf("%s was not run: the approval was declined.", toolID)), nil
			}
			if call.Approval == nil {
				call.Approval = approval
			}
		}
		ctx = withRequest(ctx, req)
		ctx = withTraceMeta(ctx, req.Params.Meta)
		if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
			stop := s.progress(ctx, req.Session, tok, toolID)
			defer stop()
		}
		resp, err := s.backend.CallTool(ctx, call)
		if err != nil {
			// Before the approval check: both are FAILED_PRECONDITION.
			if res, rpcErr, ok := connectionRequired(req, toolID, err); ok && ctx.Err() == nil {
				return res, rpcErr
			}
			if why, ok := approvalRequired(err); ok && ctx.Err() == nil {
				switch {
				case answered:
					return errorResult(sdk.Meta{MetaToolID: toolID, "toolfleet/code": "FAILED_PRECONDITION"},
						fmt.Sprintf("%s was not run: it was approved in the MCP client, but the gateway refused the approval: %s", toolID, why)), nil
				case call.Approval == nil && canAsk(ctx, req):
					if a, ok := s.backend.(Approving); ok && !a.MayApprove(ctx) {
						return errorResult(sdk.Meta{MetaToolID: toolID, "toolfleet/code": "FAILED_PRECONDITION"},
							fmt.Sprintf("%s was not run: it requires an approval, and this caller may not give one (that needs the tools:approve scope).", toolID)), nil
					}
					return approvalQuestion(toolID, input, why), nil
				}
			}
			return failure(ctx, toolID, err)
		}
		s.relayLogs(ctx, req.Session, resp)
		if ir := resp.GetInputRequired(); ir != nil {
			approved := call.Approval != nil && (answered || carried)
			return inputRequired(toolID, ir, call.Approval.GetApprover(), approved), nil
		}
		return result(resp, content)
	}
}

// relayLogs sends the lines the tool logged for its caller as
// notifications/message on the request's stream, before the result; the
// SDK drops those under the client's level (logging/setLevel, or the
// request's _meta log level; "info" for a stateless client at 2025-11-25).
func (s *Server) relayLogs(ctx context.Context, ss *sdk.ServerSession, resp *toolfleetv1.CallToolResponse) {
	if ss == nil {
		return
	}
	send := func(level sdk.LoggingLevel, msg string) bool {
		err := ss.Log(ctx, &sdk.LoggingMessageParams{Level: level, Logger: resp.GetToolId(), Data: msg})
		if err != nil {
			s.log.Debug("log notification not sent", "tool", resp.GetToolId(), "error", err)
		}
		return err == nil
	}
	for _, l := range resp.GetLogs() {
		if !send(sdk.LoggingLevel(tool.LogLevelName(l.GetLevel())), l.GetMessage()) {
			return
		}
	}
	if n := resp.GetLogsDropped(); n > 0 {
		send("notice", fmt.Sprintf("%d more log lines of this call were not relayed (over the bound of %d lines or %d KiB)",
			n, tool.MaxCallerLogLines, tool.MaxCallerLogBytes>>10))
	}
}

// withTraceMeta makes a W3C traceparent (and tracestate) in a request's _meta
// the parent of the call, so the gateway's events, logs and the worker join
// the client's trace. It wins over the HTTP header: _meta names this request.
func withTraceMeta(ctx context.Context, meta sdk.Meta) context.Context {
	tp, _ := meta["traceparent"].(string)
	if tp == "" || len(tp) > 128 {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": tp}
	if ts, _ := meta["tracestate"].(string); ts != "" && len(ts) <= 512 {
		carrier["tracestate"] = ts
	}
	return telemetry.Propagator.Extract(ctx, carrier)
}

// progress sends a notification every ProgressInterval until stop is called.
func (s *Server) progress(ctx context.Context, ss *sdk.ServerSession, token any, toolID string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		t := time.NewTicker(s.opts.ProgressInterval)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			elapsed := time.Since(start).Round(100 * time.Millisecond)
			err := ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(n),
				Message: fmt.Sprintf("%s running for %s", toolID, elapsed)})
			if err != nil && ctx.Err() == nil {
				s.log.Debug("progress notification not sent", "tool", toolID, "error", err)
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// result renders a response: the value (JSON text, plus structuredContent for
// objects) or an execution error as isError.
func result(resp *toolfleetv1.CallToolResponse, content bool) (*sdk.CallToolResult, error) {
	meta := sdk.Meta{MetaCallID: resp.GetCallId(), MetaToolID: resp.GetToolId()}
	if !resp.GetSuccess() {
		text := resp.GetError().GetMessage()
		if hint := resp.GetError().GetAdditionalPromptContent(); hint != "" {
			text += "\n" + hint
		}
		return &sdk.CallToolResult{Meta: meta, IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: text}}}, nil
	}
	if content && resp.GetValue() != nil {
		blocks, err := contentBlocks(resp.GetValue())
		if err != nil {
			return nil, fmt.Errorf("mcp: result of %s: %w", resp.GetToolId(), err)
		}
		return &sdk.CallToolResult{Meta: meta, Content: blocks}, nil
	}
	v := resp.GetValue().AsInterface()
	text, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("mcp: result of %s: %w", resp.GetToolId(), err)
	}
	out := &sdk.CallToolResult{Meta: meta, Content: []sdk.Content{&sdk.TextContent{Text: string(text)}}}
	if _, ok := v.(map[string]any); ok {
		out.StructuredContent = v
	}
	return out, nil
}
