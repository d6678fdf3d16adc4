package main

// The live view of a run (agent run --watch, agent watch, agent send --watch):
// a spinner and streamed text on a terminal, a plain line per event when piped.

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"golang.org/x/term"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
)

// Styles of the live view (lipgloss drops them when the output is no terminal).
var (
	styleDim  = lipgloss.NewStyle().Faint(true)
	styleTurn = lipgloss.NewStyle().Bold(true)
	styleOK   = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
	styleErr  = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	styleAsk  = lipgloss.NewStyle().Foreground(lipgloss.Color("3")).Bold(true)
)

// view renders a run: on a terminal with a spinner while the model thinks and
// its text as it streams; piped, one plain line per event.
type view struct {
	w        io.Writer
	tty      bool
	mu       sync.Mutex
	spinning string // the spinner's label; "" = none
	frame    int
	inText   bool
	attempt  map[int32]int32 // highest attempt seen per turn
	// Tokens of the turns seen so far; whole-run totals when watching from the start.
	tokensIn, tokensOut int64
	fromStart           bool
	doc                 *output // set: each event is one JSON or YAML document
	pastTurn            int32   // completions up to this turn do not end the watch
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// clearSpinner erases the spinner line (caller holds mu).
func (v *view) clearSpinner() {
	if v.tty && v.spinning != "" {
		fmt.Fprint(v.w, "\r"+ansi.EraseEntireLine)
	}
}

func (v *view) tick() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.tty || v.spinning == "" || v.inText {
		return
	}
	v.frame = (v.frame + 1) % len(spinnerFrames)
	fmt.Fprint(v.w, "\r"+ansi.EraseEntireLine+styleDim.Render(spinnerFrames[v.frame]+" "+v.spinning))
}

func (v *view) line(s string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.clearSpinner()
	if v.inText {
		fmt.Fprintln(v.w)
		v.inText = false
	}
	fmt.Fprintln(v.w, s)
}

func (v *view) spin(label string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.spinning = label
}

func (v *view) delta(d *toolfleetv1.RunDelta) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.tty {
		return // piped output gets the turn's text from its event
	}
	if a := v.attempt[d.GetTurn()]; d.GetAttempt() < a {
		return // a failed attempt's leftovers
	} else if d.GetAttempt() > a && a != 0 {
		fmt.Fprintln(v.w, styleDim.Render(" [retrying the turn]"))
	}
	v.attempt[d.GetTurn()] = d.GetAttempt()
	if !v.inText {
		v.clearSpinner()
		v.inText = true
	}
	fmt.Fprint(v.w, d.GetText())
}

// watchRun streams the run's events and deltas to w until the run ends; a
// dropped stream is resumed after the last event seen.
//
// With -o json or yaml it prints each event as one document instead: no
// deltas, no spinner.
//
// A "completed" event of a turn up to pastTurn is one the run already
// answered before a follow-up message: the watch goes on past it.
func watchRun(ctx context.Context, c toolfleetv1connect.AgentServiceClient, runID string, after uint64, w io.Writer, out *output, pastTurn int32) error {
	v := &view{w: w, tty: isTerminal(w), attempt: map[int32]int32{}, fromStart: after == 0, pastTurn: pastTurn}
	if out.chosen() {
		v.tty, v.doc = false, out
	}
	if v.tty {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		tctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { // owned by watchRun: ends with it
			for {
				select {
				case <-tctx.Done():
					return
				case <-ticker.C:
					v.tick()
				}
			}
		}()
	}
	v.spin("starting…")
	started := time.Now()
	calls := map[string]time.Time{}
	// A stream that breaks (the gateway restarting, an orchestrator replica
	// away) is resumed after the last event seen; a quiet one (a call waiting
	// for approval) is only quiet. Give up after maxWatchFailures breaks in a
	// row without an event in between.
	const maxWatchFailures = 30
	delay := 200 * time.Millisecond
	for failures := 0; failures < maxWatchFailures; failures++ {
		stream, err := c.WatchRun(ctx, connect.NewRequest(&toolfleetv1.WatchRunRequest{RunId: runID, AfterSeq: after, Deltas: v.doc == nil}))
		if err != nil {
			if !retryable(err) {
				return err
			}
		} else {
			for stream.Receive() {
				if d := stream.Msg().GetDelta(); d != nil {
					v.delta(d)
					continue
				}
				ev := stream.Msg().GetEvent()
				after, failures, delay = ev.GetSeq(), 0, 200*time.Millisecond
				if done, err := v.event(ctx, c, ev, calls, started); done {
					return err
				}
			}
			err = stream.Err()
			_ = stream.Close()
			if err != nil && ctx.Err() == nil && !retryable(err) {
				return err
			}
			if err != nil && ctx.Err() == nil && v.doc == nil {
				v.line(styleDim.Render("(watch interrupted: " + err.Error() + "; resuming)"))
			}
		}
		if err := pause(ctx, delay); err != nil {
			return err
		}
		delay = min(2*delay, 5*time.Second)
	}
	return fmt.Errorf("watching %s: the stream kept ending; resume with 'toolfleet agent watch %s --after %d'", runID, runID, after)
}

// usage counts a turn's tokens and says them, with the run's total so far when the
// watch saw every turn.
func (v *view) usage(u *toolfleetv1.Usage) string {
	if u == nil {
		return ""
	}
	v.tokensIn += u.GetInputTokens()
	v.tokensOut += u.GetOutputTokens()
	s := fmt.Sprintf(" [%d in / %d out", u.GetInputTokens(), u.GetOutputTokens())
	if v.fromStart {
		s += fmt.Sprintf("; run so far %d / %d", v.tokensIn, v.tokensOut)
	}
	return s + " tokens]"
}

// event renders one run event; done is true after the terminal one.
func (v *view) event(ctx context.Context, c toolfleetv1connect.AgentServiceClient, ev *toolfleetv1.RunEvent, calls map[string]time.Time, started time.Time) (bool, error) {
	if v.doc != nil {
		if err := v.doc.streamItem(v.w, ev); err != nil {
			return true, err
		}
		switch ev.GetKind() {
		case "completed":
			return ev.GetTurn() > v.pastTurn, nil
		case "cancelled":
			return true, errReportedf("run %s was cancelled", ev.GetRunId())
		case "failed":
			return true, errReportedf("run %s ended: %s", ev.GetRunId(), ev.GetMessage())
		}
		return false, nil
	}
	switch ev.GetKind() {
	case "started":
		v.line(styleTurn.Render("▶ run "+ev.GetRunId()) + styleDim.Render(" ("+ev.GetMessage()+")"))
		v.spin("model is thinking…")
	case "message":
		v.line(styleDim.Render("✉ new message"))
		v.spin("model is thinking…")
	case "turn":
		if v.tty && v.inText {
			v.line("")
		}
		v.line(styleTurn.Render(fmt.Sprintf("turn %d", ev.GetTurn())) + styleDim.Render(": "+ev.GetMessage()+v.usage(ev.GetUsage())))
	case "tool_call":
		calls[ev.GetCallId()] = time.Now()
		v.line(fmt.Sprintf("  → %s %s", ev.GetToolId(), styleDim.Render(ev.GetCallId())))
		v.spin("running " + ev.GetToolId() + "…")
	case "tool_result":
		msg := ev.GetMessage()
		style := styleOK
		if strings.HasPrefix(msg, "error") {
			style = styleErr
		}
		v.line("  ← " + style.Render(msg))
		v.spin("model is thinking…")
	case "approval.requested":
		v.line(styleAsk.Render(fmt.Sprintf("  ? %s needs approval: toolfleet agent approve %s  (or deny)", ev.GetToolId(), ev.GetCallId())))
		v.spin("waiting for approval…")
	case "approval.decided":
		v.line("  ! " + ev.GetMessage())
	case "completed", "failed", "cancelled":
		if ev.GetKind() == "completed" && ev.GetTurn() <= v.pastTurn {
			v.line(styleOK.Render("✓ " + ev.GetMessage()))
			return false, nil
		}
		v.spin("")
		usage := ""
		if st, err := c.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: ev.GetRunId()})); err == nil {
			u := st.Msg.GetUsage()
			usage = fmt.Sprintf(" (%s, %s, %d tokens in / %d out, %s)", counted(int64(st.Msg.GetTurns()), "turn"), counted(int64(st.Msg.GetToolCalls()), "tool call"),
				u.GetInputTokens(), u.GetOutputTokens(), time.Since(started).Round(time.Millisecond))
		}
		switch ev.GetKind() {
		case "completed":
			v.line(styleOK.Render("✓ "+ev.GetMessage()) + styleDim.Render(usage))
			return true, nil
		case "cancelled":
			v.line(styleErr.Render("✗ cancelled") + styleDim.Render(usage))
			return true, errReportedf("run %s was cancelled", ev.GetRunId())
		default:
			v.line(styleErr.Render("✗ "+ev.GetMessage()) + styleDim.Render(usage))
			return true, errReportedf("run %s ended: %s", ev.GetRunId(), ev.GetMessage())
		}
	}
	return false, nil
}

// counted is "1 turn", "2 turns": n and the noun, plural unless n is 1.
func counted(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
