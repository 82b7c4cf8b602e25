# rollout: two commands set everything up: `make run` and `make test`.
GO       ?= go
BIN      := bin/rollout
OUT      ?= out/demo
PKGS     := ./...

.PHONY: all build run test race vet lint fmt bench fuzz clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/rollout

# The main job on the built-in defaults: no API key, no network. The 15 NeMo
# Gym example tasks run against the built-in Go re-implementations of NeMo
# Gym's three example resource servers, over real HTTP on loopback; the model
# is a replay of the model calls NeMo Gym recorded for those tasks
# (data/nemo_gym_examples.rollouts.jsonl), so the rewards can be checked
# against NeMo Gym's.
run: build
	$(BIN) run --input data/nemo_gym_examples.jsonl --out $(OUT) --overwrite \
		--model-url replay:data/nemo_gym_examples.rollouts.jsonl \
		--server example_multi_step=builtin:example_multi_step \
		--server example_session_state_mgmt=builtin:example_session_state_mgmt \
		--server example_single_tool_call=builtin:example_single_tool_call \
		--jsonl-out $(OUT)/nemo_gym_rollouts.jsonl

test: vet
	$(GO) test -race -count=1 $(PKGS)

race: test

vet:
	$(GO) vet $(PKGS)

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

# Go benchmarks of the hot paths; figures go to BENCHMARKS.md by hand for now.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./pkg/...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzChatMessages -fuzztime 30s ./pkg/agent

clean:
	rm -rf bin out
