package jsonq_test

import (
	"context"
	"fmt"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	"github.com/toolfleet/toolfleet/workers/jsonq/jsonq"
)

func ExampleService_Query() {
	svc := jsonq.New(jsonq.Config{})
	resp, err := svc.Query(context.Background(), &jsonqv1.QueryRequest{
		Query: `.orders[] | select(.total > 100) | {id, total}`,
		Input: &jsonqv1.QueryRequest_DocumentJson{
			DocumentJson: `{"orders": [{"id": "a1", "total": 40}, {"id": "b2", "total": 250.5}, {"id": "c3", "total": 120}]}`,
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range resp.GetResults() {
		order := r.GetStructValue().AsMap()
		fmt.Println(order["id"], order["total"])
	}
	// Output:
	// b2 250.5
	// c3 120
}
