# rollout: two commands set everything up: `make run` and `make test`.
GO       ?= go
BIN      := bin/rollout
PKGS     := ./...

.PHONY: all build install static run context replay data oracle test test-short arrowcheck race vet lint fmt bench bench-quick bench-tools bench-fleet bench-fleet-real bench-hugeline fuzz soak interop scale-demo k8s-check screenshots clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/rollout

# rollout on the PATH: $(go env GOBIN), else $(go env GOPATH)/bin.
install:
	$(GO) install ./cmd/rollout

# One static binary (no cgo, no libc): copy bin/rollout to any Linux machine of the same arch.
static:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/rollout

# The main job on the built-in defaults: no API key, no network. The
# extraction tasks (240; arms single and multi) and the workflow tasks (60;
# arms single, multi and workflow) run at the same time, each against its
# built-in resource server and the built-in model simulator with the
# "realistic" error profile (latency, wrong arguments, skipped steps, 429s,
# 500s), over real HTTP on loopback. Results go to out/extraction and
# out/workflow; the summaries, statistics and comparisons are printed at the end.
SIM_FLAGS ?= --model-url builtin:sim --sim-profile realistic --sim-seed 1
run: build
	@mkdir -p out
	@echo "rollout: running data/extraction.jsonl (arms single, multi) and data/workflow.jsonl (arms single, multi, workflow) against the simulator ..." >&2
	@$(BIN) run --input data/extraction.jsonl --out out/extraction --overwrite --quiet --arms single,multi \
		$(SIM_FLAGS) --server builtin:extraction > out/extraction.txt & ext=$$!; \
	$(BIN) run --input data/workflow.jsonl --out out/workflow --overwrite --quiet --arms single,multi,workflow \
		--steps data/workflow.steps.json $(SIM_FLAGS) --server builtin:workflow > out/workflow.txt & wf=$$!; \
	status=0; wait $$ext || status=$$?; wait $$wf || status=$$?; \
	echo "== extraction: data/extraction.jsonl -> out/extraction"; cat out/extraction.txt; echo; \
	echo "== workflow: data/workflow.jsonl -> out/workflow"; cat out/workflow.txt; echo; \
	[ $$status -eq 0 ] || exit $$status; \
	echo "== single-step vs multi-step on the extraction tasks"; $(BIN) compare out/extraction --arms single,multi; echo; \
	echo "== multi-step vs workflow on the workflow tasks"; $(BIN) compare out/workflow --arms multi,workflow; echo; \
	echo "== see them in a browser (local, offline; Ctrl-C stops it):"; echo "  $(BIN) view out/extraction out/workflow"

# Context strategies as arms: the extraction tasks with full, window:2, budget:600 and briefing
# context, and full with --degrade, on the same tasks and seeds (data/context.yaml), against
# the simulator with its context model (a 900-token context, more wrong arguments with longer
# prompts and older values: a model of a model, not evidence about one); then each arm against
# full: the reward difference with its CI, tokens and latency. Results go to out/context.
context: build
	@mkdir -p out
	@echo "rollout: running data/extraction.jsonl with arms full, window:2, budget:600, briefing, full+degrade against the simulator ..." >&2
	@$(BIN) run --config data/context.yaml --overwrite --quiet > out/context.txt; status=$$?; cat out/context.txt; [ $$status -eq 0 ] || exit $$status
	@for arm in window:2 budget:600 briefing full+degrade; do echo; echo "== $$arm vs full"; $(BIN) compare out/context --arms full,$$arm || exit $$?; done

# NeMo Gym compatibility: the 15 NeMo Gym example tasks against the built-in
# Go re-implementations of NeMo Gym's three example resource servers, with the
# model calls NeMo Gym recorded replayed (data/nemo_gym_examples.rollouts.jsonl),
# so the rewards can be checked against NeMo Gym's.
replay: build
	$(BIN) run --input data/nemo_gym_examples.jsonl --out out/nemo_gym --overwrite \
		--model-url replay:data/nemo_gym_examples.rollouts.jsonl \
		--server example_multi_step=builtin:example_multi_step \
		--server example_session_state_mgmt=builtin:example_session_state_mgmt \
		--server example_single_tool_call=builtin:example_single_tool_call \
		--jsonl-out out/nemo_gym/nemo_gym_rollouts.jsonl

# The task files of the built-in servers are generated, deterministically;
# `make data` rewrites them (a test checks they match the generators).
data: build
	$(BIN) gen extraction --seed 1 -o data/extraction.jsonl
	$(BIN) gen workflow --seed 1 -o data/workflow.jsonl

# Proves every task's reference plan: reward 1, and < 1 without any required call.
oracle: build
	$(BIN) validate data/extraction.jsonl --oracle --server builtin:extraction
	$(BIN) validate data/workflow.jsonl --oracle --server builtin:workflow

test: vet
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

# The fast loop: every package's tests in -short mode, without the race detector, and with
# nothing installed but Go: the Redis tests skip (ROLLOUT_SKIP_REDIS=1), and so do, saying so,
# the browser tests (no Chromium), the DuckDB reads (no @duckdb/node-api), the Python checks
# (no jinja2, fastapi) and the llama-server suite; CI= keeps them skips. Unchanged packages'
# results come from Go's test cache. What it leaves out: CONTRIBUTING.md.
test-short:
	CI= ROLLOUT_SKIP_REDIS=1 $(GO) test -short -timeout 30m $(PKGS)

# The Parquet files read by an independent reader, apache/arrow-go: built only with this tag,
# since arrow-go brings ~100 MB of modules (grpc, thrift, flatbuffers) that `make test` need not
# download. CI runs it.
arrowcheck:
	$(GO) test -race -count=1 -tags arrowcheck -run 'Arrow|ParallelPages' ./pkg/record/ ./pkg/export/

race: test

vet:
	$(GO) vet $(PKGS)

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

# The benchmark suite (BENCHMARKS.md): Go benchmarks of the hot paths, the simulator's HTTP
# ceiling (wrk, else hey), and load runs of bin/rollout against `rollout sim` and
# `rollout serve counter` in their own processes, up to 10^6 tasks. It prints the figures and
# rewrites the generated part of BENCHMARKS.md. About 15 minutes on 2 cores; BENCH_SCALE=0.01
# (make bench-quick) is a look in a minute, without touching BENCHMARKS.md.
BENCH_SCALE ?= 1
bench: build bench-tools bench-fleet
	$(GO) run ./cmd/rollout-bench --bin $(BIN) --dir out/bench --scale $(BENCH_SCALE) --md BENCHMARKS.md

bench-quick: build bench-tools
	$(GO) run ./cmd/rollout-bench --bin $(BIN) --dir out/bench --scale 0.01 --phases ceiling,floor,load,zero,rounds,size,inflight,million

# The fleet table (BENCHMARKS.md "Fleet: routing and adaptive concurrency"): the extraction
# tasks against 4 simulated inference servers (a model of vLLM, not a measurement), every
# route at fixed concurrencies and auto. Scaled down for a small machine: 40 tasks x 8 repeats,
# batches of 16 sequences, model time 2x the clock; about 2 minutes on 2 cores.
FLEET_FLAGS ?= -limit 40 -repeats 8 -speed 2 -max-num-seqs 16
bench-fleet:
	@mkdir -p out/bench
	$(GO) run ./cmd/rollout-bench fleet $(FLEET_FLAGS) | tee out/bench/fleet.md

# Peak RSS of show, report --html, export and a view request on a run whose one trajectory line
# is 210 MB, then the compaction of a --resume (BENCHMARKS.md "One huge trajectory line"); about
# a minute on 2 cores.
bench-hugeline: build
	bench/hugeline.sh $(BIN) 210

# A load generator for the simulator's ceiling: wrk from Debian when we may install it, else hey.
bench-tools:
	@command -v wrk >/dev/null 2>&1 || command -v hey >/dev/null 2>&1 || test -x "$$($(GO) env GOPATH)/bin/hey" || \
	  { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      apt-get install -y wrk >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }; \
	    else $(GO) install github.com/rakyll/hey@latest; fi; }

# Each fuzz target for FUZZTIME (their seed corpora run in `make test` too).
FUZZTIME ?= 30s
fuzz:
	@for dir in $$(grep -rl '^func Fuzz' --include='*_test.go' pkg internal | xargs -n1 dirname | sort -u); do \
		for t in $$(grep -h '^func Fuzz' $$dir/*_test.go | sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/'); do \
			echo "== $$t (./$$dir)"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./$$dir || exit 1; \
		done; \
	done

# 10,000 rollouts through the simulator (10% 429, 5% 500, 2% resets, 1% hangs) and a resource
# server failing 5% of calls, each its own process: every rollout must end in exactly one record
# (a reward or a typed failure). Then the mixed case (TestSoakMixed): two writers of one --out
# (the second refused), a Redis restart mid-run, a model echoing the API key into every field:
# 0 lost, 0 duplicated, 0 leaked. 300-rollout versions of both run in `make test`. See RELIABILITY.md.
soak:
	ROLLOUT_SOAK_ROLLOUTS=10000 $(GO) test -run TestSoak -v -count=1 -timeout 30m ./test/soak

# rollout against a real inference server: llama.cpp's llama-server, built from the llama.cpp
# source in the npm package node-llama-cpp (pinned) with cmake and g++ (about 10 minutes on 2
# cores, once: the binary is cached in $(INTEROP_CACHE)), with tiny generated Qwen2 models.
# See docs/interop.md. Without its prerequisites it says so and skips, but
# under CI=true it fails.
INTEROP_CACHE ?= $(HOME)/.cache/rollout-interop
interop:
	@for tool in cmake c++ npm git /usr/bin/python3; do \
	  command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; \
	done; \
	/usr/bin/python3 -c 'import numpy, yaml' >/dev/null 2>&1 || missing="$$missing python3-numpy python3-yaml"; \
	if [ -n "$$missing" ]; then \
	  echo "================================================================" >&2; \
	  echo "make interop: NOT RUN: missing$$missing" >&2; \
	  echo "  (Debian: apt-get install -y cmake g++ git npm python3-numpy python3-yaml)" >&2; \
	  echo "================================================================" >&2; \
	  [ "$$CI" != true ] || exit 1; exit 0; \
	fi; \
	dir=$$(ROLLOUT_INTEROP_CACHE=$(INTEROP_CACHE) test/interop/build-llama-server.sh) || exit 1; \
	echo "make interop: llama-server from $$dir ($$(cat $$dir/VERSION))" >&2; \
	ROLLOUT_INTEROP_DIR=$$dir $(GO) test -count=1 -v -timeout 30m ./test/interop

# Fleet routing against real prefix caches (BENCHMARKS.md, docs/tiny-agent.md): three
# llama-server replicas of the tiny agent (test/interop/testdata/tiny-agent) behind rollout's
# pool, routes x slots a server (1, 2, 4) x concurrency (3, 6, 12) on 12 held-out extraction
# tasks (short context), the same tasks with a 600-word note of their own (long context: the
# rollouts run 6 rounds whatever their calls return), and the short ones without the host
# prompt cache; counted by the servers' own /metrics, each case beside what the serving
# simulator predicts for it (its llama-server slot cache and its vLLM block cache, the mean of 5
# runs each). Each row is appended to out/bench/fleet-real.md.rows as it comes, the table goes to
# out/bench/fleet-real.md. FLEET_REAL_CASES=REGEXP runs the cases whose name matches (e.g.
# short/affinity/). Needs what `make interop` needs; 39 cases of about 2 minutes each on 2
# lightly loaded cores (the long ones take longer).
FLEET_REAL_CASES ?=
bench-fleet-real:
	@mkdir -p out/bench
	@dir=$$(ROLLOUT_INTEROP_CACHE=$(INTEROP_CACHE) test/interop/build-llama-server.sh) || exit 1; \
	ROLLOUT_INTEROP_DIR=$$dir ROLLOUT_FLEET_REAL=1 ROLLOUT_FLEET_REAL_OUT=$(CURDIR)/out/bench/fleet-real.md \
	ROLLOUT_FLEET_REAL_CASES='$(FLEET_REAL_CASES)' $(GO) test -count=1 -v -timeout 180m -run '^TestFleetRoutingRealGrid$$' ./test/interop

# On one machine, what deploy/kubernetes/ does on a cluster: 2 `rollout serve extraction`
# processes sharing their sessions in a real redis-server (behind a round-robin proxy, as a
# Service), the simulator, 4 `rollout run --shard I/4` processes at once, one killed with -9
# mid-run and started again with the same command (--resume=auto), `rollout merge`; the merge
# is checked against the same job run as one process (about 20 s on 2 cores); then a straggler
# (one of 4 processes at a quarter of the others' concurrency) under the static split and under
# --shard claim/16, both wall times printed (about 40 s). See docs/kubernetes.md.
scale-demo:
	ROLLOUT_SCALE_DEMO=1 $(GO) test -run '^TestScaleDemo' -v -count=1 -timeout 5m ./cmd/rollout

# deploy/kubernetes against a real kube-apiserver (with an embedded etcd) and the real Job
# controller, both of k8s.io/kubernetes as internal/k8scheck/go.mod pins it: the kustomize
# output, as applied and with the optional parts, created with dryRun=All and strict field
# validation (kubectl apply --dry-run=server); any refusal or warning fails. Then the shards'
# Job run by the Job controller with the pods' exits set by hand, and merge.sh with a real
# kubectl: exit 5 retried, exit 4 fails its index, the merge after Complete and after Failed.
# internal/k8scheck/build.sh builds the check once (about 12 minutes of CPU) into
# $(K8S_CACHE); without that build it says so and skips, unless K8S_BUILD=1 or CI=true,
# which build it. See docs/kubernetes.md.
K8S_CACHE ?= $(HOME)/.cache/rollout-k8s
k8s-check:
	@if [ "$(K8S_BUILD)" != 1 ] && [ "$$CI" != true ] && \
	   ! ROLLOUT_K8S_CACHE=$(K8S_CACHE) internal/k8scheck/build.sh --cached >/dev/null; then \
	  echo "================================================================" >&2; \
	  echo "make k8s-check: NOT RUN: the check is not built in $(K8S_CACHE)" >&2; \
	  echo "  (K8S_BUILD=1 make k8s-check builds it: about 12 minutes of CPU, once)" >&2; \
	  echo "================================================================" >&2; \
	  exit 0; \
	fi; \
	dir=$$(ROLLOUT_K8S_CACHE=$(K8S_CACHE) internal/k8scheck/build.sh) || exit 1; \
	echo "make k8s-check: $$(cat $$dir/VERSION) from $$dir" >&2; \
	$$dir/k8scheck.test -test.v -test.count=1 -test.timeout 15m -deploy $(CURDIR)/deploy/kubernetes

# The screenshots of rollout view in docs/statistics.md (docs/img/view-*.png), taken by the browser tests
# (headless Chromium) from make run's output. The test binary runs from here, so that the pages
# name the runs as a reader would type them (out/extraction), not by this checkout's path.
screenshots: run
	$(GO) test -c -o bin/view.test ./pkg/view
	bin/view.test -test.count=1 -test.run TestScreenshots -screenshots docs/img \
		-screenshot-runs out/extraction,out/workflow

clean:
	rm -rf bin out
