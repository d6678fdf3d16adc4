package contract_test

import (
	"errors"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

func TestParseToolRef(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    contract.ToolRef
		wantErr error
	}{
		{in: "Calculator.Add@1.2.3", want: contract.ToolRef{Toolkit: "Calculator", Tool: "Add", Version: "1.2.3"}},
		{in: "Calculator.Add@1", want: contract.ToolRef{Toolkit: "Calculator", Tool: "Add", Version: "1.0.0"}},
		{in: "Calculator.Add", want: contract.ToolRef{Toolkit: "Calculator", Tool: "Add"}},
		{in: "Calculator_Add", want: contract.ToolRef{Toolkit: "Calculator", Tool: "Add"}},
		{in: "Calculator_Add_Two@2", want: contract.ToolRef{Toolkit: "Calculator", Tool: "Add_Two", Version: "2.0.0"}},
		{in: "Calculator.Add@1.2", wantErr: contract.ErrBadToolRef},
		{in: "Calculator.Add@1.0.0000000", wantErr: contract.ErrBadToolRef},
		{in: "Calculator.Add@1.-0.0", wantErr: contract.ErrBadToolRef},
		{in: "Calculator.Add@01", wantErr: contract.ErrBadToolRef},
		{in: "Calculator.Add@+1", wantErr: contract.ErrBadToolRef},
		{in: "Calculator.Add@-1", wantErr: contract.ErrBadToolRef},
		{in: "Calculator.Add@1.0.0@1", wantErr: contract.ErrBadToolRef},
		{in: "Calculator.Add@1234567890", wantErr: contract.ErrBadToolRef},
		{in: "Calculator.Add@999999999.999999999.999999999", want: contract.ToolRef{Toolkit: "Calculator", Tool: "Add", Version: "999999999.999999999.999999999"}},
		{in: "Calculator.Add@0", want: contract.ToolRef{Toolkit: "Calculator", Tool: "Add", Version: "0.0.0"}},
		{in: "Calculator.Add@" + strings.Repeat("0", contract.MaxToolRefLen), wantErr: contract.ErrToolRefTooLong},
		{in: strings.Repeat("K", 63) + "_T@999999999.999999999.999999999", want: contract.ToolRef{Toolkit: strings.Repeat("K", 63), Tool: "T", Version: "999999999.999999999.999999999"}},
		{in: "Calculator.Add@v1", wantErr: contract.ErrBadToolRef},
		{in: "Calculator.Add@1.2.3.4", wantErr: contract.ErrBadToolRef},
		{in: "Calculator", wantErr: contract.ErrBadToolRef},
		{in: "Calc ulator.Add", wantErr: contract.ErrBadToolRef},
		{in: "", wantErr: contract.ErrBadToolRef},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := contract.ParseToolRef(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"0.0.0", "1.2.3", "10.20.30"} {
		if v, err := contract.ParseVersion(ok); err != nil || v.String() != ok {
			t.Errorf("ParseVersion(%q) = %v, %v", ok, v, err)
		}
	}
	for _, bad := range []string{"", "1", "1.2", "v1.2.3", "1.2.-3", "1.2.+3", "1..3", "1.2.3-rc1",
		"1.0.0000000", "1.-0.0", "01.0.0", "1.00.0", "1.0.01", "+1.0.0", " 1.0.0", "1.0.0 ", "1.0.0+build", "1.0.1234567890", "１.0.0"} {
		if _, err := contract.ParseVersion(bad); !errors.Is(err, contract.ErrBadVersion) {
			t.Errorf("ParseVersion(%q) err = %v, want ErrBadVersion", bad, err)
		}
	}
	a, _ := contract.ParseVersion("1.10.0")
	b, _ := contract.ParseVersion("1.9.9")
	if a.Compare(b) != 1 || b.Compare(a) != -1 || a.Compare(a) != 0 {
		t.Error("Compare orders versions textually")
	}
}

func def(toolkit, tool, version string) *toolfleetv1.ToolDefinition {
	mn, _ := contract.ModelName(toolkit, tool)
	return &toolfleetv1.ToolDefinition{Id: contract.ID(toolkit, tool, version), Toolkit: toolkit, Name: tool,
		Version: version, ModelName: mn, GrpcMethod: "/" + toolkit + "/" + tool + "/" + version}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	defs := []*toolfleetv1.ToolDefinition{
		def("Kit", "Go", "1.0.0"), def("Kit", "Go", "1.10.0"), def("Kit", "Go", "1.9.0"),
		def("Kit", "Go", "2.0.0"), def("Kit", "Stop", "3.0.0"),
	}
	tests := []struct {
		ref     string
		want    string
		wantErr error
	}{
		{ref: "Kit.Go", want: "Kit.Go@2.0.0"},
		{ref: "Kit_Go", want: "Kit.Go@2.0.0"},
		{ref: "Kit.Go@1", want: "Kit.Go@1.0.0"},
		{ref: "Kit.Go@1.10.0", want: "Kit.Go@1.10.0"},
		{ref: "Kit.Go@2", want: "Kit.Go@2.0.0"},
		{ref: "Kit.Go@1.2.0", wantErr: contract.ErrVersionNotFound},
		{ref: "Kit.Go@3", wantErr: contract.ErrVersionNotFound},
		{ref: "Kit.Run", wantErr: contract.ErrToolNotFound},
		{ref: "Other.Go@1", wantErr: contract.ErrToolNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			t.Parallel()
			ref, err := contract.ParseToolRef(tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			got, err := contract.Resolve(ref, defs)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got.GetId() != tt.want {
				t.Fatalf("resolved %q, want %q", got.GetId(), tt.want)
			}
		})
	}
}

func TestModelName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		toolkit, tool, want string
		wantErr             error
	}{
		{toolkit: "Calculator", tool: "Add", want: "Calculator_Add"},
		{toolkit: "KV", tool: "put-item_2", want: "KV_put-item_2"},
		{toolkit: "My_Kit", tool: "Add", wantErr: contract.ErrInvalidName},
		{toolkit: "Kit", tool: "Add.One", wantErr: contract.ErrInvalidName},
		{toolkit: "", tool: "Add", wantErr: contract.ErrInvalidName},
		{toolkit: strings.Repeat("K", 40), tool: strings.Repeat("t", 24), wantErr: contract.ErrInvalidName},
		{toolkit: strings.Repeat("K", 40), tool: strings.Repeat("t", 23), want: strings.Repeat("K", 40) + "_" + strings.Repeat("t", 23)},
	}
	for _, tt := range tests {
		t.Run(tt.toolkit+"/"+tt.tool, func(t *testing.T) {
			t.Parallel()
			got, err := contract.ModelName(tt.toolkit, tt.tool)
			if !errors.Is(err, tt.wantErr) || got != tt.want {
				t.Fatalf("ModelName = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
			if err != nil {
				return
			}
			tk, tool, ok := contract.SplitModelName(got)
			if !ok || tk != tt.toolkit || tool != tt.tool {
				t.Fatalf("SplitModelName(%q) = %q, %q, %v: not reversible", got, tk, tool, ok)
			}
		})
	}
}

func TestCheckCollisions(t *testing.T) {
	t.Parallel()
	same := def("Kit", "Go", "1.0.0")
	other := def("Kit", "Go", "1.0.0")
	other.GrpcMethod = "/another.Service/Go"
	tests := []struct {
		name string
		defs []*toolfleetv1.ToolDefinition
		err  error
	}{
		{"versions side by side", []*toolfleetv1.ToolDefinition{def("Kit", "Go", "1.0.0"), def("Kit", "Go", "1.1.0")}, nil},
		{"same id twice from one method", []*toolfleetv1.ToolDefinition{same, same}, nil},
		{"same id from two methods", []*toolfleetv1.ToolDefinition{same, other}, contract.ErrNameCollision},
		{"model names equal up to case", []*toolfleetv1.ToolDefinition{def("Kit", "Go", "1.0.0"), def("KIT", "go", "1.0.0")}, contract.ErrNameCollision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := contract.CheckCollisions(tt.defs); !errors.Is(err, tt.err) {
				t.Fatalf("CheckCollisions = %v, want %v", err, tt.err)
			}
		})
	}
}
