package tool_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/toolfleet/toolfleet/sdk/tool"
)

// A tool returns an execution error as a value; the caller reads it back from the
// gRPC status.
func ExampleNewError() {
	err := tool.NewError("the city is unknown",
		tool.WithDeveloperMessage(`geocoder returned 0 results for "Pariss"`),
		tool.WithRetry(2*time.Second),
		tool.WithPromptHint("Check the spelling of the city."))

	te, ok := tool.AsToolError(err)
	fmt.Println(ok, te.GetMessage(), te.GetCanRetry(), te.GetRetryAfterMs())
	fmt.Println(te.GetAdditionalPromptContent())

	_, ok = tool.AsToolError(errors.New("plain"))
	fmt.Println(ok)
	// Output:
	// true the city is unknown true 2000
	// Check the spelling of the city.
	// false
}

func ExampleDecodeInput() {
	md := constraintsMD // tools.schematest.v1.ConstraintsRequest
	_, ve, err := tool.DecodeInput(md, []byte(`{"name": "x", "op": "mul", "inner": {}, "code": "ABC",
		"email": "a@b.co", "link": "https://x.y", "id": "123e4567-e89b-12d3-a456-426614174000",
		"count": 1, "ratio": 0.5, "fixed": "v1", "tags": ["a"]}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(ve.GetParameterErrors()["name"])
	fmt.Println(ve.GetParameterErrors()["op"])
	fmt.Println(ve.GetMessage())
	// Output:
	// must be at least 2 characters
	// must be one of: add, sub
	// invalid input: name: must be at least 2 characters; op: must be one of: add, sub
}
