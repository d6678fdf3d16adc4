package contract_test

import (
	"testing"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	webv1 "github.com/toolfleet/toolfleet/gen/tools/web/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// TestBundledToolkits checks every bundled contract as the fleet will see it: the
// definitions build, no two tools collide, descriptions are written, and every
// example in a contract is valid input for its tool.
func TestBundledToolkits(t *testing.T) {
	t.Parallel()
	c, err := contract.LinkedContracts(
		calculatorv1.CalculatorService_ServiceDesc.ServiceName,
		clockv1.ClockService_ServiceDesc.ServiceName,
		jsonqv1.JSONQueryService_ServiceDesc.ServiceName,
		kvv1.KVService_ServiceDesc.ServiceName,
		webv1.WebService_ServiceDesc.ServiceName,
	)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := c.Definitions() // includes the collision check across all toolkits
	if err != nil {
		t.Fatalf("Definitions: %v", err)
	}
	for _, d := range defs {
		t.Run(d.GetId(), func(t *testing.T) {
			t.Parallel()
			want := "1.0.0"
			if d.GetToolkit() == "KV" {
				want = "1.1.0" // KV.Increment added
			}
			if d.GetVersion() != want {
				t.Errorf("version %s, want %s", d.GetVersion(), want)
			}
			md, ok := c.Method(d.GetGrpcMethod())
			if !ok {
				t.Fatalf("no method %s", d.GetGrpcMethod())
			}
			if opts := contract.ToolOptionsOf(md); opts.GetDescription() == "" {
				t.Errorf("%s has no description in its contract", d.GetId())
			}
			for _, ex := range d.GetExamples() {
				if _, ve, err := tool.DecodeInput(md.Input(), []byte(ex.GetInputJson())); err != nil || ve != nil {
					t.Errorf("example %q is not valid input: %v %v", ex.GetDescription(), err, ve.GetParameterErrors())
				}
			}
		})
	}
}
