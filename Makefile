# Switchyard — build, test and tooling. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
TOOLS := $(CURDIR)/.bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BINARIES := gateway pylon engine bench
GOLANGCI_LINT_VERSION := v2.15.0
GOFUMPT_VERSION := v0.9.2
BENCHSTAT_VERSION := v0.0.0-20260908200009-22c9c6c9d4da
DEADCODE_VERSION := v0.52.0
FUZZTIME ?= 20s
BENCHCOUNT ?= 1

.DEFAULT_GOAL := help

.PHONY: help build test openai-client race cover e2e fuzz bench lint deadcode fmt tidy-check tools demo quality overhead chaos soak clean chart-test chart-manifests

help: ## List the targets with a one-line description each.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build the four binaries (gateway, pylon, engine, bench) into bin/.
	@mkdir -p $(BIN)
	@for b in $(BINARIES); do $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$$b ./cmd/$$b || exit 1; done

OPENAI_CLIENT := gateway/testdata/openai-client

test: build openai-client ## go vet, every test with -race and -shuffle=on (fuzz corpora replayed), then the allocation tests without -race, then chart-test.
	$(GO) vet ./...
	$(GO) test -race -shuffle=on -timeout 12m ./...
	$(GO) test -run 'AllocatesNothing|DoNotAllocate' -count=1 ./actors/ ./gateway/ ./gateway/lb/ ./pylon/ ./internal/relay/ ./pylon/stats/
	$(MAKE) --no-print-directory chart-test

# The official openai npm client for the gateway's compatibility test: installed when npm
# is present; without npm the test is skipped, and this says so.
openai-client:
	@if [ -d $(OPENAI_CLIENT)/node_modules/openai ]; then :; \
	elif command -v npm >/dev/null 2>&1; then \
	  npm install --no-package-lock --no-audit --no-fund --prefix $(OPENAI_CLIENT) >/dev/null && echo "installed the openai npm client for TestLoopbackOpenAINodeClient"; \
	else echo "WARNING: npm not found: TestLoopbackOpenAINodeClient (the official openai client against the gateway) will be SKIPPED; apt-get install nodejs npm"; fi

race: test ## Alias of test: -race is always on.

cover: ## Tests with a coverage profile in cover.out and a per-function summary.
	$(GO) test -race -coverprofile=cover.out ./...
	$(GO) tool cover -func=cover.out | tail -1

e2e: build ## Only the loopback end-to-end tests (real binaries on 127.0.0.1).
	$(GO) test -race -run 'Loopback|E2E' -count=1 ./...

fuzz: ## Run every fuzz target for FUZZTIME each (default 20s).
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

bench: ## Go benchmarks (BENCHCOUNT=10 for benchstat input).
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) ./...

lint: $(TOOLS)/golangci-lint ## golangci-lint with .golangci.yml (installs it first if missing), deploy/chartcheck included.
	$(TOOLS)/golangci-lint run --allow-parallel-runners ./...
	cd deploy/chartcheck && $(TOOLS)/golangci-lint run --allow-parallel-runners --config ../../.golangci.yml ./...

deadcode: $(TOOLS)/deadcode ## Fail on functions no binary under cmd/ reaches (test-only helpers belong in _test.go files).
	@out=$$($(TOOLS)/deadcode ./cmd/...) || exit 1; if [ -n "$$out" ]; then echo "$$out"; exit 1; fi

fmt: $(TOOLS)/gofumpt ## Format every Go file with gofumpt.
	$(TOOLS)/gofumpt -w $$(git ls-files '*.go')

tidy-check: ## Fail when go.mod/go.sum are not tidy.
	$(GO) mod tidy -diff

# The Helm chart's checks live in their own module (deploy/chartcheck: Helm and the
# Kubernetes libraries stay out of go.mod). About 10 s warm; the first run downloads
# Helm and the Kubernetes libraries and compiles them (minutes; see docs/deploy.md).
chart-test: ## Render the Helm chart and check it: lint, strict Kubernetes types, Pod Security, references, flags, deploy/*.yaml current.
	cd deploy/chartcheck && $(GO) mod tidy -diff && $(GO) vet ./... && $(GO) test -race -count=1 ./...

chart-manifests: ## Regenerate deploy/gateway.yaml and deploy/engine-with-pylon.yaml from the Helm chart.
	cd deploy/chartcheck && $(GO) test -count=1 -run '^TestPlainManifestsMatchChart$$' . -update

tools: $(TOOLS)/golangci-lint $(TOOLS)/gofumpt $(TOOLS)/benchstat $(TOOLS)/deadcode ## Install pinned golangci-lint, gofumpt, benchstat and deadcode into .bin/.

$(TOOLS)/golangci-lint:
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(TOOLS)/gofumpt:
	GOBIN=$(TOOLS) $(GO) install mvdan.cc/gofumpt@$(GOFUMPT_VERSION)

$(TOOLS)/benchstat:
	GOBIN=$(TOOLS) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

$(TOOLS)/deadcode:
	GOBIN=$(TOOLS) $(GO) install golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION)

demo: build ## Compare five routing setups on a prefix-reuse workload on local mock engines (~100 s); prints the expect checks (make quality fails on a miss).
	./$(BIN)/bench run --scenario bench/scenarios/demo.yaml --out out/demo --no-expect

# The scenarios whose expect sections check routing quality, run one after another at
# QUALITY_TIME_SCALE (1 = the scenarios' own timing: about 10 minutes on the 2-core VM,
# half of it overload-6-backends). Every scenario runs; the target fails at the end if
# any missed a check.
QUALITY_SCENARIOS ?= lb-balance-smoke-2c2p-1s demo lb-balance-prefix-reuse-pulsar-wait-and-widen-slo-4c2p-1s lb-balance-prefix-reuse-4c2p-2s overload-6-backends
QUALITY_TIME_SCALE ?= 1

quality: build ## Routing-quality scenarios checked against their expect sections; fails on a miss (~10 min; QUALITY_SCENARIOS, QUALITY_TIME_SCALE).
	@failed=""; for s in $(QUALITY_SCENARIOS); do \
	  ./$(BIN)/bench run --scenario $$s --time-scale $(QUALITY_TIME_SCALE) --out out/quality/$$(basename $$s .yaml) || failed="$$failed $$s"; \
	done; \
	if [ -n "$$failed" ]; then echo "make quality: missed expect checks (or a failed run) in:$$failed; reports in out/quality/"; exit 1; fi; \
	echo "make quality: every expect check met; reports in out/quality/"

overhead: build ## Latency the pylon and the gateway add vs a bare fasthttp proxy, each component in its own process (~1 min).
	./$(BIN)/bench overhead

chaos: build ## Fault suite on a local 2-backend fleet, checked against budgets (~3 min; CHAOS_FLAGS="--short" for the CI subset, "--out FILE" for markdown).
	./$(BIN)/bench chaos $(CHAOS_FLAGS)

soak: build ## 10 minutes of mixed load with a fault every 30 s: outcome accounting, heap growth, goroutines (SOAK_FLAGS="--duration 2m").
	./$(BIN)/bench soak $(SOAK_FLAGS)

clean: ## Remove bin/, out/ and test artefacts.
	rm -rf $(BIN) out cover.out
