GO       ?= go
PKGS     ?= ./...
BIN      ?= bin/bulkaction
TESTFLAGS ?= -race -count=1 -timeout 20m
# Tools built from the Go module proxy at pinned versions.
TOOLS    := $(CURDIR)/.tools/bin
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(TOOLS)/golangci-lint

.PHONY: all build run test test-deployments test-short bench bench-redisq bench-admission bench-e2e bench-gateway bench-demo bench-adaptive bench-cluster lint fmt vet fuzz redis chromium python openapi-tools openapi-lint clean

all: build

## build: compile the bulkaction binary into bin/
build:
	$(GO) build -o $(BIN) ./cmd/bulkaction

## run: start every service in one process with a demo workload
run: build
	$(BIN) dev --demo

## test: the whole suite against real redis-server and embedded NATS, and the deployment checks
test: redis python chromium openapi-tools test-deployments
	$(GO) vet $(PKGS)
	$(GO) test $(TESTFLAGS) $(PKGS)

## test-deployments: Helm chart, compose stack and Dockerfile checked offline (deployments/validate,
# a module of its own so that Helm, Kubernetes and compose-spec stay out of go.mod), and the
# image's healthcheck command (deployments/healthprobe)
test-deployments:
	cd deployments/validate && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd deployments/healthprobe && $(GO) vet ./... && $(GO) test -count=1 ./...

## chaos: the long chaos suite (docs/chaos.md): the real binary as separate processes under
# kill -9, Redis and NATS faults, poison jobs, bad inputs, clock skew, huge backoff queues and a
# Redis rollback, one row per scenario (CHAOS_FLAGS passes -chaos.* flags, e.g. -chaos.only T1,T3)
chaos: redis faketime
	$(GO) test -count=1 -timeout 60m -v -run '^TestChaos$$' ./chaos/ -args -chaos.profile=long $(CHAOS_FLAGS)

## chaos-short: the short chaos profile alone (`make test` runs it too, as part of ./...)
chaos-short: redis
	$(GO) test -count=1 -timeout 15m -v -run '^TestChaos$$' ./chaos/ -args -chaos.profile=short $(CHAOS_FLAGS)

## faketime: make sure faketime is installed for the chaos suite's clock skew scenario
faketime:
	@scripts/ensure-faketime.sh

.PHONY: chaos chaos-short faketime

## redis: make sure redis-server is installed (installs Debian's package if missing)
redis:
	@scripts/ensure-redis.sh

## chromium: make sure a headless Chromium is installed for the dashboard's browser tests (installs Debian's package if missing)
chromium:
	@scripts/ensure-chromium.sh

## python: make sure python3 is installed for the Python example's test (installs Debian's package if missing)
python:
	@scripts/ensure-python.sh

## bench: every benchmark that reports figures
bench: bench-redisq bench-admission bench-e2e bench-gateway bench-demo bench-cluster

## bench-redisq: fair queue throughput, latency and memory (own redis-server), then a backlog of
# 1,000,000 queued jobs with 100-byte payloads against BullMQ's (bench/'s BenchmarkQueuedMemory; the
# BullMQ peer needs Node.js 20+ and npm, as bench-e2e; QUEUED_FLAGS passes -queued.* flags)
bench-redisq: redis
	$(GO) test -run '^$$' -bench '^BenchmarkRedisq' -benchtime 1x -count 1 -timeout 15m ./pkg/redisq/bench/ -args -figures
	cd bench && $(GO) test -run '^$$' -bench BenchmarkQueuedMemory -benchtime 1x -count 1 -timeout 20m . -args $(QUEUED_FLAGS)

## bench-admission: the admission load test, both admission modes
bench-admission: redis
	$(GO) test -run '^$$' -bench '^BenchmarkAdmission$$' -benchtime 1x -count 1 -timeout 30m ./pkg/redisq/bench/ -args -admission

## bench-demo: the full-size demo (`make run`) DEMO_RUNS times (default 3) on miniredis and on redis-server,
# one run at a time: each run's exit status, WARN lines, load average, and makespan beside what its limits
# allow for the admissions it made
bench-demo: build redis
	@BIN=$(BIN) scripts/bench-demo.sh

## bench-gateway: jobs accepted per second through the gateway (NDJSON) vs the Go SDK, and SSE
# delivery delay and memory with many subscribers (GW_FLAGS passes -gw.* flags, e.g. -gw.jobs 100000)
bench-gateway: redis
	cd bench && $(GO) test -run '^$$' -bench BenchmarkGateway -benchtime 1x -count 1 -timeout 30m . -args $(GW_FLAGS)

## bench-adaptive: the adaptive rate per destination against a downstream whose hidden capacity is
# 200/s, 80/s after 20 s and 300/s after 40 s, three equal tenants sending to it and one elsewhere, with
# it off (today), on, and with the best static per-type limit; figures per phase after 5 s of
# convergence, as JSON lines (AD_FLAGS passes -ad.* flags, e.g. -ad.scale 0.2 -ad.modes adaptive)
bench-adaptive: redis
	cd bench && $(GO) test -run '^$$' -bench BenchmarkAdaptive -benchtime 1x -count 1 -timeout 20m . -args $(AD_FLAGS)

## bench-cluster: the pipeline on a Redis Cluster of 3 primaries with 16 shards (REDIS_SHARDS), then the
# same workload on one redis-server: 60 equal tenants over the global limit (3000/s), the busiest primary's
# share of commands, the limit's worst 1 s windows, Jain of the tenants, utilisation and CPU per job against
# one server, as JSON lines (CLUSTER_FLAGS passes -cluster.* flags, e.g. -cluster.seconds 5 -cluster.limit 1000)
bench-cluster: redis
	cd bench && $(GO) test -run '^$$' -bench BenchmarkCluster -benchtime 1x -count 1 -timeout 30m . -args $(CLUSTER_FLAGS)

## bench-e2e: whole pipeline throughput, head-of-line delay, latency, CPU per job and a 1,000,000-job
# run with peak Redis memory vs asynq and BullMQ (bench/ is a module of its own; the BullMQ peer needs
# Node.js 20+ and npm, and installs its pinned packages into bench/bullmq the first time; E2E_FLAGS
# passes -e2e.* flags, e.g. -e2e.only pipeline,bullmq or -e2e.million 0)
bench-e2e: redis
	cd bench && $(GO) test -run '^$$' -bench BenchmarkE2E -benchtime 1x -count 1 -timeout 45m . -args $(E2E_FLAGS)

# The OpenAPI document's tools, from npm at pinned versions, installed once
# into .tools/node (services/gateway's TestOpenAPIGeneratedClients runs them).
SPECTRAL_VERSION := 6.16.3
OPENAPI_TS_VERSION := 7.13.0
TYPESCRIPT_VERSION := 5.9.3
OPENAPI_TOOLS := $(CURDIR)/.tools/node
OPENAPI_TOOLS_STAMP := $(OPENAPI_TOOLS)/.installed-$(SPECTRAL_VERSION)-$(OPENAPI_TS_VERSION)-$(TYPESCRIPT_VERSION)

## openapi-tools: Spectral, openapi-typescript and tsc for the OpenAPI document's test (npm, pinned, into .tools/node)
openapi-tools: $(OPENAPI_TOOLS_STAMP)

$(OPENAPI_TOOLS_STAMP):
	mkdir -p $(OPENAPI_TOOLS)
	cd $(OPENAPI_TOOLS) && npm install --no-audit --no-fund --save-exact \
		@stoplight/spectral-cli@$(SPECTRAL_VERSION) openapi-typescript@$(OPENAPI_TS_VERSION) typescript@$(TYPESCRIPT_VERSION)
	touch $@

## openapi-lint: lint the gateway's OpenAPI document with Spectral and type it with openapi-typescript (api.d.ts into .tools/node)
openapi-lint: openapi-tools
	$(OPENAPI_TOOLS)/node_modules/.bin/spectral lint --ruleset services/gateway/testdata/openapi/spectral.yaml --fail-severity warn services/gateway/openapi.json
	$(OPENAPI_TOOLS)/node_modules/.bin/openapi-typescript services/gateway/openapi.json -o $(OPENAPI_TOOLS)/api.d.ts

## lint: gofmt, go vet and golangci-lint (the boundary rules of .golangci.yml)
lint: $(GOLANGCI_LINT)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)
	$(GOLANGCI_LINT) run $(PKGS)

# golangci-lint, built once into .tools/bin at the pinned version.
$(GOLANGCI_LINT):
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

fmt:
	gofmt -w $$(git ls-files '*.go')

## fuzz: run the message decoders' fuzz targets for a while
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeSubmission -fuzztime 60s ./pkg/contracts/

clean:
	rm -rf bin
