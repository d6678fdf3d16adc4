// The layering rule of docs/architecture.md, checked on every package of the module.
package toolfleet_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/toolfleet/toolfleet/"

// layerRules maps a package prefix to the prefixes it must not import; a
// from ending in "$" names one package exactly, not its sub-packages.
var layerRules = []struct {
	from      string
	forbidden []string
}{
	{"sdk/", []string{"services/", "orchestrator/", "workers/", "cmd/", "internal/devstack", "internal/demo"}},
	{"gen/", []string{"sdk/", "services/", "orchestrator/", "workers/", "cmd/", "internal/"}},
	{"internal/", []string{"services/", "orchestrator/", "workers/", "cmd/"}},
	// The gateway never depends on the orchestrator: the orchestrator is a
	// client of the gateway (through sdk/client), mounted next to it by cmd/.
	{"services/", []string{"cmd/", "orchestrator/"}},
	{"orchestrator/", []string{"cmd/"}},
	{"workers/", []string{"cmd/", "services/", "orchestrator/"}},
	// The text protocols and the provider formats sit on the llm core
	// (docs/architecture.md, "sdk/llm in layers"): the core, its tests
	// included, imports neither.
	{"sdk/llm$", []string{"sdk/llm/dialect", "sdk/llm/wire"}},

	// Inside orchestrator/ (docs/architecture.md, "The orchestrator"): ids
	// at the bottom, then the one engine (toolcall), then the store runs and
	// programs share (runstore), then the workflow kinds built on them, then
	// their APIs, triggers and the process.
	{"orchestrator/ids", []string{"orchestrator/toolcall", "orchestrator/runstore", "orchestrator/agent", "orchestrator/agentapi", "orchestrator/program", "orchestrator/programapi",
		"orchestrator/runner", "orchestrator/trigger", "orchestrator/metrics", "orchestrator/visibility", "services/", "sdk/"}},
	{"orchestrator/toolcall", []string{"orchestrator/runstore", "orchestrator/agent", "orchestrator/agentapi", "orchestrator/program", "orchestrator/programapi",
		"orchestrator/runner", "orchestrator/trigger", "orchestrator/metrics", "orchestrator/visibility"}},
	// The run store: no workflow kind, no API, no trigger, no process;
	// agent and program (and what sits above them) use it.
	{"orchestrator/runstore", []string{"orchestrator/agent", "orchestrator/program", "orchestrator/agentapi", "orchestrator/programapi", "orchestrator/toolcall/apibase",
		"orchestrator/runner", "orchestrator/trigger", "orchestrator/metrics", "orchestrator/visibility"}},
	{"orchestrator/metrics", []string{"orchestrator/agent", "orchestrator/program", "orchestrator/toolcall"}},
	{"orchestrator/visibility", []string{"orchestrator/agent", "orchestrator/program", "orchestrator/toolcall"}},
	{"orchestrator/program", []string{"orchestrator/runner", "orchestrator/trigger"}},
	{"orchestrator/agent", []string{"orchestrator/agentapi", "orchestrator/programapi", "orchestrator/runner", "orchestrator/trigger"}},
	// The two APIs side by side: each serves its workflow kind, neither
	// the other's API, a trigger or the process.
	{"orchestrator/programapi", []string{"orchestrator/agent", "orchestrator/agentapi", "orchestrator/runner", "orchestrator/trigger"}},
}

// productionRules hold for the packages' own (non-test) imports: services/
// run without the bundled workers, and the end-to-end package, which imports
// everything, is imported by tests only.
var productionRules = []struct {
	from      string
	forbidden []string
}{
	{"services/", []string{"workers/", "e2e"}},
	// Tests of the orchestrator may start a real gateway; its code may not.
	{"orchestrator/", []string{"e2e", "services/"}},
	// Runs start programs (code mode), never the other way round; programs'
	// tests drive code-mode runs and both services.
	{"orchestrator/program", []string{"orchestrator/agent", "orchestrator/agentapi", "orchestrator/programapi"}},
	{"orchestrator/agentapi", []string{"orchestrator/programapi", "orchestrator/runner", "orchestrator/trigger"}},
	{"workers/", []string{"e2e"}},
	{"internal/", []string{"e2e"}},
	// The llm core sits under its layers (docs/architecture.md, "sdk/llm"):
	// the scripted test model, the provider clients and the spec opener
	// import it, never the reverse. Its external tests may use llmtest.
	{"sdk/llm$", []string{"sdk/llm/llmtest", "sdk/llm/models", "sdk/llm/openai", "sdk/llm/anthropic", "sdk/llm/gemini"}},
	// The text protocols and the provider formats import the core and its
	// internal helpers only, not each other; their tests may drive them with
	// llmtest's scripted model, and the text protocols' tests read provider
	// streams with wire.
	{"sdk/llm/dialect", []string{"sdk/llm/wire", "sdk/llm/llmtest", "sdk/llm/models", "sdk/llm/openai", "sdk/llm/anthropic", "sdk/llm/gemini"}},
	{"sdk/llm/wire", []string{"sdk/llm/dialect", "sdk/llm/llmtest", "sdk/llm/models", "sdk/llm/openai", "sdk/llm/anthropic", "sdk/llm/gemini"}},
}

// under reports whether the package rel is path, or under it: a path ending
// in "/" is a prefix ("sdk/"), any other names a package and its
// subpackages ("orchestrator/agent" is not "orchestrator/agentapi"), and
// one ending in "$" names exactly one package ("sdk/llm$").
func under(rel, path string) bool {
	if exact, ok := strings.CutSuffix(path, "$"); ok {
		return rel == exact
	}
	if strings.HasSuffix(path, "/") {
		return strings.HasPrefix(rel, path)
	}
	return rel == path || strings.HasPrefix(rel, path+"/")
}

// violations lists "pkg imports dep" for every broken rule.
func violations(imports map[string][]string, layerRules []struct {
	from      string
	forbidden []string
}) []string {
	var out []string
	for pkg, deps := range imports {
		rel, ok := strings.CutPrefix(pkg, module)
		if !ok {
			continue
		}
		for _, rule := range layerRules {
			if !under(rel, rule.from) {
				continue
			}
			for _, dep := range deps {
				drel, ok := strings.CutPrefix(dep, module)
				if !ok {
					continue
				}
				for _, bad := range rule.forbidden {
					if under(drel, bad) {
						out = append(out, pkg+" imports "+dep)
					}
				}
			}
		}
	}
	return out
}

func TestLayeringRules(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", "./...")
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports, production := map[string][]string{}, map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(outb)))
	for dec.More() {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		imports[p.ImportPath] = append(append(p.Imports, p.TestImports...), p.XTestImports...)
		production[p.ImportPath] = p.Imports
	}
	if len(imports) < 3 {
		t.Fatalf("go list found only %d packages; is the test running at the module root?", len(imports))
	}
	for _, v := range violations(imports, layerRules) {
		t.Errorf("layering rule broken (docs/architecture.md): %s", v)
	}
	for _, v := range violations(production, productionRules) {
		t.Errorf("layering rule broken by non-test code (docs/architecture.md): %s", v)
	}
}

// The checker itself must catch a violation, or the test above could never fail.
func TestLayeringRulesCatchViolations(t *testing.T) {
	t.Parallel()
	got := violations(map[string][]string{
		module + "sdk/tool":           {module + "internal/devstack", module + "gen/toolfleet/v1"},
		module + "workers/calculator": {module + "sdk/tool", module + "services/gateway"},
		module + "cmd/toolfleet":      {module + "internal/devstack"},
	}, layerRules)
	if len(got) != 2 {
		t.Fatalf("violations = %v, want the sdk→devstack and workers→services imports", got)
	}
	got = violations(map[string][]string{
		module + "services/gateway/gatewaytest": {module + "workers/calculator/calculator"},
		module + "services/gateway":             {module + "e2e"},
		module + "cmd/toolfleet":                {module + "e2e", module + "workers/calculator/calculator"},
		module + "sdk/llm":                      {module + "sdk/llm/llmtest", module + "sdk/llm/internal/canon"},
		module + "sdk/llm/models":               {module + "sdk/llm/openai"},
	}, productionRules)
	if len(got) != 3 {
		t.Fatalf("violations = %v, want the services→workers, services→e2e and llm→llmtest imports", got)
	}
	got = violations(map[string][]string{
		module + "sdk/llm/models":  {module + "internal/demo"},
		module + "sdk/llm":         {module + "sdk/llm/dialect", module + "sdk/llm/wire"},
		module + "sdk/llm/dialect": {module + "sdk/llm", module + "sdk/llm/internal/canon"},
	}, layerRules)
	if len(got) != 3 {
		t.Fatalf("violations = %v, want the sdk→demo, llm→dialect and llm→wire imports", got)
	}
	got = violations(map[string][]string{
		module + "sdk/llm/dialect": {module + "sdk/llm", module + "sdk/llm/internal/canon", module + "sdk/llm/wire"},
		module + "sdk/llm/wire":    {module + "sdk/llm", module + "sdk/llm/internal/canon", module + "sdk/llm/openai"},
	}, productionRules)
	if len(got) != 2 {
		t.Fatalf("violations = %v, want the dialect→wire and wire→openai imports", got)
	}
	// Inside orchestrator/: a package name is not a prefix of its neighbours'.
	got = violations(map[string][]string{
		module + "orchestrator/toolcall":     {module + "orchestrator/agent"},
		module + "orchestrator/agentapi":     {module + "orchestrator/agent", module + "orchestrator/program"},
		module + "orchestrator/ids":          {module + "orchestrator/idsx"},
		module + "services/gateway/registry": {module + "orchestrator/ids"},
	}, layerRules)
	if len(got) != 2 {
		t.Fatalf("violations = %v, want the toolcall→agent and services→orchestrator imports", got)
	}
	// The run store sits under both workflow kinds, never on them.
	got = violations(map[string][]string{
		module + "orchestrator/runstore": {module + "orchestrator/program", module + "orchestrator/toolcall", module + "orchestrator/ids"},
		module + "orchestrator/program":  {module + "orchestrator/runstore"},
		module + "orchestrator/agent":    {module + "orchestrator/runstore"},
		module + "orchestrator/toolcall": {module + "orchestrator/runstore"},
	}, layerRules)
	if len(got) != 2 {
		t.Fatalf("violations = %v, want the runstore→program and toolcall→runstore imports", got)
	}
	got = violations(map[string][]string{
		module + "orchestrator/program":             {module + "orchestrator/agent"},
		module + "orchestrator/program/internal/sw": {module + "services/gateway"},
	}, productionRules)
	if len(got) != 2 {
		t.Fatalf("violations = %v, want the program→agent and orchestrator→services imports", got)
	}
}
