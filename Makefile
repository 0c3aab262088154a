# widget-operator — kubebuilder-style verbs. `make help` lists them.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN ?= $(CURDIR)/bin
export KUBEBUILDER_ASSETS ?= $(BIN)
export PATH := $(BIN):$(PATH)
CONTROLLER_GEN := $(BIN)/controller-gen
TOOL_MODULES := $(wildcard scripts/tools/*/go.mod)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

.PHONY: tools
tools: ## Build the pinned toolchain into bin/ (about 25 minutes cold on 2 cores, seconds warm).
	@MAKE_VERB="make tools" scripts/prereqs.sh unit
	scripts/toolchain.sh

.PHONY: generate
generate: ## Regenerate deepcopy code and the CRD from api/, the dashboards, alert rules and the chart's generated files.
	scripts/toolchain.sh controller-gen
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=internal/crd/bases
	go run ./internal/monitoring/gen
	go run ./internal/chart/gen

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet every module of the repository.
	go vet ./...
	for m in $(dir $(TOOL_MODULES)); do if ls $$m*.go $$m*/*.go >/dev/null 2>&1; then (cd $$m && go vet ./...); fi; done

.PHONY: lint
lint: vet ## golangci-lint (with kube-api-linter on api/), shellcheck on every script.
	@MAKE_VERB="make lint" scripts/prereqs.sh lint
	scripts/toolchain.sh golangci-lint | grep -v 'up to date' || true
	$(BIN)/golangci-lint run ./...
	shellcheck -x --severity=style $$(git ls-files '*.sh' .ci/run)

.PHONY: build
build: ## Build the project's binaries into bin/.
	CGO_ENABLED=0 go build -trimpath -o $(BIN)/ ./cmd/...

IMAGE ?= localhost/widget-operator:dev
IMAGE_TAR ?= $(BIN)/widget-operator-image.tar

.PHONY: image
image: build ## Pack bin/widget-manager and bin/widgetctl into a from-scratch image tarball ($(IMAGE_TAR)).
	@for b in widget-manager widgetctl; do test -x $(BIN)/$$b || { echo "make image: $(BIN)/$$b is missing: 'make build' did not produce it (does cmd/$$b exist yet?)"; exit 1; }; done
	scripts/toolchain.sh mkimage
	$(BIN)/mkimage -o $(IMAGE_TAR) -t $(IMAGE) -entrypoint /widget-manager \
		-label org.opencontainers.image.title=widget-operator \
		-label org.opencontainers.image.source=https://github.com/widgetry/widget-operator \
		-label org.opencontainers.image.revision=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
		$(BIN)/widget-manager:/widget-manager $(BIN)/widgetctl:/widgetctl
	@echo "load it with: ctr -n k8s.io images import $(IMAGE_TAR), docker load -i $(IMAGE_TAR) or kind load image-archive $(IMAGE_TAR)"

# Tier membership is by build tag: no tag is the unit tier (pure Go, no binaries); envtest
# needs the pinned toolchain (kube-apiserver + etcd, Helm, promtool); e2e needs the real node
# (root). The envtest and e2e packages are those with test files carrying the tag.
tagged_packages = $(sort $(foreach f,$(shell grep -rl --include='*_test.go' '^//go:build $(1)' internal cmd api),./$(dir $(f))))
ENVTEST_PKGS ?= $(call tagged_packages,envtest)
E2E_PKGS ?= $(call tagged_packages,e2e)
# The unit tier runs without the race detector in make test: on a fresh machine (CI's) -race
# compiles every dependency a second time, instrumented, about 450 s of a 2-core CI budget for
# the same tests; make test-race runs the tier under it, and make test-long includes that.
# RACE=-race turns it on for the unit and envtest tiers alike.
RACE ?=
UNIT_FLAGS ?= $(RACE) -count=1 -timeout=10m
# The envtest tier runs without the race detector by default too: its tests drive separate
# processes (kube-apiserver, etcd, widget-manager, helm, kubectl), which -race does not
# instrument; -race would cost the tier about a third more time.
ENVTEST_FLAGS ?= $(RACE) -count=1 -timeout=30m
E2E_FLAGS ?= -count=1 -timeout=60m

.PHONY: test
test: ## Run the three tiers in order, each alone, never skipping (SKIP_TIERS="e2e" opts out, loudly).
	scripts/test.sh

.PHONY: test-unit
test-unit: ## Unit tier: pure Go; no toolchain, no root (make test-race: the same under -race).
	@MAKE_VERB="make test-unit" scripts/prereqs.sh unit
	go test $(UNIT_FLAGS) ./...
	@# Built only without -race (//go:build !race), so under RACE=-race they run here: the
	@# memory tests measure the heap, which the race detector changes (memory_test.go); the
	@# schema round trips run the apiserver's CEL validators over 10,000 objects, minutes under
	@# the detector, for no concurrency of their own (conversion_schema_test.go, schemagen's test).
	$(if $(RACE),go test -count=1 -run '^(TestMemory|TestRoundTripOverTheSchemas|TestDrawsWhatTheAPIServerAdmits)' ./internal/webhook/ ./internal/conversion/conversiontest/schemagen/)

.PHONY: test-race
test-race: ## The unit tier under the race detector (part of make test-long).
	@$(MAKE) --no-print-directory test-unit RACE=-race

.PHONY: test-envtest
test-envtest: ## Envtest tier: real kube-apiserver + etcd (and kube-controller-manager), Helm, promtool.
	@MAKE_VERB="make test-envtest" scripts/prereqs.sh envtest
	scripts/toolchain.sh | grep -v 'up to date' || true
	$(MAKE) --no-print-directory build
	go test -tags envtest $(ENVTEST_FLAGS) $(ENVTEST_PKGS)

.PHONY: test-e2e
test-e2e: ## End-to-end tier (root): the real node, cert-manager, Prometheus, the chart walks, the production proof.
	@MAKE_VERB="make test-e2e" scripts/prereqs.sh e2e
	scripts/toolchain.sh | grep -v 'up to date' || true
	$(MAKE) --no-print-directory image
	go test -tags e2e -p 1 $(E2E_FLAGS) $(E2E_PKGS)

.PHONY: test-conversion
test-conversion: ## Conversion round-trip fuzzing (10,000 objects each way, typed and drawn from the CRD schemas through the handler), a minute of go test -fuzz on conversion and one on the CRD's image rule.
	go test -count=1 -run 'RoundTrip' -v ./internal/conversion/ ./internal/webhook/
	go test -run '^$$' -fuzz FuzzConvertReview -fuzztime 60s ./internal/webhook/
	go test -run '^$$' -fuzz FuzzCRDImageRule -fuzztime 60s ./internal/webhook/

.PHONY: test-long
test-long: tools test-race ## Long runs: the unit tier under -race, the production proof on three nodes with a drained and a lost node five times, million-object round trips, the same fuzzing for 5 minutes, crash-resumed migrations, LISTs of 100,000 Widgets, the controller taking over 100,000.
	@# A million objects each way, typed and drawn from the schemas.
	WIDGET_ROUNDTRIP_ITERATIONS=1000000 go test -count=1 -timeout=4h -run 'RoundTrip' ./internal/conversion/ ./internal/webhook/
	go test -run '^$$' -fuzz FuzzConvertReview -fuzztime 5m ./internal/webhook/
	go test -run '^$$' -fuzz FuzzCRDImageRule -fuzztime 5m ./internal/webhook/
	WIDGET_MIGRATE_CRASH_OBJECTS=10000 WIDGET_MIGRATE_KILLS=5 go test -tags envtest -count=1 -timeout=60m -run 'TestCrashAndResume' -v ./internal/migrate/ | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|crash_test'
	@# What the apiserver sends the conversion webhook, and what a LIST costs, at 100,000 Widgets
	@# (published by make reports as the README's bench-list-100k block).
	@mkdir -p $(BIN)/reports
	WIDGET_BENCH_WIDGETS=100000 go test -tags envtest -run '^$$' -bench BenchmarkListThroughConversion -benchtime 1x -count 1 -timeout 3h ./internal/webhook/ | $(BENCH_FILTER) | tee $(BIN)/reports/$(LIST_BENCH_100K)
	@# The controller plane taking over 100,000 Widgets with their children: its memory, time and
	@# writes (published by make reports as the README's bench-restart block, beside 10,000).
	@# Creating the fleet is most of it, hours on 2 cores: the apiserver, holding 100,000 Widgets
	@# and their children, bounds how fast the controller reconciles new ones.
	WIDGET_BENCH_WIDGETS=100000 WIDGET_BENCH_RECONCILE_MINUTES=360 go test -tags envtest -run '^$$' -bench BenchmarkControllerRestartAtScale -benchtime 1x -count 1 -timeout 8h ./internal/manager/ | $(BENCH_FILTER) | tee $(BIN)/reports/bench-restart-100k.txt
	@# The production proof on three nodes with its node steps: a node drained and one lost,
	@# five times over, under its load (root; make test-e2e runs the proof on one node, without
	@# them: internal/e2e/proof_nodes_test.go says why). Its report goes to bin/reports/nodes.
	@MAKE_VERB="make test-long" scripts/prereqs.sh e2e
	$(MAKE) --no-print-directory image
	WIDGET_PROOF_NODES=3 WIDGET_PROOF_NODE_ROUNDS=5 WIDGET_REPORTS_DIR=$(BIN)/reports/nodes go test -tags e2e -count=1 -timeout=2h -run 'TestProductionProof$$' -v ./internal/e2e/ | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|production_proof_test|proof_nodes_test|^        '

# -cpu of the conversion benchmark: 1 (the algorithm alone) and every core (the handler also
# splits a large review over them), so that the two gains are reported apart.
BENCH_CPUS ?= $(shell n=$$(nproc); if [ "$$n" -gt 1 ]; then echo "1,$$n"; else echo 1; fi)
BENCH_FILTER := grep -E '^(Benchmark|ok|FAIL|---)'
LIST_BENCH_100K := bench-list-100k.txt

.PHONY: bench
bench: tools ## Benchmarks, benchstat-friendly, with ratios and targets (long: 10,000-Widget envtest runs); see README "Benchmarks".
	mkdir -p $(BIN)/reports
	go test -run '^$$' -bench . -benchmem -cpu $(BENCH_CPUS) -count 6 ./internal/webhook/ | tee $(BIN)/bench.txt $(BIN)/reports/bench-conversion.txt
	scripts/bench-ratios.sh $(BIN)/bench.txt
	go test -tags envtest -run '^$$' -bench BenchmarkListThroughConversion -benchtime 3x -count 6 -timeout 60m ./internal/webhook/ | tee $(BIN)/bench-list.txt $(BIN)/reports/bench-list.txt | $(BENCH_FILTER)
	scripts/bench-ratios.sh $(BIN)/bench-list.txt
	go test -tags envtest -run '^$$' -bench BenchmarkManagerAtScale -benchtime 1x -count 1 -timeout 90m ./internal/manager/ | tee $(BIN)/bench-manager.txt $(BIN)/reports/bench-manager.txt | $(BENCH_FILTER)
	scripts/bench-ratios.sh $(BIN)/bench-manager.txt
	go test -tags envtest -run '^$$' -bench BenchmarkControllerRestartAtScale -benchtime 1x -count 1 -timeout 90m ./internal/manager/ | $(BENCH_FILTER) | tee $(BIN)/reports/bench-restart.txt
	go test -tags envtest -run '^$$' -bench BenchmarkReencode -benchtime 1x -count 3 -timeout 180m ./internal/migrate/ | tee $(BIN)/bench-migrate.txt $(BIN)/reports/bench-migrate.txt | $(BENCH_FILTER)
	scripts/migrate-bench-ratios.sh $(BIN)/bench-migrate.txt

.PHONY: reports
reports: ## Publish the last runs' reports (bin/reports) into internal/reports/data and render the READMEs' generated blocks from them.
	go run ./internal/reports/gen

.PHONY: verify
verify: generate ## Fail if generated files or go mod tidy would change the tree.
	go mod tidy
	for m in $(dir $(TOOL_MODULES)); do (cd $$m && go mod tidy); done
	@git diff --exit-code -- . || { echo "make verify: the tree changed; run 'make generate' and 'go mod tidy' and commit"; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- api internal go.mod go.sum scripts dashboards charts runbooks)" || { git status --porcelain; echo "make verify: untracked generated files"; exit 1; }

.PHONY: demo
demo: ## Check the machine (installing Debian packages as root), build what is missing, run the demo.
	@MAKE_VERB="make demo" scripts/prereqs.sh demo
	scripts/demo.sh
