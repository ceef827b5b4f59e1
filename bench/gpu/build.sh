#!/usr/bin/env bash
# Builds everything the GPU check needs into .gpu/ (git-ignored) on a
# machine with Go and no GPU, for the device machine, which has no Go:
#   bash bench/gpu/build.sh && <device run: bash .gpu/device.sh>   (carry .gpu)
# The binaries are static (CGO_ENABLED=0): CUDA is loaded at run time.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=.gpu
rm -rf "$out"
mkdir -p "$out/mnist" "$out/plans" "$out/extra"
export CGO_ENABLED=0
# The binaries travel gzipped (46 MB as built, 18 MB packed; the carry is
# limited to 64 MiB): device.sh unpacks them into its scratch folder.
stage=$(mktemp -d)
mkdir "$stage/bin"
go build -ldflags="-s -w" -o "$stage/bin/flowrun" ./cmd/flowrun
go test -c -ldflags="-s -w" -o "$stage/bin/cuda.test" ./runtime/cuda
go test -c -ldflags="-s -w" -o "$stage/bin/kernels.test" ./kernels/cuda
go test -c -ldflags="-s -w" -o "$stage/bin/runtime.test" ./runtime
tar -C "$stage" -czf "$out/bin.tar.gz" bin
rm -r "$stage"
cp bench/gpu/device.sh bench/gpu/summarize.py "$out/"
# PyTorch's side of the comparison, from the shared bench folder when it is
# there (a clone of flowkit alone has its copy in bench/gpu).
if [[ -f ../shared/bench/torch_baseline.py ]]; then
	cp ../shared/bench/torch_baseline.py "$out/"
else
	cp bench/gpu/torch_baseline.py "$out/"
fi
# The plans the device runs, compiled here: a plan is self-contained, and
# flowsim need not travel. None is calibrated: the pipeline cut and the
# batch split searched for (auto) are the uncalibrated simulator's choices,
# as they would be there.
flowsim=$(mktemp -d)/flowsim
go build -o "$flowsim" ./cmd/flowsim
plan() { # plan NAME MODEL BATCH DTYPE STRATEGY
	"$flowsim" plan --cluster h200-host --model "$2" --batch "$3" --dtype "$4" \
		--strategy "$5" --optimizer sgd --momentum 0 --lr 0.01 -o "$out/plans/$1.plan.json"
}
plan mnist-cnn-f32-b64 mnist-cnn 64 f32 single
plan mnist-cnn-f32-b1024 mnist-cnn 1024 f32 single
plan cifar-cnn-f32-b128 cifar-cnn 128 f32 single
plan mlp3x4096-f32-b4096 mlp3x4096 4096 f32 single
plan mlp3x4096-bf16-b4096 mlp3x4096 4096 bf16 single
plan gpt2s-blocks-bf16-b8-s1024 gpt2s-blocks 8 bf16 single
# The same stack with flash attention (PyTorch's baseline takes its flash
# kernels on this GPU): no score leaves the chip.
plan gpt2s-blocks-bf16-b8-s1024-flash gpt2s-blocks:attention=flash 8 bf16 single
# Four for the GPU and the host's CPU: pipelines (stage 0 on the GPU, cut
# to balance FLOPs or by the simulator: fc2 alone on the CPU) and data
# parallelism (a replica on each, the batch split evenly or by the
# simulator: micro-batches of 8, most on the GPU).
plan hetero-mnist-cnn-f32-b64-gpu-cpu mnist-cnn 64 f32 pp=2,mb=2,sched=1f1b
plan hetero-mnist-cnn-f32-b64-gpu-cpu-cut mnist-cnn 64 f32 pp=2,mb=2,layers=auto
plan hetero-mnist-cnn-f32-b64-gpu-cpu-dp mnist-cnn 64 f32 dp=2
plan hetero-mnist-cnn-f32-b64-gpu-cpu-dp-auto mnist-cnn 64 f32 dp=2,mbs=8,mb=auto
# And ones the device runs last, with what time is left, outside the
# calibration: ResNet-50 (batch norm), in f32 and in bf16.
for dt in f32 bf16; do
	"$flowsim" plan --cluster h200-host --model resnet50 --batch 128 --dtype $dt --strategy single \
		--optimizer sgd --momentum 0 --lr 0.01 -o "$out/extra/resnet50-$dt-b128.plan.json"
done
rm -r "$(dirname "$flowsim")"

# MNIST, for training on the GPU (the device machine has no network), and
# text for a language model: Go's go/… packages (2 MB; the device machine
# has no Go).
mnist=$(go run ./bench/gpu/mnistdir)
cp "$mnist"/*-ubyte* "$out/mnist/"
mkdir -p "$out/text"
(cd "$(go env GOROOT)/src/go" && find . -name '*.go' -not -path '*/testdata/*' -print0 | xargs -0 cp --parents -t "$OLDPWD/$out/text")
du -sh "$out"
