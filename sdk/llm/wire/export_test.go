package wire

// The test helpers that scripted_test.go (package wire_test, which may
// import sdk/llm/llmtest) shares with the package's own tests.
var ReadTestdata = readTestdata

const (
	BigArgs = bigArgs
	WantBig = wantBig
)
