# callback-platform: the one entry point. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Tool versions, pinned on purpose.
CONTROLLER_GEN_VERSION ?= v0.23.0
HELM_VERSION           ?= v3.22.0
GOLANGCI_LINT_VERSION  ?= v2.15.0

BIN          := $(CURDIR)/bin
GO           ?= go
GOTEST_FLAGS ?= -count=1 -timeout 30m
FUZZTIME     ?= 10s
# Platforms of each image built by `make images` (one index per image).
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS      := -s -w -X github.com/seed-1cff2221/callback-platform/callbackd/cli.Version=$(VERSION)

CONTROLLER_GEN := $(BIN)/controller-gen
HELM           := $(BIN)/helm
GOLANGCI_LINT  := $(BIN)/golangci-lint

# The fuzz targets run for a bounded time in `make test` (package:target).
FUZZ_TARGETS ?= $(shell grep -rl --include='*_test.go' '^func FuzzParse' callbackd 2>/dev/null | xargs -r -n1 dirname | sort -u)

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-22s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: ## Build callbackd, paysim and the operator into ./bin.
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

.PHONY: generate
generate: controller-gen ## Generate deep-copy code for the API types.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: controller-gen ## Generate the CRDs and RBAC under config/.
	$(CONTROLLER_GEN) rbac:roleName=callback-platform-manager crd paths=./api/... paths=./controllers/... \
	  output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet the tree.
	$(GO) vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint (config: .golangci.yml).
	$(GOLANGCI_LINT) run ./...

##@ Tests

.PHONY: deps
deps: ## Install PostgreSQL and Redis server binaries when missing (Debian, as root).
	hack/deps.sh

.PHONY: k8s-binaries
k8s-binaries: ## Build kube-apiserver and etcd for envtest (cached; ~10 min cold).
	hack/k8s-binaries.sh envtest

.PHONY: k8s-cluster-binaries
k8s-cluster-binaries: ## Build every binary a local kwok cluster needs (cached).
	hack/k8s-binaries.sh cluster

.PHONY: test
test: deps k8s-binaries ## Run every test against real PostgreSQL, Redis Sentinel and kube-apiserver, then the fuzzers briefly.
	export KUBEBUILDER_ASSETS="$$(hack/k8s-binaries.sh envtest | tail -n1)"; \
	  $(GO) vet ./... && \
	  $(GO) test $(GOTEST_FLAGS) -v ./test/smoke/ && \
	  $(GO) test $(GOTEST_FLAGS) $$($(GO) list ./... | grep -v -e '/test/smoke$$' -e '/test/e2e$$' -e '/test/faults')
	$(MAKE) --no-print-directory fuzz
	hack/check-leftovers.sh

.PHONY: smoke
smoke: deps k8s-binaries ## Smoke-test the harnesses (real PostgreSQL, Redis Sentinel, kube-apiserver), verbosely.
	KUBEBUILDER_ASSETS="$$(hack/k8s-binaries.sh envtest | tail -n1)" $(GO) test $(GOTEST_FLAGS) -v ./test/smoke/
	hack/check-leftovers.sh

.PHONY: fuzz
fuzz: ## Run each parser's fuzz target for FUZZTIME (default 10s).
	@for pkg in $(FUZZ_TARGETS); do \
	  echo "fuzz: ./$$pkg FuzzParse for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./$$pkg; \
	done
	@echo "fuzz: ./callbackd/provider/internal/strictjson FuzzCheck for $(FUZZTIME)"
	$(GO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME) ./callbackd/provider/internal/strictjson

.PHONY: e2e
e2e: deps helm ## The whole platform on a local kwok cluster: helm install, the operator, a paysim storm through callbackd (cluster binaries cached; about an hour cold on a loaded 2-core machine).
	export KWOKENV_BIN_DIR="$$(hack/k8s-binaries.sh metrics | tail -n1)"; \
	  $(GO) test -v -count=1 -timeout 30m ./test/e2e/
	hack/check-leftovers.sh

.PHONY: test-faults
test-faults: deps ## Fault-injection suite: Redis failover and split brain, crashes, hostile input; checker and negative controls (minutes).
	$(GO) test -v -count=1 -timeout 40m ./test/faults/...
	hack/check-leftovers.sh

# `make bench` writes docs/; `make bench QUICK=1` (about 1 minute, proves the harness) writes
# bin/bench-quick/ unless BENCH_OUT says otherwise. BENCH_FLAGS passes more flags to callbench.
QUICK     ?=
BENCH_OUT ?= $(if $(QUICK),$(BIN)/bench-quick,docs)

.PHONY: bench
bench: deps ## Benchmarks against the physical limits and the designs from the field (~10 min; QUICK=1 ~1 min): docs/benchmarks.{md,json,png}.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/callbench ./test/bench/cmd/callbench
	$(BIN)/callbench --out $(BENCH_OUT) $(if $(QUICK),--quick) $(BENCH_FLAGS)
	hack/check-leftovers.sh

.PHONY: demo
demo: deps ## Run the platform locally (PostgreSQL, Redis Sentinel, callbackd, a paysim storm) and print the report. DEMO_FLAGS="--orders 50" to shorten.
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/callbackd ./cmd/paysim ./cmd/demo
	$(BIN)/demo --callbackd $(BIN)/callbackd $(DEMO_FLAGS)

##@ Packaging

.PHONY: chart
chart: helm chart-crds ## Lint and package the Helm chart into ./dist.
	$(HELM) lint --strict charts/callback-platform
	$(HELM) package charts/callback-platform --destination dist

.PHONY: images
images: ## Build the callbackd and operator OCI image tarballs into dist/images (no container engine; IMAGE_PLATFORMS=linux/amd64 for one platform).
	$(GO) run ./hack/imagebuild --out dist/images --platforms $(IMAGE_PLATFORMS)

.PHONY: chart-crds
chart-crds: ## Copy the generated CRDs and manager role into the chart (test/chart fails on drift).
	hack/sync-chart-crds.sh

##@ Tools (installed into ./bin at pinned versions)

.PHONY: tools
tools: controller-gen helm golangci-lint ## Install every tool.

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Install controller-gen.
$(CONTROLLER_GEN):
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

.PHONY: helm
helm: $(HELM) ## Install helm.
$(HELM):
	GOBIN=$(BIN) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Install golangci-lint.
$(GOLANGCI_LINT):
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
