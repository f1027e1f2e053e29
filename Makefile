GO ?= go
DATA ?= ./data

.PHONY: build test vet fmt bench bench-gemm run golden

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
