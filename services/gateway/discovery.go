package gateway

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
)

// Page sizes of ListTools.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
	defaultSearch   = 5
)

// Length caps of discovery requests, checked before any work; a value over its
// cap is refused without being echoed.
const (
	// maxPageToken fits the tokens ListTools issues (a tool id in base64).
	maxPageToken = 256
	// maxFilter bounds ListTools' glob and toolkit name.
	maxFilter = 256
	// maxQuery bounds SearchTools' query (a sentence or a paragraph).
	maxQuery = 4096
)

// tooLong refuses a field over its cap without quoting it.
func tooLong(field string, n, limit int) *CallError {
	return serverError(codes.InvalidArgument, nil, "", "%s is %d bytes long; at most %d are accepted", field, n, limit)
}

// ListTools lists tool definitions: filtered by toolkit and glob, latest version
// of each tool unless all_versions, ordered by id, paginated with an opaque
// cursor, optionally rendered for a provider. It lists every tool: the
// surfaces list what the caller may call ([Gateway.ListToolsFor]).
func (g *Gateway) ListTools(req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	return g.ListToolsFor(auth.AnonymousPrincipal, req)
}

// ListToolsFor is [Gateway.ListTools] showing only the tools p may call
// ([Principal.MayList]).
func (g *Gateway) ListToolsFor(p *Principal, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	switch {
	case len(req.GetPageToken()) > maxPageToken:
		return nil, tooLong("page_token", len(req.GetPageToken()), maxPageToken)
	case len(req.GetFilter()) > maxFilter:
		return nil, tooLong("filter", len(req.GetFilter()), maxFilter)
	case len(req.GetToolkit()) > maxFilter:
		return nil, tooLong("toolkit", len(req.GetToolkit()), maxFilter)
	}
	snap := g.reg.Current()
	keep, err := filterOf(req.GetToolkit(), req.GetFilter())
	if err != nil {
		return nil, err
	}
	after := ""
	if tok := req.GetPageToken(); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return nil, serverError(codes.InvalidArgument, nil, err.Error(), "page_token %q is not a token this gateway issued", tok)
		}
		after = string(b)
	}
	size := int(req.GetPageSize())
	if size <= 0 {
		size = defaultPageSize
	}
	size = min(size, maxPageSize)
	resp := &toolfleetv1.ListToolsResponse{}
	for _, d := range snap.Defs() {
		if d.GetId() <= after || !keep(d) || (!req.GetAllVersions() && !snap.IsLatest(d)) || !p.MayList(d) {
			continue
		}
		if len(resp.Tools) == size {
			resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(resp.Tools[size-1].GetId()))
			break
		}
		resp.Tools = append(resp.Tools, d)
	}
	if len(resp.Tools) == 0 && after == "" && (req.GetFilter() != "" || req.GetToolkit() != "") {
		// Nothing matched a caller asking for particular tools: while the
		// registry is still loading workers that may serve them, say so
		// (UNAVAILABLE, retried) rather than "none" (a run or program
		// would conclude that no tool matches).
		if re := snap.NotLoaded(cmp.Or(req.GetFilter(), req.GetToolkit()), listedToolkit(req)); re != nil {
			ce := serverError(re.Code, re.Unwrap(), re.Detail, "%s", re.Message)
			ce.RetryAfter = notLoadedRetryAfter
			return nil, ce
		}
	}
	resp.Rendered, err = render(req.GetFormat(), resp.Tools)
	return resp, err
}

// listedToolkit is the one toolkit a listing asks for (its toolkit, or the
// part of its filter before the first dot when that part is no glob), or ""
// when it may match any.
func listedToolkit(req *toolfleetv1.ListToolsRequest) string {
	if tk := req.GetToolkit(); tk != "" {
		return tk
	}
	tk, _, _ := strings.Cut(req.GetFilter(), ".")
	if strings.ContainsAny(tk, "*?[") {
		return ""
	}
	return tk
}

// GetTool returns one tool definition, resolved like a call's tool_id.
func (g *Gateway) GetTool(req *toolfleetv1.GetToolRequest) (*toolfleetv1.GetToolResponse, error) {
	rt, ce := resolve(g.reg.Current(), req.GetToolId())
	if ce != nil {
		return nil, ce
	}
	resp := &toolfleetv1.GetToolResponse{Tool: rt.Def()}
	r, err := render(req.GetFormat(), []*toolfleetv1.ToolDefinition{rt.Def()})
	if err != nil {
		return nil, err
	}
	if len(r) == 1 {
		resp.Rendered = r[0]
	}
	return resp, nil
}

// SearchTools ranks the latest version of each tool for a natural-language query.
func (g *Gateway) SearchTools(req *toolfleetv1.SearchToolsRequest) (*toolfleetv1.SearchToolsResponse, error) {
	return g.SearchToolsFor(auth.AnonymousPrincipal, req)
}

// SearchToolsFor is [Gateway.SearchTools] ranking only the tools p may call
// ([Principal.MayList]).
func (g *Gateway) SearchToolsFor(p *Principal, req *toolfleetv1.SearchToolsRequest) (*toolfleetv1.SearchToolsResponse, error) {
	switch {
	case len(req.GetQuery()) > maxQuery:
		return nil, tooLong("query", len(req.GetQuery()), maxQuery)
	case len(req.GetToolkit()) > maxFilter:
		return nil, tooLong("toolkit", len(req.GetToolkit()), maxFilter)
	}
	snap := g.reg.Current()
	keep, err := filterOf(req.GetToolkit(), "")
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = defaultSearch
	}
	hits := snap.Search(req.GetQuery(), func(d *toolfleetv1.ToolDefinition) bool { return keep(d) && snap.IsLatest(d) && p.MayList(d) })
	hits = hits[:min(limit, len(hits))]
	defs := make([]*toolfleetv1.ToolDefinition, len(hits))
	for i, h := range hits {
		defs[i] = h.Def
	}
	rendered, err := render(req.GetFormat(), defs)
	if err != nil {
		return nil, err
	}
	resp := &toolfleetv1.SearchToolsResponse{}
	for i, h := range hits {
		st := &toolfleetv1.ScoredTool{Tool: h.Def, Score: h.Score}
		if rendered != nil {
			st.Rendered = rendered[i]
		}
		resp.Results = append(resp.Results, st)
	}
	return resp, nil
}

// filterOf matches a toolkit name exactly and a glob against "Toolkit.Tool" or the
// model-facing name.
func filterOf(toolkit, glob string) (func(*toolfleetv1.ToolDefinition) bool, error) {
	if _, err := path.Match(glob, ""); err != nil {
		return nil, serverError(codes.InvalidArgument, nil, err.Error(), "filter %q is not a valid glob", glob)
	}
	return func(d *toolfleetv1.ToolDefinition) bool {
		if toolkit != "" && !strings.EqualFold(d.GetToolkit(), toolkit) {
			return false
		}
		if glob == "" {
			return true
		}
		m1, _ := path.Match(glob, d.GetToolkit()+"."+d.GetName())
		m2, _ := path.Match(glob, d.GetModelName())
		return m1 || m2
	}, nil
}

// render turns definitions into provider entries, parallel to defs (nil for
// canonical). The JSON is what a user pastes into that provider's request.
func render(f toolfleetv1.ToolFormat, defs []*toolfleetv1.ToolDefinition) ([]*structpb.Struct, error) {
	var entries []json.RawMessage
	var err error
	switch f {
	case toolfleetv1.ToolFormat_TOOL_FORMAT_UNSPECIFIED, toolfleetv1.ToolFormat_TOOL_FORMAT_CANONICAL:
		return nil, nil
	case toolfleetv1.ToolFormat_TOOL_FORMAT_OPENAI, toolfleetv1.ToolFormat_TOOL_FORMAT_OPENAI_STRICT:
		entries, err = array(wire.OpenAIChat{}.RenderTools(defs, f == toolfleetv1.ToolFormat_TOOL_FORMAT_OPENAI_STRICT))
	case toolfleetv1.ToolFormat_TOOL_FORMAT_ANTHROPIC:
		entries, err = array(wire.Anthropic{}.RenderTools(defs, false))
	case toolfleetv1.ToolFormat_TOOL_FORMAT_GEMINI:
		// One tools entry holds every declaration; return the declarations.
		var b []byte
		if b, err = (wire.Gemini{}).RenderTools(defs, false); err == nil {
			var tools []struct {
				Decls []json.RawMessage `json:"functionDeclarations"`
			}
			if err = json.Unmarshal(b, &tools); err == nil && len(tools) == 1 {
				entries = tools[0].Decls
			}
		}
	case toolfleetv1.ToolFormat_TOOL_FORMAT_MCP:
		for _, d := range defs {
			b, merr := json.Marshal(wire.MCPTool(d))
			if merr != nil {
				err = merr
				break
			}
			entries = append(entries, b)
		}
	default:
		return nil, serverError(codes.InvalidArgument, nil, "", "unknown format %v", f)
	}
	if err != nil {
		return nil, serverError(codes.Internal, err, err.Error(), "the gateway could not render the tools as %v", f)
	}
	if len(entries) != len(defs) {
		return nil, serverError(codes.Internal, nil, fmt.Sprintf("%d entries for %d tools", len(entries), len(defs)), "the gateway could not render the tools as %v", f)
	}
	out := make([]*structpb.Struct, len(entries))
	for i, e := range entries {
		out[i] = &structpb.Struct{}
		if err := out[i].UnmarshalJSON(e); err != nil {
			return nil, serverError(codes.Internal, err, err.Error(), "the gateway could not render the tools as %v", f)
		}
	}
	return out, nil
}

func array(b []byte, err error) ([]json.RawMessage, error) {
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	return out, json.Unmarshal(b, &out)
}
