package jsonq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/workers/jsonq/jsonq"
)

// serve runs the JSONQuery toolkit in a real worker on loopback until the test ends.
func serve(t *testing.T, cfg jsonq.Config) jsonqv1.JSONQueryServiceClient {
	t.Helper()
	conn := tooltest.Serve(t, tool.Config{Name: "jsonq"}, func(w *tool.Worker) {
		jsonqv1.RegisterJSONQueryServiceServer(w, jsonq.New(cfg))
	})
	return jsonqv1.NewJSONQueryServiceClient(conn)
}

func TestWorkerEndToEnd(t *testing.T) {
	t.Parallel()
	client := serve(t, jsonq.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	resp, err := client.Query(ctx, &jsonqv1.QueryRequest{
		Query:     "[.users[] | select(.age >= $min) | .name]",
		Input:     &jsonqv1.QueryRequest_DocumentJson{DocumentJson: `{"users": [{"name": "ana", "age": 31}, {"name": "bo", "age": 12}]}`},
		Variables: map[string]*structpb.Value{"min": structpb.NewNumberValue(18)},
	})
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if len(resp.GetResults()) != 1 || len(resp.GetResults()[0].GetListValue().GetValues()) != 1 ||
		resp.GetResults()[0].GetListValue().GetValues()[0].GetStringValue() != "ana" {
		t.Errorf("results = %v, want [[\"ana\"]]", resp.GetResults())
	}

	// A runaway query comes back as an execution error, and the worker serves on.
	_, err = client.Query(ctx, &jsonqv1.QueryRequest{Query: "def f: f; f", Input: &jsonqv1.QueryRequest_DocumentJson{DocumentJson: "null"}})
	if te, ok := tool.AsToolError(err); !ok || !strings.Contains(te.GetMessage(), "ran longer than "+jsonq.DefaultTimeout.String()) {
		t.Errorf("runaway query err = %v, want an execution error about the time limit", err)
	}
	if _, err := client.Query(ctx, &jsonqv1.QueryRequest{Query: ".", Input: &jsonqv1.QueryRequest_DocumentJson{DocumentJson: "1"}}); err != nil {
		t.Errorf("query after the runaway one: %v", err)
	}

	// The deepest result the tool returns still decodes on the client.
	if _, err := client.Query(ctx, &jsonqv1.QueryRequest{Query: "reduce range(999) as $i (0; [.])", Input: &jsonqv1.QueryRequest_DocumentJson{DocumentJson: "null"}}); err != nil {
		t.Errorf("deeply nested result: %v", err)
	}

	// Contract violations are rejected before the tool runs.
	_, err = client.Query(ctx, &jsonqv1.QueryRequest{Query: "."})
	if _, ok := tool.AsValidationError(err); !ok {
		t.Errorf("query without a document err = %v, want a validation error", err)
	}
	_, err = client.Query(ctx, &jsonqv1.QueryRequest{
		Query:     "$x",
		Input:     &jsonqv1.QueryRequest_DocumentJson{DocumentJson: "1"},
		Variables: map[string]*structpb.Value{"not a name": structpb.NewNullValue()},
	})
	if _, ok := tool.AsValidationError(err); !ok {
		t.Errorf("bad variable name err = %v, want a validation error", err)
	}
}
