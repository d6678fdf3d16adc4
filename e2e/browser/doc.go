// Package browser tests the run console (docs/console.md) the way a person
// uses it: headless Chromium, driven with chromedp, against a real
// `toolfleet dev` built from this repository. It is its own Go module so
// that chromedp never reaches the fleet's go.mod or its binaries; `make
// test` runs it (make test-browser). Without a chromium on PATH (Debian's
// chromium package) the test is skipped, except under CI=true, where that
// is a failure (.ci/run installs it).
//
// go test -run TestConsoleInBrowser -update-screenshots rewrites the
// screenshots in docs/console/.
package browser
