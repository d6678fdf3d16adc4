package dialect

// The test helpers that scripted_test.go (package dialect_test, which may
// import sdk/llm/llmtest) shares with the package's own tests.
var (
	EqualStrings = equalStrings
	RenderedID   = renderedID
)

// DialectCase is a dialectCase with its fields exported.
type DialectCase struct {
	Name, Text, WantText string
	D                    Dialect
	WantCalls            []string
}

// DialectCases are dialectCases for the external tests.
func DialectCases() []DialectCase {
	out := make([]DialectCase, len(dialectCases))
	for i, c := range dialectCases {
		out[i] = DialectCase{Name: c.name, Text: c.text, WantText: c.wantText, D: c.d, WantCalls: c.wantCalls}
	}
	return out
}
