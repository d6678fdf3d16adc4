# toolfleet build entry points. `make test` is what CI runs (.ci/run) and what the
# README tells a new developer to run; it installs every tool it needs from the Go
# module proxy (pinned in tools/go.mod), so a clean clone needs only Go and make.

export GOTOOLCHAIN := local
GO      ?= go
BIN     := $(CURDIR)/build/bin
BUF     := $(BIN)/buf
PLUGINS := $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-connect-go
PROTOVALIDATE := build/protovalidate/buf/validate/validate.proto

.PHONY: all install check generate python-worker-descriptors tools lint vet fmt-check check-generated breaking test test-go test-k8s test-browser test-oauth dev bench reliability fuzz kind-up kind-test

all: test

## install: put a slim, stripped `toolfleet` on PATH (into GOBIN, default ~/go/bin): built
## against a copy of the Temporal server without the S3/GCS archivers and auto-scaled
## workers dev never runs (tools/slimtemporal writes it into build/slim), and -s -w drops
## the symbol table and DWARF: 179 MB instead of 351 MB (docs/performance.md).
install:
	@echo "==> a Temporal server copy without what dev never runs (tools/slimtemporal, build/slim)"
	cd tools && $(GO) run ./slimtemporal -root .. -out ../build/slim
	@echo "==> go install ./cmd/toolfleet (the first time compiles that copy too: minutes)"
	$(GO) install -modfile build/slim/go.mod -ldflags="-s -w" ./cmd/toolfleet

## tools: build buf and the protoc plugins pinned in tools/go.mod into build/bin.
tools: $(BUF) $(PLUGINS)

$(BUF) $(PLUGINS) &: tools/go.mod tools/go.sum
	@echo "==> build buf and the protoc plugins (tools/go.mod)"
	@mkdir -p $(BIN)
	cd tools && $(GO) build -o $(BIN)/ github.com/bufbuild/buf/cmd/buf \
		google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc \
		connectrpc.com/connect/cmd/protoc-gen-connect-go

# The buf/validate contract, printed from the protovalidate Go module (no registry needed).
$(PROTOVALIDATE): tools/go.mod tools/go.sum tools/protodump/main.go
	cd tools && $(GO) run ./protodump -out ../build/protovalidate buf/validate/validate.proto

## generate: regenerate gen/ from proto/.
generate: tools $(PROTOVALIDATE)
	$(BUF) generate proto

## lint: buf lint, gofmt, go vet, and go.mod files that `go mod tidy` would not change.
lint: tools $(PROTOVALIDATE) fmt-check vet
	@echo "==> buf lint, go mod tidy -diff"
	$(BUF) lint proto
	$(GO) mod tidy -diff
	cd tools && $(GO) mod tidy -diff

fmt-check:
	@echo "==> gofmt"
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	if [ -n "$$out" ]; then echo "gofmt needs to run on:"; echo "$$out"; exit 1; fi

# -race makes vet compile dependencies exactly as test-go will, so the (large) Temporal
# server is compiled once per CI run, not twice.
# -v prints each package as it is compiled and vetted: on a cold cache this step
# compiles everything (minutes) and would otherwise print nothing.
vet:
	@echo "==> go vet -race (a line per package; the first run compiles the whole module)"
	$(GO) vet -race -v ./...
	@echo "==> go vet (tools/)"
	cd tools && $(GO) vet ./...

## check-generated: fail when regeneration changes gen/ (someone edited a .proto without `make generate`).
check-generated: generate
	@echo "==> generated code up to date"
	@git add -N gen >/dev/null 2>&1 || true
	@if ! git diff --quiet --exit-code -- gen; then \
		echo "generated code is out of date: run 'make generate' and commit gen/"; \
		git --no-pager diff --stat -- gen; exit 1; fi

## python-worker-descriptors: rewrite examples/python-worker/descriptors.binpb (the Python
## worker's contract) from gen/ after a contract change; test-go fails while it is stale.
python-worker-descriptors:
	$(GO) test -count=1 ./examples/python-worker -run TestDescriptorsUpToDate -update

## breaking: served tool contracts must never change incompatibly (see scripts/breaking.sh).
breaking: tools $(PROTOVALIDATE)
	@echo "==> buf breaking"
	BUF=$(BUF) GO=$(GO) scripts/breaking.sh
	@echo "==> tools/credcheck tests (the credential-widening check breaking.sh runs)"
	cd tools && $(GO) test -count=1 ./credcheck

## test-go: the Go test suite with the race detector.
test-go:
	@echo "==> go test -race (a line per package as it finishes)"
	$(GO) test -race -count=1 ./...
	@echo "==> tools/slimtemporal tests (the Temporal copy make install builds with)"
	cd tools && $(GO) test -count=1 ./slimtemporal

## test-k8s: build every kustomize overlay offline and check it (k8s/check, its own module).
test-k8s:
	@echo "==> k8s/check"
	cd k8s/check && $(GO) mod tidy -diff && $(GO) vet ./... && $(GO) test -race -count=1 ./...

## test-browser: the console in headless Chromium against a real `toolfleet dev` (e2e/browser, its own
## module so chromedp never reaches go.mod); skipped without chromium, a failure then under CI=true.
## SCREENSHOTS=1 rewrites docs/console/*.png.
test-browser:
	@echo "==> e2e/browser (the console in headless Chromium)"
	cd e2e/browser && $(GO) mod tidy -diff && $(GO) vet ./... && \
		$(GO) test -count=1 ./... $(if $(SCREENSHOTS),-update-screenshots)

## test-oauth: the OAuth 2.0 / OpenID Connect tests against a real Ory Hydra (e2e/oauth, its own module;
## Hydra is pinned as a Go tool in e2e/oauth/hydra, a module of its own, and built once with cgo
## for its SQLite driver into the user cache: minutes on a cold cache, see e2e/oauth/README.md).
test-oauth:
	@echo "==> e2e/oauth (Ory Hydra: the OAuth/OIDC harness and the console's OpenID Connect sign-in)"
	cd e2e/oauth/hydra && $(GO) mod tidy -diff
	cd e2e/oauth && $(GO) mod tidy -diff && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 30m ./...

## kind-up: deploy the fleet on the current kube context with `tilt ci` (OVERLAY=kind|kind-ha|kind-hydra).
OVERLAY ?= kind
kind-up:
	TOOLFLEET_OVERLAY=$(OVERLAY) tilt ci

## kind-test: on the current kube context (a kind cluster), bring the fleet up with
## `tilt ci` and prove it as a user, chaos included; prints `cluster checks passed: N/N`
## last. Not part of `make test` (it needs a cluster). KINDTESTFLAGS="-skip-up -only chaos".
kind-test:
	cd e2e/kind && $(GO) run . -overlay $(OVERLAY) -repo ../.. $(KINDTESTFLAGS)

## check: the quick check while working (minutes): gofmt, go vet and go test -short of
## the packages changed since the merge base with main, and of their direct importers
## (scripts/check.sh; BASE=ref, DEPENDENTS=0, CHECKFLAGS=-race).
check:
	GO=$(GO) scripts/check.sh

## test: everything CI checks.
test: lint check-generated breaking test-go test-k8s test-browser test-oauth

## dev: run the whole fleet in one process.
dev:
	$(GO) run ./cmd/toolfleet dev

## reliability: the reliability suite's full form (docs/reliability.md): 10,000 malformed requests, 60 s of load, a 10 s NATS outage, …
reliability:
	TOOLFLEET_RELIABILITY=full $(GO) test -count=1 -timeout 30m -v ./e2e/reliability

## fuzz: run every fuzz target (every func FuzzX in the module) for FUZZTIME each, one after another (FUZZ=regexp for some).
FUZZTIME ?= 1m
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZ='$(FUZZ)' scripts/fuzz.sh

## bench: run every benchmark and rewrite the figures in docs/performance.md (BENCHFLAGS="-only gateway -runs 200").
bench:
	$(GO) run ./bench/report $(BENCHFLAGS)
