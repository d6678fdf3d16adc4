package schema_test

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolfleet/toolfleet/sdk/schema"
)

// clientFormats are the "format" values JSON Schema 2020-12 defines and Ajv
// with ajv-formats (the validator of MCP's TypeScript SDK, the Inspector and
// the conformance suite) knows; any other makes those clients warn "unknown
// format … ignored" on every tools/list.
var clientFormats = map[string]bool{
	"date": true, "time": true, "date-time": true, "duration": true, "uri": true, "uri-reference": true,
	"uri-template": true, "email": true, "hostname": true, "ipv4": true, "ipv6": true, "regex": true,
	"uuid": true, "json-pointer": true, "relative-json-pointer": true,
}

// TestFormatsClientsKnow: every schema of every bundled contract (every
// scalar, well-known type and protovalidate rule among them) uses only
// formats MCP clients know.
func TestFormatsClientsKnow(t *testing.T) {
	t.Parallel()
	for _, fd := range bundled {
		svcs := fd.Services()
		for i := range svcs.Len() {
			methods := svcs.Get(i).Methods()
			for j := range methods.Len() {
				m := methods.Get(j)
				for _, md := range []protoreflect.MessageDescriptor{m.Input(), m.Output()} {
					s, err := schema.For(md)
					if err != nil {
						t.Fatalf("For(%s): %v", md.FullName(), err)
					}
					formatsIn(s, func(f string) {
						if !clientFormats[f] {
							t.Errorf("%s: format %q, which MCP clients do not know", md.FullName(), f)
						}
					})
				}
			}
		}
	}
}

// formatsIn calls fn with every "format" value in v.
func formatsIn(v any, fn func(string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "format" {
				fn(s)
			}
			formatsIn(x, fn)
		}
	case []any:
		for _, x := range v {
			formatsIn(x, fn)
		}
	}
}
