// Package trigger starts agent runs and programs from NATS JetStream
// messages. A configuration file maps subject filters to a target (a program
// or an agent run) and a small template that turns the message into the
// target's input.
//
// A message starts at most one run: the workflow id derives from the
// message's Nats-Msg-Id (or, without one, its stream sequence), and starting
// an id that exists starts nothing. A message is acked only after the start
// is recorded by Temporal; one that can never start anything (a template that
// fails, an input that is refused) goes to the dead-letter subject with the
// reason, and is then acked. See docs/programs.md#triggers.
package trigger

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// Defaults of a Config.
const (
	// DefaultStream holds inbound trigger messages (subjects toolfleet.triggers.>).
	DefaultStream = "TOOLFLEET_TRIGGERS"
	// SubjectPrefix starts every trigger subject.
	SubjectPrefix = "toolfleet.triggers."
	// DefaultDeadLetter receives messages that cannot start anything.
	DefaultDeadLetter = "toolfleet.deadletter.triggers"
	// DeadLetterStream keeps dead letters for inspection.
	DeadLetterStream = "TOOLFLEET_TRIGGERS_DEAD"
)

// Config is a trigger file.
//
//	dead_letter: toolfleet.deadletter.triggers   # optional
//	triggers:
//	  - name: orders
//	    subject: toolfleet.triggers.orders.>
//	    run_as: {subject: orders-bot, scopes: [tools:call]}
//	    program:
//	      file: sum.star                      # or source: "…"
//	      tools: ["Calculator.*"]
//	      args: '{"numbers": {{ json .data.numbers }}}'
//	  - name: support
//	    subject: toolfleet.triggers.support
//	    agent:
//	      model: scripted:demo
//	      tools: ["KV.*"]
//	      prompt: "Answer: {{ .data.question }}"
type Config struct {
	DeadLetter string    `json:"dead_letter,omitempty"`
	Triggers   []Trigger `json:"triggers"`
}

// Trigger maps a subject filter to a target.
type Trigger struct {
	// Name is 1-40 of a-z 0-9 -; it names the durable consumer and prefixes run ids.
	Name string `json:"name"`
	// Subject is a JetStream subject filter under toolfleet.triggers.
	Subject string `json:"subject"`
	// RunAs is the principal the started run or program acts as.
	RunAs   toolcall.Principal `json:"run_as"`
	Program *ProgramTarget     `json:"program,omitempty"`
	Agent   *AgentTarget       `json:"agent,omitempty"`
}

// ProgramTarget starts a program.
type ProgramTarget struct {
	// File is the script (relative to the config file), or Source the script itself.
	File   string         `json:"file,omitempty"`
	Source string         `json:"source,omitempty"`
	Tools  []string       `json:"tools,omitempty"`
	Limits program.Limits `json:"limits,omitempty"`
	// Args is a template giving the program's args (a JSON object);
	// default `{{ json .data }}`: the message's JSON body.
	Args string `json:"args,omitempty"`
}

// AgentTarget starts an agent run.
type AgentTarget struct {
	// Model is "provider:name", e.g. "scripted:demo" or "openai:gpt-4o".
	Model  string   `json:"model"`
	KeyRef string   `json:"key_ref,omitempty"`
	System string   `json:"system,omitempty"`
	Tools  []string `json:"tools,omitempty"`
	// Prompt is a template giving the user message; default `{{ .text }}`.
	Prompt string `json:"prompt,omitempty"`
	// CodeMode has the model write one program instead of calling tools one
	// by one (docs/programs.md, "Code mode").
	CodeMode bool `json:"code_mode,omitempty"`
}

// Info describes a configured trigger for listings.
type Info struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	// Target is "program" or "agent".
	Target string `json:"target"`
	RunAs  string `json:"run_as"`
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

// Load reads and checks a trigger file; program files are read relative to it.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trigger: %w", err)
	}
	var cfg Config
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return nil, fmt.Errorf("trigger: %s: %w", path, err)
	}
	for i := range cfg.Triggers {
		p := cfg.Triggers[i].Program
		if p == nil || p.File == "" {
			continue
		}
		if p.Source != "" {
			return nil, fmt.Errorf("trigger %q: program has both file and source", cfg.Triggers[i].Name)
		}
		f := p.File
		if !filepath.IsAbs(f) {
			f = filepath.Join(filepath.Dir(path), f)
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("trigger %q: %w", cfg.Triggers[i].Name, err)
		}
		p.Source = string(src)
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// Check validates the configuration: names, subjects, a run_as subject, one
// target each, templates that parse and programs that compile.
func (c *Config) Check() error {
	var errs []error
	seen := map[string]bool{}
	for _, t := range c.Triggers {
		bad := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("trigger %q: %s", t.Name, fmt.Sprintf(format, a...)))
		}
		if !namePattern.MatchString(t.Name) {
			bad("name: want 1-40 of a-z 0-9 -")
		}
		if seen[t.Name] {
			bad("name used twice")
		}
		seen[t.Name] = true
		if !strings.HasPrefix(t.Subject, SubjectPrefix) || strings.ContainsAny(t.Subject, " \t") {
			bad("subject %q: want a subject filter under %s", t.Subject, SubjectPrefix)
		}
		if strings.TrimSpace(t.RunAs.Subject) == "" {
			// Without one, its runs would call tools as the orchestrator itself.
			bad("run_as: a subject is required (the principal the trigger's runs and programs act as)")
		}
		if (t.Program == nil) == (t.Agent == nil) {
			bad("want exactly one of program and agent")
			continue
		}
		if p := t.Program; p != nil {
			if _, err := program.Compile(t.Name+".star", p.Source); err != nil {
				bad("program: %v", err)
			}
			if _, err := p.Limits.WithDefaults(); err != nil {
				bad("%v", err)
			}
			if _, err := parseTemplate(p.Args, defaultArgs); err != nil {
				bad("args: %v", err)
			}
		}
		if a := t.Agent; a != nil {
			if prov, name, ok := strings.Cut(a.Model, ":"); !ok || prov == "" || name == "" {
				bad("agent model %q: want provider:name", a.Model)
			}
			if _, err := parseTemplate(a.Prompt, defaultPrompt); err != nil {
				bad("prompt: %v", err)
			}
		}
	}
	return errors.Join(errs...)
}

func (c *Config) deadLetter() string {
	if c.DeadLetter != "" {
		return c.DeadLetter
	}
	return DefaultDeadLetter
}

const (
	defaultArgs   = "{{ json .data }}"
	defaultPrompt = "{{ .text }}"
)

// parseTemplate parses a target's template; a missing key is an error, so a
// message without the fields the template needs is a dead letter.
func parseTemplate(text, def string) (*template.Template, error) {
	if text == "" {
		text = def
	}
	return template.New("t").Option("missingkey=error").Funcs(template.FuncMap{
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
	}).Parse(text)
}
