package browser

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/toolfleet/toolfleet/e2e/devproc"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write the screenshots into docs/console/ (else into the test's artifact folder)")

// script is the scripted model of the flow: a tool call that needs
// approval, then an answer with markup that must stay text.
const script = `turns:
  - text: 'I will add 2 and 3 with the calculator.'
    calls:
      - tool: Calculator.Add
        id: sum
        args: {a: 2, b: 3}
  - text: 'The sum is ${sum.result}. <script>alert("x")</script><img src=x onerror=alert(1)> <a href="javascript:alert(2)">link</a>'
`

// askScript is the scripted model of a run whose tool asks a question
// (the Conformance toolkit's elicitation: the caller's name).
const askScript = `turns:
  - text: 'Greeting.'
    calls:
      - tool: Conformance.InputRequiredElicitation
        id: greet
        args: {}
  - text: 'Greeted.'
`

// devSecret is the dev gateway's HS256 secret.
const devSecret = "browser-test-secret-browser-test-secret"

// program is the program the programs page shows.
const program = "s = Calculator_Add(a=40, b=2)\np = Calculator_Multiply(a=s.value['result'], b=10)\nresult = {'sum': s.value['result'], 'product': p.value['result']}\n"

// chromium finds the browser: $CHROMIUM, else chromium or chromium-browser on PATH.
func chromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestConsoleInBrowser: sign in to the console of `toolfleet dev`, start a
// scripted run whose call needs approval, watch it arrive live on the run
// page, approve it from the inbox and see the run complete, its answer's
// markup shown as text (no dialog opens, no image loads); later, answer a
// tool's question from the inbox and see that run complete too.
func TestConsoleInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no chromium found (CI=true): install Debian's chromium package (.ci/run does) or set CHROMIUM")
		}
		t.Skip("no chromium found: install Debian's chromium package (apt-get install chromium) or set CHROMIUM to run the console's browser test")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	shots := t.ArtifactDir()
	if *updateScreenshots {
		shots = filepath.Join(repo, "docs", "console")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute) // it builds toolfleet first: slow on a busy machine
	defer cancel()
	base, bin := startDev(ctx, t, repo)

	opts := append(chromedp.DefaultExecAllocatorOptions[:0:0],
		chromedp.ExecPath(browser), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// The first Run starts the browser: no timeout on it (chromedp.Run's rule).
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	var dialogs atomic.Int32
	go func() { // a payload that came alive would open a dialog
		for _, err := range chromedp.Events(bctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			dialogs.Add(1)
		}
	}()
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(shots, name), png, 0o644)
		}
	}
	fail := func(what string, err error) {
		t.Helper()
		html, _ := chromedp.Run(bctx, chromedp.OuterHTML(chromedp.CSS("body")))
		t.Fatalf("%s: %v\npage:\n%s", what, err, html)
	}
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 60*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			fail(what, err)
		}
	}
	value := func(what string, a chromedp.Action[string]) string {
		t.Helper()
		v, err := chromedp.Run(bctx, a)
		if err != nil {
			fail(what, err)
		}
		return v
	}

	step("sign in",
		chromedp.Navigate(base+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`#signin`)),
		chromedp.SetValue(chromedp.CSS(`input[name=subject]`), "ada"),
		shot("signin.png"),
		chromedp.Submit(chromedp.CSS(`#signin`)),
		chromedp.WaitVisible(chromedp.CSS(`#start-run`)),
	)
	step("start a run whose call needs approval and watch it wait",
		chromedp.SetValue(chromedp.CSS(`#start-run input[name=model]`), "scripted:console.yaml"),
		chromedp.SetValue(chromedp.CSS(`#start-run input[name=tools]`), "Calculator.*"),
		chromedp.SetValue(chromedp.CSS(`#start-run input[name=approve]`), "Calculator.*"),
		chromedp.SetValue(chromedp.CSS(`#start-run textarea[name=prompt]`), "add 2 and 3"),
		chromedp.Submit(chromedp.CSS(`#start-run`)),
		// Live: the transcript entries arrive over SSE after the page loaded.
		chromedp.WaitVisible(chromedp.CSS(`#transcript li.ev-started`)),
		chromedp.WaitVisible(chromedp.CSS(`#transcript li.ev-approval-requested`)),
		chromedp.WaitVisible(chromedp.CSS(`#summary .approval`)),
		shot("run-waiting.png"),
	)
	runURL := value("the run page's address", chromedp.Location())
	step("approve from the inbox",
		chromedp.Navigate(base+"/console/inbox"),
		chromedp.WaitVisible(chromedp.CSS(`.approval button[value=approve]`)),
		chromedp.WaitVisible(chromedp.CSS(`#inbox-count`)),
		shot("inbox.png"),
		chromedp.SetValue(chromedp.CSS(`.approval input[name=reason]`), "checked the numbers"),
		chromedp.Click(chromedp.CSS(`.approval button[value=approve]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.empty`)),
	)
	step("see the run complete",
		chromedp.Navigate(runURL),
		chromedp.WaitVisible(chromedp.CSS(`#transcript li.ev-completed`)),
		chromedp.Poll[chromedp.Void](`document.getElementById("run-status").textContent === "completed"`),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#run-calls li.call`)),
		shot("run-completed.png"),
	)
	answer := value("the answer", chromedp.Text(chromedp.CSS(`.answer pre`)))
	live := value("the page's images and scripts", chromedp.Evaluate[string](`document.images.length + " images, " + document.scripts.length + " scripts"`))
	if !strings.Contains(answer, "The sum is 5.") || !strings.Contains(answer, `<script>alert("x")</script>`) {
		t.Errorf("the answer, as text, is %q", answer)
	}
	if live != "0 images, 1 scripts" || dialogs.Load() != 0 {
		t.Errorf("the hostile answer came alive: %s (want 0 images and the console's 1 script), %d dialogs", live, dialogs.Load())
	}
	if calls := value("the run's calls", chromedp.Text(chromedp.CSS(`#run-calls`))); !strings.Contains(calls, "approved by ada") || !strings.Contains(calls, "1 attempt") {
		t.Errorf("the run's calls say %q, want the approver and the attempts", calls)
	}
	runID := runURL[strings.LastIndex(runURL, "/")+1:]
	step("filter the runs list",
		chromedp.Navigate(base+"/console/runs"),
		chromedp.WaitVisible(chromedp.CSS(`#run-filters`)),
		chromedp.SetValue(chromedp.CSS(`#run-filters select[name=status]`), "completed"),
		chromedp.SetValue(chromedp.CSS(`#run-filters input[name=tool]`), "Calculator.Add"),
		chromedp.Submit(chromedp.CSS(`#run-filters`)),
		chromedp.WaitVisible(chromedp.CSS(`table.runs`)),
		shot("runs.png"),
	)
	if rows := value("the filtered runs", chromedp.Text(chromedp.CSS(`table.runs tbody`))); !strings.Contains(rows, runID) || !strings.Contains(rows, "completed") {
		t.Errorf("the runs filtered on completed and Calculator.Add show %q, want %s", rows, runID)
	}
	step("a filter that matches nothing",
		chromedp.SetValue(chromedp.CSS(`#run-filters input[name=model]`), "scripted:none"),
		chromedp.Submit(chromedp.CSS(`#run-filters`)),
		chromedp.WaitVisible(chromedp.CSS(`p.empty`)),
	)

	runProgram(ctx, t, bin, base, "ada", program)
	step("the program's page",
		chromedp.Navigate(base+"/console/programs"),
		chromedp.WaitVisible(chromedp.CSS(`table.programs`)),
		chromedp.Click(chromedp.CSS(`table.programs tbody a`)),
		chromedp.WaitVisible(chromedp.CSS(`#program-calls li.call`)),
		shot("program.png"),
	)
	if calls := value("the program's calls", chromedp.Text(chromedp.CSS(`#program-calls`))); !strings.Contains(calls, "Calculator.Multiply") || !strings.Contains(calls, "420") {
		t.Errorf("the program's calls say %q", calls)
	}

	step("the tools and a try-it call the gateway refuses",
		chromedp.Navigate(base+"/console/tools"),
		chromedp.WaitVisible(chromedp.CSS(`#tools`)),
		shot("tools.png"),
		chromedp.Navigate(base+"/console/tools/Calculator.Add"),
		chromedp.WaitVisible(chromedp.CSS(`#try-it`)),
		chromedp.SetValue(chromedp.CSS(`#try-it input[name="in.a"]`), "forty"),
		chromedp.SetValue(chromedp.CSS(`#try-it input[name="in.b"]`), "2"),
		chromedp.Submit(chromedp.CSS(`#try-it`)),
		chromedp.WaitVisible(chromedp.CSS(`#field-errors`)),
		shot("tool-try-it.png"),
	)
	if msg := value("the validation error", chromedp.Text(chromedp.CSS(`#field-errors`))); !strings.HasPrefix(strings.TrimSpace(msg), "a: ") {
		t.Errorf("the try-it form's field errors say %q", msg)
	}
	step("a try-it call that succeeds",
		chromedp.SetValue(chromedp.CSS(`#try-it input[name="in.a"]`), "40"),
		chromedp.Submit(chromedp.CSS(`#try-it`)),
		chromedp.WaitVisible(chromedp.CSS(`#outcome-value`)),
	)
	if v := value("the call's value", chromedp.Text(chromedp.CSS(`#outcome-value`))); !strings.Contains(v, "42") {
		t.Errorf("try-it 40+2 shows %q", v)
	}

	step("start a run whose tool asks a question",
		chromedp.Navigate(base+"/console/runs"),
		chromedp.WaitVisible(chromedp.CSS(`#start-run`)),
		chromedp.SetValue(chromedp.CSS(`#start-run input[name=model]`), "scripted:ask.yaml"),
		chromedp.SetValue(chromedp.CSS(`#start-run input[name=tools]`), "Conformance.InputRequiredElicitation"),
		chromedp.SetValue(chromedp.CSS(`#start-run textarea[name=prompt]`), "greet me"),
		chromedp.Submit(chromedp.CSS(`#start-run`)),
		chromedp.WaitVisible(chromedp.CSS(`#transcript li.ev-started`)),
	)
	askURL := value("the asking run's address", chromedp.Location())
	step("the question in the inbox",
		chromedp.Navigate(base+"/console/inbox"),
		chromedp.WaitVisible(chromedp.CSS(`.question input[name="in.name"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#inbox-count`)),
	)
	if q := value("the question", chromedp.Text(chromedp.CSS(`.question .question-message`))); q != "What is your name?" {
		t.Errorf("the inbox's question says %q", q)
	}
	// The run's page shows the same question with the same form; answered
	// there, the run's page comes back. Fill and submit in one script task,
	// so the live summary cannot be replaced between the two (it is not
	// while a field has the focus).
	step("the question on the run's page",
		chromedp.Navigate(askURL),
		chromedp.WaitVisible(chromedp.CSS(`#run-questions input[name="in.name"]`)),
		shot("run-question.png"),
	)
	if got := value("answer the question on the run's page", chromedp.Evaluate[string](`(function () {
		var f = document.querySelector("#run-questions form");
		f.querySelector('input[name="in.name"]').value = "Ada";
		f.querySelector("button[value=accept]").click();
		return "sent";
	})()`)); got != "sent" {
		t.Fatalf("answering: %q", got)
	}
	step("the answered run completes",
		chromedp.WaitVisible(chromedp.CSS(`#transcript li.ev-completed`)),
	)
	if loc := value("where the answer went", chromedp.Location()); loc != askURL {
		t.Errorf("answering on the run's page went to %s, want the run's page", loc)
	}
	if tr := value("the asking run's transcript", chromedp.Text(chromedp.CSS(`#transcript`))); !strings.Contains(tr, "Hello, Ada!") {
		t.Errorf("the run's transcript lacks the tool's greeting with the answer: %q", tr)
	}

	// A program whose tool asks: its page shows the question and is live.
	// Answered from the inbox in a second tab, the first tab's program page
	// shows the call's result and the end without a reload.
	startProgram(ctx, t, bin, base, "ada", "asks", "r = Conformance_InputRequiredElicitation()\nresult = r.value\n")
	step("the program's question on its page, live",
		chromedp.Navigate(base+"/console/programs/asks"),
		chromedp.WaitVisible(chromedp.CSS(`#program-questions input[name="in.name"]`)),
		chromedp.Poll[chromedp.Void](`document.getElementById("program-live-state").textContent === "live"`),
		shot("program-question.png"),
	)
	tab, tabCancel := chromedp.NewContext(bctx)
	defer tabCancel()
	tctx, tcancel := context.WithTimeout(tab, 60*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/console/inbox"),
		chromedp.WaitVisible(chromedp.CSS(`.question input[name="in.name"]`))); err != nil {
		fail("the program's question in another tab's inbox", err)
	}
	if got, err := chromedp.Run(tctx, chromedp.Evaluate[string](`(function () {
		var f = document.querySelector('.question form[action$="/programs/asks/answer"]');
		f.querySelector('input[name="in.name"]').value = "Grace";
		f.querySelector("button[value=accept]").click();
		return "sent";
	})()`)); err != nil || got != "sent" {
		t.Fatalf("answering the program's question in the other tab: %q, %v", got, err)
	}
	step("the program's page follows it to the end",
		chromedp.Poll[chromedp.Void](`document.getElementById("program-status").textContent === "completed"`),
		chromedp.WaitVisible(chromedp.CSS(`#program-calls li.call`)),
		shot("program-live.png"),
	)
	if calls := value("the program's live calls", chromedp.Text(chromedp.CSS(`#program-calls`))); !strings.Contains(calls, "Conformance.InputRequiredElicitation") || !strings.Contains(calls, "Grace") {
		t.Errorf("the program's page, live, shows the calls %q", calls)
	}
	t.Logf("screenshots in %s", shots)
}

// startDev builds cmd/toolfleet and runs `toolfleet dev` with auth on (a
// dev secret), free ports, the model scripts and the conformance tools; it
// returns the gateway's URL and the binary.
func startDev(ctx context.Context, t *testing.T, repo string) (base, bin string) {
	t.Helper()
	return devproc.Start(ctx, t, devproc.Options{Repo: repo, Dir: t.TempDir(),
		Scripts: map[string]string{"console.yaml": script, "ask.yaml": askScript},
		Args:    []string{"--gateway-jwt-secret", devSecret, "--conformance"}})
}

// startProgram starts source as program id of sub through `toolfleet
// program run`, and waits only briefly: the program goes on waiting for
// its question's answer after the command gives up.
func startProgram(ctx context.Context, t *testing.T, bin, base, sub, id, source string) {
	t.Helper()
	tok, err := exec.CommandContext(ctx, bin, "dev", "token", "--gateway-jwt-secret", devSecret, "--sub", sub).Output()
	if err != nil {
		t.Fatalf("dev token: %v", err)
	}
	file := filepath.Join(t.TempDir(), id+".star")
	if err := os.WriteFile(file, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.CommandContext(ctx, bin, "program", "run", file, "--id", id, "--tool", "Conformance.*", "--timeout", "3s",
		"--gateway", strings.TrimPrefix(base, "http://"), "--token", strings.TrimSpace(string(tok))).CombinedOutput()
	t.Logf("program run %s (it keeps waiting for its answer): %s", id, out)
}

// runProgram runs source as sub through `toolfleet program run` with a dev
// token, and waits for it.
func runProgram(ctx context.Context, t *testing.T, bin, base, sub, source string) {
	t.Helper()
	tok, err := exec.CommandContext(ctx, bin, "dev", "token", "--gateway-jwt-secret", devSecret, "--sub", sub).Output()
	if err != nil {
		t.Fatalf("dev token: %v", err)
	}
	file := filepath.Join(t.TempDir(), "sum.star")
	if err := os.WriteFile(file, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "program", "run", file, "--tool", "Calculator.*",
		"--gateway", strings.TrimPrefix(base, "http://"), "--token", strings.TrimSpace(string(tok)))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("program run: %v\n%s", err, out)
	}
}
