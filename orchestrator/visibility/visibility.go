// Package visibility names the Temporal search attributes and memo that let an
// operator find toolfleet's runs and programs in Temporal (the UI, `temporal
// workflow list --query …`): who started it, with which model, what it is
// doing now, and which tools it has used.
//
// Custom search attributes must be registered in the namespace before any
// workflow sets them, or the start (and any upsert) fails. [Ensure] registers
// the missing ones at the orchestrator's start; [Available] tells a starter
// whether they are there, so a namespace where the orchestrator may not
// register them (no operator rights) still runs everything, only without them.
package visibility

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// The search attributes, all Keyword (exact match) except Tools.
var (
	// Principal is the subject the run or program acts for.
	Principal = temporal.NewSearchAttributeKeyKeyword("ToolfleetPrincipal")
	// Kind is "run" or "program".
	Kind = temporal.NewSearchAttributeKeyKeyword("ToolfleetKind")
	// Model is a run's model, "provider:name".
	Model = temporal.NewSearchAttributeKeyKeyword("ToolfleetModel")
	// Status is what the run or program is doing now: one of the Status* values.
	Status = temporal.NewSearchAttributeKeyKeyword("ToolfleetStatus")
	// Tools lists the tools called so far, as "Toolkit.Tool".
	Tools = temporal.NewSearchAttributeKeyKeywordList("ToolfleetTools")
)

// Values of [Status]. Temporal's own execution status says whether the
// workflow is open; this says what an open one is doing.
const (
	StatusRunning = "running"
	StatusWaiting = "waiting_approval"
	// StatusWaitingInput: a tool's question waits for a person's answer.
	StatusWaitingInput = "waiting_input"
	StatusAnswered     = "answered" // a run gave its answer and only waits for a follow-up message
	StatusDone         = "completed"
	StatusFailed       = "failed"
	StatusCanceled     = "canceled"
)

// Kinds of [Kind].
const (
	KindRun     = "run"
	KindProgram = "program"
)

// MaxTools bounds [Tools]: a search attribute has a size limit (2 KiB per
// value by default), and an operator looking for runs that used a tool
// rarely needs more.
const MaxTools = 32

// all are the attributes to register, with their types.
var all = map[string]enumspb.IndexedValueType{
	Principal.GetName(): enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	Kind.GetName():      enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	Model.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	Status.GetName():    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	Tools.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST,
}

// missing lists the attributes namespace lacks (sorted), or an error when
// one exists with another type.
func missing(ctx context.Context, c client.Client, namespace string) ([]string, error) {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("visibility: list the search attributes of %q: %w", namespace, err)
	}
	var out []string
	for name, typ := range all {
		got, ok := resp.GetCustomAttributes()[name]
		switch {
		case !ok:
			out = append(out, name)
		case got != typ:
			return nil, fmt.Errorf("visibility: search attribute %s of namespace %q is %s, want %s: remove it or use another namespace", name, namespace, got, typ)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Ensure registers the attributes namespace lacks, and returns once starts
// may name them (within 30 s). It is idempotent, and safe when several
// orchestrators start at once.
func Ensure(ctx context.Context, c client.Client, namespace string) error {
	names, err := missing(ctx, c, namespace)
	if err != nil || len(names) == 0 {
		return err
	}
	add := map[string]enumspb.IndexedValueType{}
	for _, n := range names {
		add[n] = all[n]
	}
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: add}); err != nil {
		// Another orchestrator may have added them in between.
		if names, lerr := missing(ctx, c, namespace); lerr == nil && len(names) == 0 {
			return nil
		}
		return fmt.Errorf("visibility: register search attributes %v in %q: %w", names, namespace, err)
	}
	// Starts may name them once the frontend has refreshed the namespace
	// (every few seconds): wait for that, so that runs started right after
	// this orchestrator is up already carry them.
	wctx, cancel := context.WithTimeout(ctx, usableWait)
	defer cancel()
	for {
		err := usable(wctx, c, namespace)
		if err == nil {
			return nil
		}
		select {
		case <-wctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// usableWait bounds how long Ensure waits for a registration to be usable.
const usableWait = 30 * time.Second

// Checker answers whether the attributes are registered, asking Temporal at
// most once per interval (a start must not pay a round trip each time).
type Checker struct {
	Client    client.Client
	Namespace string
	// Interval after a "no" before asking again; default 10 s. A "yes" is
	// kept: registered attributes stay registered.
	Interval time.Duration

	mu     sync.Mutex
	asked  time.Time
	answer bool
}

// Available reports whether every attribute is registered. Until the first
// answer, and when Temporal cannot be asked, it reports false: a start
// without search attributes always works.
func (k *Checker) Available(ctx context.Context) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	interval := k.Interval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	if k.answer || (!k.asked.IsZero() && time.Since(k.asked) < interval) {
		return k.answer
	}
	k.asked = time.Now()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	k.answer = usable(cctx, k.Client, k.Namespace) == nil
	return k.answer
}

// probe is a visibility query naming every attribute.
const probe = "ToolfleetPrincipal = '' AND ToolfleetKind = '' AND ToolfleetModel = '' AND ToolfleetStatus = '' AND ToolfleetTools = ''"

// usable checks that the attributes are registered and that the frontend
// already maps them: it learns a new registration on its next namespace
// refresh (every few seconds), and a start that names one before that fails.
func usable(ctx context.Context, c client.Client, namespace string) error {
	names, err := missing(ctx, c, namespace)
	if err != nil {
		return err
	}
	if len(names) > 0 {
		return fmt.Errorf("visibility: search attributes %v are not registered in %q", names, namespace)
	}
	if _, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: probe}); err != nil {
		return fmt.Errorf("visibility: the search attributes of %q are not usable yet: %w", namespace, err)
	}
	return nil
}

// AddTool returns tools with tool added in order, without duplicates, and at
// most MaxTools long (later tools are not recorded once it is full).
func AddTool(tools []string, tool string) ([]string, bool) {
	if slices.Contains(tools, tool) || len(tools) >= MaxTools {
		return tools, false
	}
	return append(slices.Clone(tools), tool), true
}

// StartAttributes are the attributes a start sets: who, what kind, which
// model ("" for a program), and the status "running".
func StartAttributes(principal, kind, model string) temporal.SearchAttributes {
	u := []temporal.SearchAttributeUpdate{Principal.ValueSet(principal), Kind.ValueSet(kind), Status.ValueSet(StatusRunning)}
	if model != "" {
		u = append(u, Model.ValueSet(model))
	}
	return temporal.NewSearchAttributes(u...)
}
