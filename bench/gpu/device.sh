#!/usr/bin/env bash
# The GPU check, run on the device machine from the repository root after
# bench/gpu/build.sh:  bash .gpu/device.sh
# Runs the GPU tests, PyTorch's baseline, training on the GPU, calibration
# and predicted-vs-measured runs of every workload, and a language model's
# training on text, each step logged, none
# stopping the others; prints one table last and leaves under $OUT:
#   summary.json  every figure, with date, device and driver
#   log.txt       every step's output
#   tests.txt     the GPU tests' verbose output
#   torch.jsonl   PyTorch's step times
# DEADLINE (seconds, default 510: the device call's 540 s less a margin)
# bounds the whole script: a step gets at most what is left of it, less
# 25 s kept for the summary, and a step with under 5 s left is skipped
# (rc 125), so that a slow step costs the steps after it their time, not
# the table.
set -u
DEADLINE=${DEADLINE:-510}
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FLOWKIT_MNIST=$here/mnist
export FLOWKIT_REQUIRE_GPU=1 # GPU tests fail, not skip, without a GPU
work=$(mktemp -d)
# The binaries, packed by build.sh.
tar -C "$work" -xzf "$here/bin.tar.gz" || { echo "device.sh: cannot unpack $here/bin.tar.gz (run bench/gpu/build.sh)" >&2; exit 1; }
bin=$work/bin
log=$OUT/log.txt
res=$OUT/results.jsonl
: >"$log"; : >"$res"; : >"$OUT/tests.txt"

# budget LIMIT: LIMIT, or less: what the deadline leaves, less the summary's time.
budget() {
	local left=$((DEADLINE - SECONDS - 25))
	echo $((left < $1 ? left : $1))
}
skipped() { # skipped NAME: true (and recorded) if there is no time left for step NAME
	if (($(budget 5) < 5)); then
		echo "=== $1: skipped, $((DEADLINE - SECONDS)) s left before the deadline" >>"$log"
		printf '{"step":"%s","rc":125,"seconds":0}\n' "$1" >>"$res"
		return 0
	fi
	return 1
}
step() { # step NAME TIMEOUT CMD...: run, log, record the status; never stops the script
	local name=$1 limit; limit=$(budget "$2"); shift 2
	skipped "$name" && return
	local t0=$SECONDS rc=0
	echo "=== $name: $*" >>"$log"
	timeout "$limit" "$@" >>"$log" 2>&1 || rc=$?
	echo "=== $name: exit $rc in $((SECONDS - t0)) s" >>"$log"
	printf '{"step":"%s","rc":%d,"seconds":%d}\n' "$name" "$rc" "$((SECONDS - t0))" >>"$res"
}
json() { # json NAME TIMEOUT CMD...: as step, and the command's stdout (one JSON object) goes into the results
	local name=$1 limit; limit=$(budget "$2"); shift 2
	skipped "$name" && return
	local t0=$SECONDS rc=0
	echo "=== $name: $*" >>"$log"
	timeout "$limit" "$@" >"$work/$name.json" 2>>"$log" || rc=$?
	cat "$work/$name.json" >>"$log"
	echo "=== $name: exit $rc in $((SECONDS - t0)) s" >>"$log"
	printf '{"step":"%s","rc":%d,"seconds":%d,"out":%s}\n' "$name" "$rc" "$((SECONDS - t0))" \
		"$(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$work/$name.json")" >>"$res"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$work/gpu.txt" 2>&1
cat "$work/gpu.txt" >>"$log"

# 0. What flowrun sees: the GPU, its catalog type, the libraries loaded.
json devices 60 "$bin/flowrun" devices --json

# 1. GPU tests: bindings, kernels against float64 references, the runtime
# on the GPU against the CPU.
gotest() { # gotest NAME PACKAGE-DIR ARGS...: a test binary, in its package's folder
	local name=$1 dir=$2; shift 2
	echo "=== $name.test $*" >>"$OUT/tests.txt"
	step "test-$name" 180 bash -c 'cd "$1" && shift && exec "$@"' _ "$here/../$dir" \
		"$bin/$name.test" -test.v -test.count=1 "$@"
	sed -n '/^=== test-'"$name"': bash/,/^=== test-'"$name"': exit/p' "$log" >>"$OUT/tests.txt"
}
gotest cuda runtime/cuda -test.skip 'FakeDriver'
gotest kernels kernels/cuda -test.skip 'PTXFresh|PTXAssembles'
gotest runtime runtime -test.run 'GPU|CUDA'

# Kernel and GEMM benchmarks (CUDA events): GB/s and TFLOP/s against the
# H200's ceilings.
step bench-kernels 120 bash -c 'cd "$1" && exec "$2" -test.run "^$" -test.bench . -test.benchtime 20x' _ "$here/../kernels/cuda" "$bin/kernels.test"
step bench-gemm 120 bash -c 'cd "$1" && exec "$2" -test.run "^$" -test.bench . -test.benchtime 20x' _ "$here/../runtime/cuda" "$bin/cuda.test"

# 2. PyTorch eager, side by side.
step torch 180 bash -c "python3 '$here/torch_baseline.py' >'$OUT/torch.jsonl'"

# 3. Training on the GPU: one epoch of MNIST.
json train-mnist 180 "$bin/flowrun" train --device cuda --epochs 1 --json

# 4. The plans, compiled by build.sh (flowsim does not travel): seven for the
# GPU (the GPT-2 stack twice: its scores in memory, and flash attention),
# four for the GPU and the host's CPU.
cp "$here"/plans/*.plan.json "$work/"

# 5. Calibrate on these plans (GPU tasks in place; the CPU's for the
# heterogeneous plan), then run each plan and compare with the prediction.
# 30 iterations a round, as many as each exec run below: the small plans'
# rounds last milliseconds otherwise, too short for the GPU's clocks to
# settle as they do in the longer exec runs.
json calibrate 240 "$bin/flowrun" calibrate --device cuda:0 --plans "$work"/'*.plan.json' --rounds 3 --iters 30 -o "$work/calib.json" --json
compare=()
[[ -s $work/calib.json ]] && compare=(--compare --calib "$work/calib.json")
for p in "$work"/*.plan.json; do
	name=$(basename "$p" .plan.json)
	json "exec-$name" 90 "$bin/flowrun" exec "$p" --device cuda --iters 30 --warmup 5 --runs 3 "${compare[@]}" --json
done
# The tightest workload under the other --gemm policies: cuBLASLt's first
# algorithm with the epilogues fused, and cuBLAS with kernels; against the
# default, which times both per shape and keeps the faster.
for policy in fused unfused; do
	json "exec-mlp3x4096-bf16-b4096-gemm-$policy" 90 "$bin/flowrun" exec "$work/mlp3x4096-bf16-b4096.plan.json" --device cuda \
		--iters 30 --warmup 5 --runs 3 --gemm "$policy" --json
done
cp "$work/calib.json" "$OUT/calib-cuda.json" 2>/dev/null

# 6. Last, with what time is left: a byte-level GPT trained on the GPU on
# Go's go/… packages (carried: the device machine has no Go), held-out
# bits a byte against byte frequencies'.
json train-gpt-text 90 "$bin/flowrun" train --device cuda --model gpt:layers=4,hidden=256,heads=8,seq=256,vocab=256 \
	--optimizer adam --lr 0.002 --batch 32 --epochs 3 --max-steps 300 --data "$here/text" --json

# 7. Then ResNet-50, uncalibrated for its batch norm (the calibration
# above has none): its step, and the prediction's error; in f32, then bf16.
for dt in f32 bf16; do
	json "exec-resnet50-$dt-b128" 60 "$bin/flowrun" exec "$here/extra/resnet50-$dt-b128.plan.json" --device cuda \
		--iters 20 --warmup 5 --runs 3 "${compare[@]}" --json
done

# 8. Last of all: a masked language model (BERT, masked bytes) trained on
# the same text, held-out bits a masked byte.
json train-bert-text 60 "$bin/flowrun" train --device cuda --model bert:layers=4,hidden=256,heads=8,seq=128,vocab=256 \
	--optimizer adam --lr 0.001 --batch 32 --epochs 3 --max-steps 300 --data "$here/text" --json

python3 "$here/summarize.py" --gpu "$work/gpu.txt" --results "$res" --torch "$OUT/torch.jsonl" --log "$log" -o "$OUT/summary.json"
