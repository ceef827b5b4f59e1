#!/usr/bin/env bash
# Builds everything the GPU check needs into .gpu/ (git-ignored) on a
# machine with Go and no GPU, for the device machine, which has no Go:
#   bash bench/gpu/build.sh && <device run: bash .gpu/device.sh>   (carry .gpu)
# The binaries are static (CGO_ENABLED=0): CUDA is loaded at run time.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=.gpu
rm -rf "$out"
mkdir -p "$out/bin" "$out/mnist"
export CGO_ENABLED=0
go build -ldflags="-s -w" -o "$out/bin/flowrun" ./cmd/flowrun
go build -ldflags="-s -w" -o "$out/bin/flowsim" ./cmd/flowsim
go test -c -ldflags="-s -w" -o "$out/bin/cuda.test" ./runtime/cuda
go test -c -ldflags="-s -w" -o "$out/bin/kernels.test" ./kernels/cuda
go test -c -ldflags="-s -w" -o "$out/bin/runtime.test" ./runtime
cp bench/gpu/device.sh bench/gpu/summarize.py "$out/"
# PyTorch's side of the comparison, from the shared bench folder when it is
# there (a clone of flowkit alone has its copy in bench/gpu).
if [[ -f ../shared/bench/torch_baseline.py ]]; then
	cp ../shared/bench/torch_baseline.py "$out/"
else
	cp bench/gpu/torch_baseline.py "$out/"
fi
# MNIST, for training on the GPU (the device machine has no network).
mnist=$(go run ./bench/gpu/mnistdir)
cp "$mnist"/*-ubyte* "$out/mnist/"
du -sh "$out"
