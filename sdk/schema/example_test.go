package schema_test

import (
	"fmt"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	"github.com/toolfleet/toolfleet/sdk/schema"
)

func ExampleFor() {
	s, err := schema.For((&calculatorv1.EvaluateRequest{}).ProtoReflect().Descriptor())
	if err != nil {
		panic(err)
	}
	b, err := schema.MarshalIndent(s)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(b))
	// Output:
	// {
	//   "$schema": "https://json-schema.org/draft/2020-12/schema",
	//   "additionalProperties": false,
	//   "properties": {
	//     "expression": {
	//       "description": "Arithmetic expression to evaluate.",
	//       "examples": [
	//         "(2 + 3) * 4"
	//       ],
	//       "maxLength": 1000,
	//       "minLength": 1,
	//       "type": "string"
	//     }
	//   },
	//   "required": [
	//     "expression"
	//   ],
	//   "type": "object"
	// }
}
