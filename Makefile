GO ?= go
DATA ?= ./data

.PHONY: build test vet fmt bench-gemm bench-engine run golden

build:
	$(GO) build ./...

# The whole default suite: vet, then every package's tests. Long fuzz, soak
# and benchmark runs live behind their own targets.
test: vet
	$(GO) test -count=1 ./...

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

fmt:
	gofmt -w $$(git ls-files '*.go')

bench-gemm:
	$(GO) test ./kernels/gemm/ -run XXX -bench . -benchtime 2s

# Regenerates the PyTorch golden files (needs Debian's python3-torch and
# python3-numpy; CI only reads the committed files).
golden:
	$(GO) build -o bin/wts ./cmd/wts
	python3 kernels/golden/gen_golden.py --wts bin/wts

# Until the HTTP service lands (issue 3), run generates the default model
# once and samples from it through the engine.
run: build
	@test -f $(DATA)/models/small/config.json || $(GO) run ./cmd/wts model init --preset small --seed 0 --out $(DATA)/models/small
	$(GO) run ./cmd/wts sample --model $(DATA)/models/small --prompt 1,17,42 --n 2 --max-tokens 12 --temperature 0.8 --seed 7

# Engine benchmarks: GEMM beside its peer shapes, then training and decode
# throughput on the small model and on the Qwen3-0.6B shape.
bench-engine:
	bash bench/run_engine.sh
