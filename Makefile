GO ?= go
DATA ?= ./data

.PHONY: build test vet fmt lint-openapi check-typescript golden-tokenizer hub-client bench-gemm bench-engine bench-api bench-sample bench-train wts-stamped cuda cuda-bins bench run golden proto soak chaos

build:
	$(GO) build ./...

# The whole default suite: vet, then every package's tests, then the grains'
# and the black-box suites again with every message between actors
# msgpack-encoded as between nodes (WTS_WIRE=1). Long fuzz, soak and
# benchmark runs live behind their own targets.
test: vet lint-openapi check-typescript hub-client
	$(GO) test -count=1 ./...
	$(GO) test -race -count=1 -run 'Concurrency' ./http/
	$(GO) test -race -count=1 ./actors/... ./persistence/
	WTS_WIRE=1 $(GO) test -count=1 ./actors/... ./http/

# vet also type-checks the CUDA engine's Go side (-tags cuda), which needs
# neither nvcc nor a GPU for that.
vet:
	$(GO) vet ./...
	$(GO) vet -tags cuda ./kernels/cuda ./bench/gpubench
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

# Lints the served OpenAPI document with Redocly's CLI (pinned in
# .ci/openapi/package-lock.json; needs node and npm).
lint-openapi:
	mkdir -p build
	$(GO) run ./cmd/wts openapi > build/openapi.json
	cd .ci/openapi && npm ci --no-audit --no-fund --loglevel=error && npx redocly lint --config redocly.yaml ../../build/openapi.json

# Generates TypeScript types from the served OpenAPI document with
# openapi-typescript and type-checks a small client against them
# (.ci/typescript/client.ts: each submission's payload typed by its kind).
check-typescript:
	mkdir -p build
	$(GO) run ./cmd/wts openapi > build/openapi.json
	cd .ci/typescript && npm ci --no-audit --no-fund --loglevel=error && npx openapi-typescript ../../build/openapi.json --default-non-nullable false -o ../../build/wts-api.d.ts && npx tsc -p tsconfig.json

# Regenerates kernels/tokenizer/testdata/golden.json: the ids Hugging
# Face's tokenizers.js (pinned in kernels/tokenizer/golden) gives the
# generated small preset's tokenizer (CI only reads the committed file).
golden-tokenizer:
	mkdir -p build
	$(GO) run ./cmd/wts model init --preset small --out build/tokenizer-small > /dev/null
	cd kernels/tokenizer/golden && npm ci --no-audit --no-fund --loglevel=error && node gen.mjs ../../../build/tokenizer-small/tokenizer.json ../testdata/texts.json > ../testdata/golden.json

# Installs the official Hugging Face Hub client (pinned in
# .ci/hub/package-lock.json) that the hub export test drives.
hub-client:
	cd .ci/hub && npm ci --no-audit --no-fund --loglevel=error

fmt:
	gofmt -w $$(git ls-files '*.go')

bench-gemm:
	$(GO) test ./kernels/gemm/ -run XXX -bench . -benchtime 2s

# Regenerates the PyTorch golden files (needs Debian's python3-torch and
# python3-numpy; CI only reads the committed files).
golden:
	$(GO) build -o bin/wts ./cmd/wts
	python3 kernels/golden/gen_golden.py --wts bin/wts

# Runs the service on 127.0.0.1:8080 with the embedded default: data in
# $(DATA), the small generated model, and a test key printed on first start.
run: build
	$(GO) run ./cmd/wts serve --data $(DATA)

# Regenerates actors/wire/wire.pb.go (needs protoc and protoc-gen-go).
proto:
	cd actors/wire && protoc --go_out=. --go_opt=paths=source_relative wire.proto

# bin/wts stamped with its commit, which the benchmarks' reports name;
# built once for all the benchmarks one make runs.
wts-stamped:
	GOFLAGS=-buildvcs=true $(GO) build -o bin/wts ./cmd/wts

# API benchmark: durable submissions/s and submit latency p50/p99 at 1, 16
# and 64 clients against a real `wts serve`, beside a bare fasthttp handler
# measured in the same run.
bench-api: wts-stamped
	mkdir -p build/bench
	GOFLAGS=-buildvcs=true $(GO) run ./bench/apibench --wts bin/wts --json build/bench/api.json

# The sampling benchmark (`wts bench sample`, bench/README.md) on a node of
# its own serving the small model: a closed loop at 1, 4 and 16 clients, an
# open loop of Poisson arrivals over 8 adapters, and N adapters on one base
# at once (one client each). Each writes results.json, results.md and its
# plots under build/bench/.
bench-sample: wts-stamped
	bin/wts bench sample --levels 1,4,16 --out build/bench/sample-closed
	bin/wts bench sample --loop open --adapters 8 --levels 0.5,1,2 --prompt 8-64 --output 16-48 --out build/bench/sample-open
	bin/wts bench sample --levels 1,8,64 --output 16 --out build/bench/sample-adapters

# The training loop through the API beside the engine alone (`wts bench
# train`) on the small model.
bench-train: wts-stamped
	bin/wts bench train --out build/bench/train

# Every benchmark that reports figures, from a clean build/bench, one after
# another, then one table of them all with every peer and the ratios
# (build/bench/summary.md; bench/README.md holds the latest).
bench:
	rm -rf build/bench
	$(MAKE) bench-engine bench-sample bench-train bench-api
	bin/wts bench summary --dir build/bench

# Soak: 10 minutes of mixed load from three organizations against a node
# that is killed (kill -9) or stopped (SIGTERM) at random and restarted;
# prints acknowledged, lost, duplicated, runs interrupted, 429s, p99 latency
# and peak RSS against the memory budget, and fails on any loss,
# duplicate, internal error or a peak past the budget.
soak: build
	$(GO) build -o bin/wts ./cmd/wts
	$(GO) run ./bench/soak --wts bin/wts

# Chaos: the soak against a cluster of three nodes on one data folder: at
# each event one node is killed or stopped and restarted, or a new node
# joins; the same report and the same failures (docs/cluster.md).
chaos: build
	$(GO) build -o bin/wts ./cmd/wts
	$(GO) run ./bench/soak --wts bin/wts --nodes 3 --joins 2 --duration 5m --min-gap 5s --max-gap 15s --preset tiny --data ./build/chaos

# The CUDA decode engine (kernels/cuda): nvcc (Debian's nvidia-cuda-toolkit,
# from the non-free component) compiles csrc/ into a static library for
# Ampere and Hopper, which `go build -tags cuda` links with the static CUDA
# runtime; the binaries then need only the GPU machine's driver.
NVCC ?= nvcc
NVCCFLAGS ?= -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
cuda: build/cuda/libwtscuda.a

build/cuda/libwtscuda.a: kernels/cuda/csrc/wts_cuda.cu kernels/cuda/csrc/wts_cuda.h
	mkdir -p build/cuda
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -c kernels/cuda/csrc/wts_cuda.cu -o build/cuda/wts_cuda.o
	ar rcs $@ build/cuda/wts_cuda.o

# What runs on the GPU machine (bench/run_gpu.sh), built here: the CUDA
# tests and the device benchmark, in bin/.
cuda-bins: cuda
	$(GO) test -c -tags cuda -o bin/cuda.test ./kernels/cuda
	GOFLAGS=-buildvcs=true $(GO) build -tags cuda -o bin/gpubench ./bench/gpubench

# Engine benchmarks: GEMM beside OpenBLAS, then training (beside PyTorch)
# and decode (beside llama.cpp on the same weights) on the small model and
# on the Qwen3-0.6B shape.
bench-engine:
	bash bench/run_engine.sh
