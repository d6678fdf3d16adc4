// Package jsonq implements the JSONQuery toolkit (tools.jsonq.v1.JSONQueryService):
// jq queries over JSON documents, run with github.com/itchyny/gojq.
//
// Queries come from models, so everything is bounded: the document size, the number
// and total size of the results, the running time (gojq checks the context at
// every step, which stops endless recursion and huge ranges), the memory the query
// builds, and the length of paths it may follow or build (guards.go: gojq recurses
// once per path element in Go, so a path of millions of elements would overflow
// the goroutine stack and kill the process), and what the queries running at
// once may hold together (admission.go). A query sees only its document and
// variables: environment variables, input files and modules are off.
package jsonq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"regexp"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/itchyny/gojq"
	"google.golang.org/protobuf/types/known/structpb"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/internal/procmem"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// Defaults of Config.
const (
	DefaultMaxInputBytes  = 4 << 20
	DefaultMaxOutputBytes = 1 << 20
	DefaultMaxResults     = 100
	DefaultTimeout        = 3 * time.Second
	DefaultMaxQueryBytes  = 256 << 20
	DefaultMaxValueBytes  = 16 << 20
	// MaxErrorBytes bounds the message of an error a query raises
	// (error("x" * 5e7)), as returned and as logged; a longer one is cut.
	MaxErrorBytes = 4 << 10
)

// Config bounds the work one query may do. Zero fields take the defaults.
type Config struct {
	// MaxInputBytes caps the document (as JSON text, or its JSON encoding). Default 4 MiB.
	MaxInputBytes int
	// MaxOutputBytes caps the JSON encoding of all results together. Default 1 MiB.
	MaxOutputBytes int
	// MaxResults is the number of results when the request asks for none. Default 100.
	MaxResults int
	// Timeout bounds one query's running time. Default 3s.
	Timeout time.Duration
	// MaxQueryBytes bounds how much the Go heap grows while a query runs:
	// gojq has no allocation limit, and "[range(1e9)]" fills gigabytes before
	// the deadline. The heap is checked every few interpreter steps and the
	// query stopped once it grew a third of this; single steps that would build
	// a string or array over a third of it are refused before they run
	// (budget.go). The growth is measured from the query's start, so what the
	// process held before does not count (queries running at the same time
	// share the measure). Default 256 MiB.
	MaxQueryBytes uint64
	// MaxValueBytes bounds the string (or the JSON of the value) one step of
	// a query may build: string repetition and concatenation, add, join,
	// tostring, tojson, the @formats, and the element count of split,
	// explode, flatten, transpose, indices (an eighth of it) are checked
	// before they run (limits.go), since a step in Go cannot be stopped at
	// the deadline. At most a quarter of MaxQueryBytes. Default 16 MiB.
	MaxValueBytes int
	// QueryMemory is the process's query memory (admission.go): the most the
	// reservations of the queries running at once add up to. A query reserves
	// MaxQueryBytes plus 64 bytes per byte of its request (its decoded
	// document) before it decodes its document; it waits for room until
	// shortly before the caller's deadline, then is refused as busy
	// (retryable); one whose reservation is over the whole ceiling is refused
	// at once. 0: three quarters of GOMEMLIMIT when it is set, else
	// DefaultQueryMemory (2 GiB); negative: no ceiling. A process should run
	// one Service: each has its own ceiling.
	QueryMemory int64
}

func (c Config) withDefaults() Config {
	if c.MaxInputBytes <= 0 {
		c.MaxInputBytes = DefaultMaxInputBytes
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.MaxResults <= 0 {
		c.MaxResults = DefaultMaxResults
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxQueryBytes == 0 {
		c.MaxQueryBytes = DefaultMaxQueryBytes
	}
	if c.MaxValueBytes <= 0 {
		c.MaxValueBytes = DefaultMaxValueBytes
	}
	c.MaxValueBytes = int(min(uint64(c.MaxValueBytes), c.MaxQueryBytes/4, math.MaxInt32))
	if c.QueryMemory == 0 {
		c.QueryMemory = procmem.Ceiling(DefaultQueryMemory)
	}
	return c
}

// Service implements jsonqv1.JSONQueryServiceServer.
type Service struct {
	jsonqv1.UnimplementedJSONQueryServiceServer

	cfg       Config
	limits    valueLimits
	guards    *gojq.Query
	admission *admission // nil: no ceiling
}

var _ jsonqv1.JSONQueryServiceServer = (*Service)(nil)

// New returns the JSONQuery service bounded by cfg.
func New(cfg Config) *Service {
	cfg = cfg.withDefaults()
	lim := limitsFor(cfg.MaxValueBytes)
	return &Service{cfg: cfg, limits: lim, guards: guardsFor(lim), admission: newAdmission(cfg.QueryMemory)}
}

// Causes of stopping a query, told apart from the caller's own deadline.
var (
	errQueryTimeout = errors.New("jq query timed out")
	errHeapLimit    = errors.New("jq query stopped: memory limit reached")
)

// queryHint is shown with every query error: the usual mistakes of models writing jq.
const queryHint = "The query is jq syntax (gojq dialect). Fields: .name or .[\"odd key\"]; arrays: .[0], .[] to iterate; " +
	"filter with select(cond); build with {a: .x} or [ ... ]; strings use double quotes; variables are $name and must be passed in `variables`. " +
	"There is no input, inputs, env or file access."

// Query compiles req.Query and runs it over every JSON value of the document.
func (s *Service) Query(ctx context.Context, req *jsonqv1.QueryRequest) (*jsonqv1.QueryResponse, error) {
	// Variables are passed in name order so that compile and run agree.
	names := make([]string, 0, len(req.GetVariables()))
	for name := range req.GetVariables() {
		names = append(names, name)
	}
	slices.Sort(names)
	varNames := make([]string, len(names))
	varValues := make([]any, len(names))
	for i, name := range names {
		varNames[i] = "$" + name
		varValues[i] = req.GetVariables()[name].AsInterface()
	}

	code, err := compile(req.GetQuery(), varNames, s.guards, s.limits)
	if err != nil {
		return nil, err
	}
	if in, ok := req.GetInput().(*jsonqv1.QueryRequest_DocumentJson); ok && len(in.DocumentJson) > s.cfg.MaxInputBytes {
		return nil, s.tooBig(len(in.DocumentJson)) // refused before it waits for room
	}
	return s.admitted(ctx, s.reservation(req), func() (*jsonqv1.QueryResponse, error) {
		inputs, err := s.documents(req)
		if err != nil {
			return nil, err
		}
		limit := s.cfg.MaxResults
		if n := int(req.GetMaxResults()); n > 0 {
			limit = n
		}
		// The time limit counts from the admission: waiting for room is not
		// the query's running time.
		ctx, cancelTimeout := context.WithTimeoutCause(ctx, s.cfg.Timeout, errQueryTimeout)
		defer cancelTimeout()
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		baseline, _ := heapBytes()
		metered := &meteredContext{Context: ctx, cancel: cancel, check: heapCheck(baseline, s.cfg.MaxQueryBytes/3)}
		return s.run(metered, code, inputs, varValues, limit)
	})
}

// admitted runs query holding reserve bytes of the query memory, released
// however query ends (a panic included); the admission's refusals become
// execution errors the model can act on.
func (s *Service) admitted(ctx context.Context, reserve int64, query func() (*jsonqv1.QueryResponse, error)) (*jsonqv1.QueryResponse, error) {
	release, err := s.admission.acquire(ctx, reserve)
	switch {
	case errors.Is(err, errBusy):
		return nil, tool.NewError("the jq worker is busy; try again in a moment",
			tool.WithRetry(time.Second), tool.WithDeveloperMessage(err.Error()))
	case errors.Is(err, errTooBig):
		return nil, tool.NewError("the document is too big for this jq worker: a query over it may need more memory than the worker has for all its queries",
			tool.WithPromptHint("Pass only the part of the document the query needs."), tool.WithDeveloperMessage(err.Error()))
	case err != nil:
		return nil, err // the caller's deadline or cancellation, while waiting for room
	}
	defer release()
	return query()
}

// run collects the results of code over every input, within the result count and
// output size caps.
func (s *Service) run(ctx context.Context, code *gojq.Code, inputs, varValues []any, limit int) (*jsonqv1.QueryResponse, error) {
	resp := &jsonqv1.QueryResponse{}
	outBytes := 0
	for _, input := range inputs {
		iter := code.RunWithContext(ctx, input, varValues...)
		for {
			v, ok := iter.Next()
			if !ok {
				break
			}
			if err, isErr := v.(error); isErr {
				var halt *gojq.HaltError
				if errors.As(err, &halt) && halt.Value() == nil {
					return resp, nil // halt: stop without error, as jq does
				}
				return nil, s.runError(ctx, err, len(resp.Results))
			}
			if len(resp.Results) == limit {
				resp.Truncated = true // one result more than the limit exists
				return resp, nil
			}
			if !shallow(v, maxDepth) {
				return nil, tool.NewError(fmt.Sprintf("result %d cannot be returned: it is nested more than %d levels deep", len(resp.Results)+1, maxDepth),
					tool.WithPromptHint("Return simpler values: flatten deep nesting."))
			}
			size, err := encodedSize(v)
			if err != nil {
				return nil, tool.NewError(fmt.Sprintf("result %d cannot be encoded as JSON: %v", len(resp.Results)+1, err))
			}
			if outBytes+size > s.cfg.MaxOutputBytes {
				if len(resp.Results) == 0 {
					return nil, tool.NewError(
						fmt.Sprintf("the first result is %d bytes of JSON, more than the limit of %d", size, s.cfg.MaxOutputBytes),
						tool.WithPromptHint("Select fewer fields, slice arrays (.[0:20]), or return counts (length) instead of whole values."),
					)
				}
				resp.Truncated = true
				return resp, nil
			}
			outBytes += size
			pv, err := toValue(v, 0)
			if err != nil {
				return nil, tool.NewError(fmt.Sprintf("result %d cannot be returned: %v", len(resp.Results)+1, err),
					tool.WithPromptHint("Return simpler values: flatten deep nesting, or turn it into a string with tojson."))
			}
			resp.Results = append(resp.Results, pv)
		}
	}
	return resp, nil
}

// compile parses and compiles query; errors become execution errors that point at
// the problem.
func compile(query string, varNames []string, guards *gojq.Query, lim valueLimits) (*gojq.Code, error) {
	if strings.Contains(query, guardPrefix) {
		return nil, tool.NewError("invalid jq query: names starting with "+guardPrefix+" are reserved", tool.WithPromptHint(queryHint))
	}
	q, err := gojq.Parse(query)
	if err != nil {
		msg := "invalid jq query: " + err.Error()
		var pe *gojq.ParseError
		if errors.As(err, &pe) {
			msg += " " + pointAt(query, pe.Offset)
		}
		return nil, tool.NewError(msg, tool.WithPromptHint(queryHint))
	}
	guardOperators(q)
	q.FuncDefs = append(slices.Clone(guards.FuncDefs), q.FuncDefs...)
	code, err := gojq.Compile(q,
		gojq.WithFunction(guardPrefix+"check", 1, 2, lim.checkFunction(map[[2]string]*regexp.Regexp{})),
		gojq.WithVariables(varNames),
		// $ENV and env must not leak the worker's environment to a model.
		gojq.WithEnvironLoader(func() []string { return nil }),
	)
	if err != nil {
		return nil, tool.NewError("invalid jq query: "+err.Error(), tool.WithPromptHint(queryHint))
	}
	return code, nil
}

// pointAt describes where in query a parse error happened: gojq's offset is just
// after the offending token.
func pointAt(query string, offset int) string {
	offset = min(max(offset, 0), len(query))
	start := max(offset-30, 0)
	return fmt.Sprintf("at byte %d, near %q", offset, query[start:offset])
}

// runError turns an error the query raised into an execution error, telling the
// query's own deadline apart from the caller giving up.
func (s *Service) runError(ctx context.Context, err error, emitted int) error {
	if ctx.Err() != nil {
		const hint = "Avoid unbounded recursion, repeat/range over huge counts and building huge arrays; use limit(n; expr) or first(expr)."
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errQueryTimeout):
			return tool.NewError(fmt.Sprintf("the query ran longer than %s and was stopped after %d results", s.cfg.Timeout, emitted), tool.WithPromptHint(hint))
		case errors.Is(cause, errHeapLimit):
			return tool.NewError(fmt.Sprintf("the query used too much memory and was stopped after %d results", emitted),
				tool.WithPromptHint(hint), tool.WithDeveloperMessage(cause.Error()))
		}
		return ctx.Err() // the caller's deadline or cancellation: not the query's fault
	}
	return tool.NewError(fmt.Sprintf("jq error after %d results: %s", emitted, errorText(err)), tool.WithPromptHint(queryHint))
}

// errorText is the text of an error the query raised, at most MaxErrorBytes:
// error(value) shows the value as jq does, and error("x" * 5e7) must not
// become a 50 MB answer and log line.
func errorText(err error) string {
	var ve gojq.ValueError
	if !errors.As(err, &ve) {
		return truncateText(err.Error(), MaxErrorBytes)
	}
	// error(value): the query raised it on purpose; show the value as jq does.
	switch v := ve.Value().(type) {
	case string:
		return truncateText(v, MaxErrorBytes)
	case nil:
		return truncateText(err.Error(), MaxErrorBytes)
	default:
		if size, over := formatSize("tojson", v, MaxErrorBytes); over {
			return gojq.Preview(v) + fmt.Sprintf(" (a %s of %d bytes or more; error messages are cut at %d bytes)", gojq.TypeOf(v), size, MaxErrorBytes)
		}
		b, mErr := gojq.Marshal(v)
		if mErr != nil {
			return truncateText(err.Error(), MaxErrorBytes)
		}
		return truncateText(string(b), MaxErrorBytes)
	}
}

// truncateText cuts s to at most limit bytes on a rune boundary, saying how
// much was left out.
func truncateText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d more bytes cut; error messages are limited to %d bytes)", len(s)-cut, limit)
}

// documents returns the input values: each JSON value of documentJson in turn, or
// the structured document.
func (s *Service) documents(req *jsonqv1.QueryRequest) ([]any, error) {
	switch in := req.GetInput().(type) {
	case *jsonqv1.QueryRequest_Document:
		v := in.Document.AsInterface()
		if size, err := encodedSize(v); err == nil && size > s.cfg.MaxInputBytes {
			return nil, s.tooBig(size)
		}
		return []any{v}, nil
	case *jsonqv1.QueryRequest_DocumentJson:
		if len(in.DocumentJson) > s.cfg.MaxInputBytes {
			return nil, s.tooBig(len(in.DocumentJson))
		}
		return decodeAll(in.DocumentJson)
	default:
		return nil, tool.NewError("no document: set documentJson (JSON text) or document (a JSON value)")
	}
}

func (s *Service) tooBig(size int) error {
	return tool.NewError(fmt.Sprintf("the document is %d bytes, more than the limit of %d", size, s.cfg.MaxInputBytes),
		tool.WithPromptHint("Pass only the part of the document the query needs."))
}

// decodeAll decodes a stream of JSON values, keeping numbers exact (json.Number) so
// that big integers and ids survive the round trip.
func decodeAll(text string) ([]any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var out []any
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, tool.NewError(fmt.Sprintf("documentJson is not valid JSON (after %d values, near byte %d): %v", len(out), dec.InputOffset(), err),
				tool.WithPromptHint("documentJson must be JSON text, e.g. {\"a\": 1}; pass an already-structured value in `document` instead."))
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, tool.NewError("documentJson is empty; pass at least one JSON value (e.g. null or {})")
	}
	return out, nil
}

// encodedSize is the length of v's JSON encoding (jq's, so NaN and big numbers work).
func encodedSize(v any) (int, error) {
	b, err := gojq.Marshal(v)
	return len(b), err
}

// maxDepth bounds the nesting of a result: each JSON level is two protobuf message
// levels, and protobuf decoders refuse messages nested deeper than 10000.
const maxDepth = 1000

// toValue converts a gojq result to a protobuf Value. JSON has no NaN or infinity,
// so they become null and the largest finite doubles, as jq prints them.
func toValue(v any, depth int) (*structpb.Value, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("it is nested more than %d levels deep", maxDepth)
	}
	switch v := v.(type) {
	case nil:
		return structpb.NewNullValue(), nil
	case bool:
		return structpb.NewBoolValue(v), nil
	case string:
		// Proto strings must be UTF-8; jq strings built from bytes may not be.
		return structpb.NewStringValue(strings.ToValidUTF8(v, "\uFFFD")), nil
	case int:
		return structpb.NewNumberValue(float64(v)), nil
	case float64:
		if math.IsNaN(v) {
			return structpb.NewNullValue(), nil
		}
		return structpb.NewNumberValue(finite(v)), nil
	case *big.Int:
		f, _ := new(big.Float).SetInt(v).Float64()
		return structpb.NewNumberValue(finite(f)), nil
	case json.Number:
		f, err := v.Float64()
		if err != nil && !errors.Is(err, strconv.ErrRange) { // out of range: ±Inf, clamped below
			return nil, fmt.Errorf("number %s: %w", v, err)
		}
		return structpb.NewNumberValue(finite(f)), nil
	case []any:
		list := &structpb.ListValue{Values: make([]*structpb.Value, len(v))}
		for i, e := range v {
			pv, err := toValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			list.Values[i] = pv
		}
		return structpb.NewListValue(list), nil
	case map[string]any:
		obj := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(v))}
		for k, e := range v {
			pv, err := toValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			obj.Fields[strings.ToValidUTF8(k, "\uFFFD")] = pv
		}
		return structpb.NewStructValue(obj), nil
	default:
		return nil, fmt.Errorf("unsupported value of type %T", v)
	}
}

// finite clamps infinities to the largest finite doubles.
func finite(f float64) float64 {
	switch {
	case math.IsInf(f, 1):
		return math.MaxFloat64
	case math.IsInf(f, -1):
		return -math.MaxFloat64
	}
	return f
}

// heapBytes reads the live heap without stopping the world (runtime/metrics,
// unlike runtime.ReadMemStats); false when the runtime lacks the metric.
func heapBytes() (uint64, bool) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return sample[0].Value.Uint64(), true
}
