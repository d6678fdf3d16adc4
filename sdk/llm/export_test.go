package llm

// The test helpers that scripted_test.go (package llm_test, which may
// import sdk/llm/llmtest) shares with the package's own tests.
var (
	CalculatorTools = calculatorTools
	ReadTestdata    = readTestdata
	TypedTool       = typedTool
	CallStrings     = callStrings
	EqualStrings    = equalStrings
)

const (
	BigArgs = bigArgs
	WantBig = wantBig
)
