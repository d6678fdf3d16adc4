package trigger

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/api/serviceerror"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// Headers of a dead letter.
const (
	HeaderTrigger = "Toolfleet-Trigger"
	HeaderReason  = "Toolfleet-Reason"
	HeaderSubject = "Toolfleet-Subject"
	HeaderRunID   = "Toolfleet-Run-Id"
)

// ProgramStarter starts programs; *program.Programs implements it.
type ProgramStarter interface {
	Start(ctx context.Context, in program.Input) (string, error)
}

// RunStarter starts agent runs; *agent.Runs implements it.
type RunStarter interface {
	Start(ctx context.Context, runID string, spec agent.RunSpec, p toolcall.Principal, msgs ...*toolfleetv1.Message) (string, error)
}

// Options configure a Runner.
type Options struct {
	Programs ProgramStarter
	Runs     RunStarter // may be nil when no trigger starts agent runs
	// MemoryStorage keeps the trigger streams in memory (tests).
	MemoryStorage bool
	// Assets sets the streams' replicas, storage, byte bounds and retention
	// (sdk/jsassets; the zero value: R1, file, the prod profile).
	Assets jsassets.Config
	Logger *slog.Logger
}

// maxMessageBytes bounds an inbound trigger message.
const maxMessageBytes = 1 << 20

// startTimeout bounds one start; a start that fails for a passing reason is
// redelivered after retryDelay, at most maxDeliver times.
const (
	startTimeout = 30 * time.Second
	retryDelay   = 2 * time.Second
	maxDeliver   = 10
)

// Runner consumes the trigger subjects and starts what they map to. Stop
// ends every consumer.
type Runner struct {
	cfg  *Config
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger

	templates map[string]*template.Template
	consumers []jetstream.ConsumeContext
}

// Start creates the trigger streams and one durable consumer per trigger,
// and starts consuming.
func Start(ctx context.Context, js jetstream.JetStream, cfg *Config, opts Options) (_ *Runner, err error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	for _, t := range cfg.Triggers {
		if t.Agent != nil && opts.Runs == nil {
			return nil, fmt.Errorf("trigger %q: starts agent runs, but no run starter was given", t.Name)
		}
	}
	r := &Runner{cfg: cfg, js: js, opts: opts, log: opts.Logger, templates: map[string]*template.Template{}}
	if r.log == nil {
		r.log = slog.Default()
	}
	defer func() {
		if err != nil {
			r.Stop()
		}
	}()
	assets := opts.Assets
	if opts.MemoryStorage {
		assets = assets.WithStorage(jsassets.StorageMemory)
		assets.Profile = cmp.Or(assets.Profile, jsassets.ProfileDev) // tests: small
	}
	stream, err := jsassets.EnsureStream(ctx, js, assets.Settings(jsassets.Triggers.Named(DefaultStream)).Stream(jetstream.StreamConfig{
		Name: DefaultStream, Description: "toolfleet trigger messages", Subjects: []string{SubjectPrefix + ">"},
		MaxMsgSize: maxMessageBytes, Discard: jetstream.DiscardOld, Duplicates: 10 * time.Minute,
	}))
	if err != nil {
		return nil, fmt.Errorf("trigger: %w", err)
	}
	if _, err := jsassets.EnsureStream(ctx, js, assets.Settings(jsassets.TriggerDeadLetters.Named(DeadLetterStream)).Stream(jetstream.StreamConfig{
		Name: DeadLetterStream, Description: "toolfleet trigger messages that could not start anything",
		Subjects: []string{cfg.deadLetter()}, Discard: jetstream.DiscardOld, Duplicates: 10 * time.Minute,
	})); err != nil {
		return nil, fmt.Errorf("trigger: %w", err)
	}
	for _, t := range cfg.Triggers {
		text, def := "", defaultArgs
		if t.Program != nil {
			text = t.Program.Args
		} else {
			text, def = t.Agent.Prompt, defaultPrompt
		}
		if r.templates[t.Name], err = parseTemplate(text, def); err != nil {
			return nil, err
		}
		cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: "trigger-" + t.Name, FilterSubject: t.Subject, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: startTimeout + 10*time.Second, MaxDeliver: maxDeliver, MaxAckPending: 64,
		})
		if err != nil {
			return nil, fmt.Errorf("trigger %q: consumer: %w", t.Name, err)
		}
		cc, err := cons.Consume(func(msg jetstream.Msg) { r.handle(context.Background(), t, msg) },
			jetstream.PullMaxMessages(16))
		if err != nil {
			return nil, fmt.Errorf("trigger %q: consume: %w", t.Name, err)
		}
		r.consumers = append(r.consumers, cc)
	}
	return r, nil
}

// Stop stops consuming; a message being handled finishes its start.
func (r *Runner) Stop() {
	for _, c := range r.consumers {
		c.Drain()
	}
	for _, c := range r.consumers {
		<-c.Closed()
	}
	r.consumers = nil
}

// List describes the configured triggers.
func (r *Runner) List() []Info { return r.cfg.List() }

// List describes the configured triggers; a nil Config has none.
func (c *Config) List() []Info {
	if c == nil {
		return nil
	}
	out := make([]Info, 0, len(c.Triggers))
	for _, t := range c.Triggers {
		target := "program"
		if t.Agent != nil {
			target = "agent"
		}
		out = append(out, Info{Name: t.Name, Subject: t.Subject, Target: target, RunAs: t.RunAs.Subject})
	}
	return out
}

// Proto lists the configured triggers as ProgramService.ListTriggers returns them.
func (c *Config) Proto() []*toolfleetv1.Trigger {
	if c == nil {
		return nil
	}
	out := make([]*toolfleetv1.Trigger, 0, len(c.Triggers))
	for _, i := range c.List() {
		out = append(out, &toolfleetv1.Trigger{Name: i.Name, Subject: i.Subject, Target: i.Target, RunAs: i.RunAs})
	}
	return out
}

// permanentError marks a message that no redelivery can start.
type permanentError struct{ reason string }

func (e *permanentError) Error() string { return e.reason }

// handle starts what msg maps to, then acks it; a permanent failure goes to
// the dead-letter subject first, a passing one is redelivered later.
func (r *Runner) handle(ctx context.Context, t Trigger, msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	id, err := r.start(ctx, t, msg)
	var perm *permanentError
	switch {
	case err == nil:
		if err := msg.DoubleAck(ctx); err != nil {
			r.log.Warn("trigger: ack", "trigger", t.Name, "run_id", id, "error", err)
		}
	case errors.As(err, &perm):
		r.log.Warn("trigger: dead letter", "trigger", t.Name, "subject", msg.Subject(), "reason", perm.reason)
		if err := r.deadLetter(ctx, t, msg, id, perm.reason); err != nil {
			r.log.Error("trigger: dead letter not stored; the message will be redelivered", "trigger", t.Name, "error", err)
			_ = msg.NakWithDelay(retryDelay)
			return
		}
		_ = msg.Term()
	default:
		r.log.Warn("trigger: start failed; will retry", "trigger", t.Name, "run_id", id, "error", err)
		if md, _ := msg.Metadata(); md != nil && md.NumDelivered >= maxDeliver {
			_ = r.deadLetter(ctx, t, msg, id, "could not start after "+strconv.Itoa(maxDeliver)+" attempts: "+err.Error())
			_ = msg.Term()
			return
		}
		_ = msg.NakWithDelay(retryDelay)
	}
}

// start renders the message into the target's input and starts it under a
// workflow id derived from the message.
func (r *Runner) start(ctx context.Context, t Trigger, msg jetstream.Msg) (string, error) {
	id, err := runID(t.Name, msg)
	if err != nil {
		return "", &permanentError{reason: err.Error()}
	}
	var buf bytes.Buffer
	if err := r.templates[t.Name].Execute(&buf, templateData(msg)); err != nil {
		return id, &permanentError{reason: "template: " + err.Error()}
	}
	if p := t.Program; p != nil {
		var args map[string]any
		if err := json.Unmarshal(buf.Bytes(), &args); err != nil {
			return id, &permanentError{reason: "args template did not give a JSON object: " + err.Error()}
		}
		_, err := r.opts.Programs.Start(ctx, program.Input{ProgramID: id, Filename: t.Name + ".star", Source: p.Source,
			ArgsJSON: buf.String(), Tools: p.Tools, Limits: p.Limits, Principal: t.RunAs})
		var pe *program.ProgramError
		var ie *program.InputError
		if errors.As(err, &pe) || errors.As(err, &ie) {
			return id, &permanentError{reason: err.Error()}
		}
		return id, err
	}
	a := t.Agent
	prov, name, _ := strings.Cut(a.Model, ":")
	spec := agent.RunSpec{Model: agent.ModelSpec{Spec: llm.Spec{Provider: prov, Name: name, KeyRef: a.KeyRef}}, Tools: a.Tools,
		CodeMode: a.CodeMode, Labels: map[string]string{"trigger": t.Name}}
	var msgs []*toolfleetv1.Message
	if a.System != "" {
		msgs = append(msgs, textMessage(toolfleetv1.Role_ROLE_SYSTEM, a.System))
	}
	msgs = append(msgs, textMessage(toolfleetv1.Role_ROLE_USER, buf.String()))
	_, err = r.opts.Runs.Start(ctx, id, spec, t.RunAs, msgs...)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return id, nil // the run exists: this message was handled before
	}
	return id, err
}

func textMessage(role toolfleetv1.Role, text string) *toolfleetv1.Message {
	return &toolfleetv1.Message{Role: role, Parts: []*toolfleetv1.Part{{Kind: &toolfleetv1.Part_Text{Text: text}}}}
}

// templateData is what a template sees: .data (the JSON body, nil when it is
// not JSON), .text (the body as text), .subject and .headers.
func templateData(msg jetstream.Msg) map[string]any {
	var data any
	if err := json.Unmarshal(msg.Data(), &data); err != nil {
		data = nil
	}
	headers := map[string]string{}
	for k, v := range msg.Headers() {
		if len(v) > 0 {
			headers[k] = v[0]
		}
	}
	return map[string]any{"data": data, "text": string(msg.Data()), "subject": msg.Subject(), "headers": headers}
}

var msgIDPattern = regexp.MustCompile(`^[A-Za-z0-9_=-]{1,40}$`)

// runID is the workflow id of what msg starts: "trg_<name>_m<Nats-Msg-Id>",
// "trg_<name>_h<hash of the Nats-Msg-Id>" when the id has characters a
// workflow id cannot carry, else "trg_<name>_s<stream sequence>". A
// redelivery or a republish with the same Nats-Msg-Id gets the same id, and
// no two messages can share one: trigger names hold no "_", and the letter
// after the name says which form follows (so a publisher cannot pick a
// Nats-Msg-Id that takes another message's or another trigger's id).
func runID(name string, msg jetstream.Msg) (string, error) {
	if mid := msg.Headers().Get(nats.MsgIdHdr); mid != "" {
		if !msgIDPattern.MatchString(mid) {
			sum := sha256.Sum256([]byte(mid))
			return ids.Trigger(name, 'h', hex.EncodeToString(sum[:16])), nil
		}
		return ids.Trigger(name, 'm', mid), nil
	}
	md, err := msg.Metadata()
	if err != nil {
		return "", fmt.Errorf("message without stream metadata: %w", err)
	}
	return ids.Trigger(name, 's', strconv.FormatUint(md.Sequence.Stream, 10)), nil
}

// deadLetter stores msg on the dead-letter subject with the reason.
func (r *Runner) deadLetter(ctx context.Context, t Trigger, msg jetstream.Msg, id, reason string) error {
	dl := nats.NewMsg(r.cfg.deadLetter())
	dl.Data = msg.Data()
	dl.Header.Set(HeaderTrigger, t.Name)
	dl.Header.Set(HeaderReason, reason)
	dl.Header.Set(HeaderSubject, msg.Subject())
	if id != "" {
		dl.Header.Set(HeaderRunID, id)
	}
	opts := []jetstream.PublishOpt{}
	if md, err := msg.Metadata(); err == nil {
		opts = append(opts, jetstream.WithMsgID("dead-"+strconv.FormatUint(md.Sequence.Stream, 10)))
	}
	if _, err := r.js.PublishMsg(ctx, dl, opts...); err != nil {
		return fmt.Errorf("trigger: dead letter: %w", err)
	}
	return nil
}
