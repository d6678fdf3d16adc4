package dialect

import (
	"regexp"
	"strings"
)

// dialectFamilies maps model names to the dialect the family writes, first
// match wins. Names are lowercased, with "_" and " " read as "-".
var dialectFamilies = []struct {
	pattern *regexp.Regexp
	dialect Dialect
}{
	{regexp.MustCompile(`gpt-oss`), Harmony},
	{regexp.MustCompile(`kimi-?k3`), KimiK3},
	{regexp.MustCompile(`kimi`), KimiK2},
	{regexp.MustCompile(`glm-?(4\.7|5)`), GLM47},
	{regexp.MustCompile(`glm-?4\.[56]`), GLM45},
	{regexp.MustCompile(`gemma-?4`), Gemma4},
	{regexp.MustCompile(`qwen-?3\.[56]`), Qwen35},
	{regexp.MustCompile(`minimax-?m3`), MiniMaxM3},
	{regexp.MustCompile(`minimax`), MiniMaxM2},
	// V3.2-Exp still wrote the V3.1 tokens; DSML came with V3.2.
	{regexp.MustCompile(`deepseek-v3\.(1|2-exp)`), DeepSeekV31},
	{regexp.MustCompile(`deepseek-v3\.2`), DeepSeekV32},
	{regexp.MustCompile(`deepseek-v4\.1`), DeepSeekV41},
	{regexp.MustCompile(`deepseek-v4`), DeepSeekV4},
	{regexp.MustCompile(`qwen3-coder`), Qwen3Coder},
	{regexp.MustCompile(`mistral|devstral|magistral|ministral|codestral|mixtral`), Mistral},
	{regexp.MustCompile(`llama-?(3\.2|4)`), Pythonic},
	{regexp.MustCompile(`llama-?3\.[13]`), Llama3JSON},
}

// For returns the dialect a model family writes, from the model's
// name ("openai/gpt-oss-120b" → Harmony, "Kimi-K2-Instruct" → KimiK2,
// "meta-llama/Llama-3.2-3B-Instruct" → Pythonic, …); ok is false when the
// name says nothing. tool_protocol "auto" parses it in a native model's
// text before the prompt protocols.
func For(model string) (Dialect, bool) {
	name := strings.NewReplacer("_", "-", " ", "-").Replace(strings.ToLower(model))
	for _, f := range dialectFamilies {
		if f.pattern.MatchString(name) {
			return f.dialect, true
		}
	}
	return "", false
}
