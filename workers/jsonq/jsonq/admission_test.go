package jsonq

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// holds fails the test unless a holds want bytes for n queries.
func holds(t *testing.T, a *admission, want int64, n int) {
	t.Helper()
	if used, running := a.inUse(); used != want || running != n {
		t.Fatalf("the admission holds %d bytes for %d queries, want %d for %d", used, running, want, n)
	}
}

func TestAdmission(t *testing.T) {
	t.Parallel()

	t.Run("waits for room within the deadline", func(t *testing.T) {
		t.Parallel()
		a := newAdmission(100)
		first, err := a.acquire(t.Context(), 60)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		got := make(chan error, 1)
		var second func()
		go func() {
			var err error
			second, err = a.acquire(ctx, 60)
			got <- err
		}()
		time.Sleep(50 * time.Millisecond) // let it wait (a check that cannot fail wrongly)
		select {
		case err := <-got:
			t.Fatalf("admitted while full: %v", err)
		default:
		}
		holds(t, a, 60, 1)
		first()
		first() // twice is once
		if err := <-got; err != nil {
			t.Fatalf("after the release: %v, want admitted", err)
		}
		holds(t, a, 60, 1)
		second()
		holds(t, a, 0, 0)
	})

	t.Run("a small reservation passes a waiting big one", func(t *testing.T) {
		t.Parallel()
		a := newAdmission(100)
		first, _ := a.acquire(t.Context(), 60)
		defer first()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		go func() { _, _ = a.acquire(ctx, 80) }() // waits until cancel
		small, err := a.acquire(ctx, 40)
		if err != nil {
			t.Fatalf("a reservation that fits: %v", err)
		}
		small()
	})

	t.Run("refused as busy before the deadline", func(t *testing.T) {
		t.Parallel()
		a := newAdmission(100)
		first, _ := a.acquire(t.Context(), 60)
		defer first()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := a.acquire(ctx, 60)
		if !errors.Is(err, errBusy) {
			t.Fatalf("err = %v, want errBusy", err)
		}
		if ctx.Err() != nil {
			t.Errorf("refused after the caller's deadline: the refusal reaches nobody")
		}
		if !strings.Contains(err.Error(), "1 queries hold") {
			t.Errorf("err = %q, want the queries holding the memory", err)
		}
		holds(t, a, 60, 1)
	})

	t.Run("refused at once when over the ceiling", func(t *testing.T) {
		t.Parallel()
		a := newAdmission(100)
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // it must not wait at all
		if _, err := a.acquire(ctx, 101); !errors.Is(err, errTooBig) {
			t.Fatalf("err = %v, want errTooBig", err)
		}
		holds(t, a, 0, 0)
	})

	t.Run("the caller's cancellation ends the wait", func(t *testing.T) {
		t.Parallel()
		a := newAdmission(100)
		first, _ := a.acquire(t.Context(), 100)
		ctx, cancel := context.WithCancel(t.Context())
		got := make(chan error, 1)
		go func() {
			_, err := a.acquire(ctx, 1)
			got <- err
		}()
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		first()
		holds(t, a, 0, 0)
	})

	t.Run("no ceiling", func(t *testing.T) {
		t.Parallel()
		a := newAdmission(-1)
		release, err := a.acquire(t.Context(), 1<<60)
		if err != nil {
			t.Fatal(err)
		}
		release()
	})
}

// TestAdmittedReleases: the service gives its reservation back however a
// query ends — an answer, an error, a panic, the caller's deadline — and
// turns the refusals into execution errors a model can act on.
func TestAdmittedReleases(t *testing.T) {
	t.Parallel()
	s := New(Config{QueryMemory: 1 << 30})

	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not come through")
			}
		}()
		_, _ = s.admitted(t.Context(), 1<<20, func() (*jsonqv1.QueryResponse, error) { panic("boom") })
	}()
	holds(t, s.admission, 0, 0)

	// A query stopped by the caller's deadline.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := s.Query(ctx, &jsonqv1.QueryRequest{Query: `last(range(1e12))`, Input: docJSON(`null`)}); err == nil {
		t.Fatal("an endless query answered")
	}
	holds(t, s.admission, 0, 0)
	// Errors and answers.
	if _, err := s.Query(t.Context(), &jsonqv1.QueryRequest{Query: `error("x")`, Input: docJSON(`null`)}); err == nil {
		t.Fatal("error(\"x\") answered")
	}
	if _, err := s.Query(t.Context(), &jsonqv1.QueryRequest{Query: `.`, Input: docJSON(`1`)}); err != nil {
		t.Fatal(err)
	}
	holds(t, s.admission, 0, 0)

	// Busy: the whole query memory is held.
	hold, err := s.admission.acquire(t.Context(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = s.Query(ctx, &jsonqv1.QueryRequest{Query: `.`, Input: docJSON(`1`)})
	te, ok := tool.AsToolError(err)
	if !ok || !strings.Contains(te.GetMessage(), "the jq worker is busy; try again") || !te.GetCanRetry() {
		t.Errorf("a query while full: %v, want a retryable execution error saying the worker is busy", err)
	}
	hold()
	holds(t, s.admission, 0, 0)
}

// TestQueryOverTheCeiling: a query whose reservation is over the whole
// query memory is refused at once, not after a wait.
func TestQueryOverTheCeiling(t *testing.T) {
	t.Parallel()
	s := New(Config{QueryMemory: 100 << 20}) // under MaxQueryBytes: nothing fits
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a wait would end in context.Canceled
	_, err := s.Query(ctx, &jsonqv1.QueryRequest{Query: `.`, Input: docJSON(`1`)})
	te, ok := tool.AsToolError(err)
	if !ok || !strings.Contains(te.GetMessage(), "too big for this jq worker") || te.GetCanRetry() {
		t.Fatalf("err = %v, want an execution error saying the query can never fit", err)
	}
	if !strings.Contains(te.GetDeveloperMessage(), "this worker's query memory is 100.0 MiB") {
		t.Errorf("developer message %q, want the sizes", te.GetDeveloperMessage())
	}
}

// TestDecodeFactor: the documents that take the most memory per byte once
// decoded stay within decodeFactor per byte of their request, as text and
// as a structured document. Not parallel: it measures the heap.
func TestDecodeFactor(t *testing.T) {
	s := New(Config{})
	for _, unit := range []string{`{"":0},`, `{"a":{}},`, `{},`, `[[]],`, `1,`} {
		n := (256 << 10) / len(unit)
		text := "[" + strings.Repeat(unit, n-1) + strings.TrimSuffix(unit, ",") + "]"
		doc, err := structpb.NewValue(mustDecode(t, text))
		if err != nil {
			t.Fatal(err)
		}
		for _, req := range []*jsonqv1.QueryRequest{
			{Query: ".", Input: docJSON(text)},
			{Query: ".", Input: &jsonqv1.QueryRequest_Document{Document: doc}},
		} {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			v, err := s.documents(req)
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(v)
			reserved := s.reservation(req) - int64(s.cfg.MaxQueryBytes)
			took := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%T of %q: decoded %.1f MiB, reserved %.1f MiB", req.GetInput(), unit, float64(took)/(1<<20), float64(reserved)/(1<<20))
			if took > reserved {
				t.Errorf("%T of %q: decoded into %d bytes, over the %d reserved", req.GetInput(), unit, took, reserved)
			}
		}
	}
}

func mustDecode(t *testing.T, text string) any {
	t.Helper()
	vs, err := decodeAll(text)
	if err != nil {
		t.Fatal(err)
	}
	return vs[0]
}
