#!/usr/bin/env bash
# flowrun against PyTorch eager on this machine's CPU, side by side: each
# workload's training step (one SGD step, lr 0.01, no momentum, f32) timed by
# 'flowrun exec' on a plan for the whole CPU (the local preset: one device,
# a worker per core) and by torch_cpu.py (a thread per core), alternately,
# ROUNDS times, so that a slow phase of the machine falls on both. Each
# figure is the median of RUNS runs of 20 iterations after 3 warm-up ones
# (flowrun exec's measure); a workload's figure is the median of its
# rounds'. Needs PyTorch (Debian: apt-get install python3-torch) and, for
# its Linear layers, OpenBLAS built for OpenMP, as PyTorch's own wheels
# bring MKL. Debian's PyTorch takes the system's libblas.so.3: by default
# the reference BLAS (a step of the small transformer blocks took 4.7 s on
# it, with another job running, and 0.27 s on OpenBLAS); OpenBLAS's pthread
# build keeps threads of its own, which contend with PyTorch's OpenMP ones
# (measured here: the transformer blocks' step 524–596 ms against 269 on
# OpenBLAS's OpenMP build). The table names the BLAS loaded.
#	apt-get install python3-torch libopenblas0-openmp
#	for a in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
#		update-alternatives --set $a-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-openmp/$a
#	done
# Writes results/torch-cpu-DATE/{table.md,runs.jsonl}.
#
#	bash bench/torchcpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-results/torch-cpu-$(date -u +%Y-%m-%d)}
runs=${RUNS:-5}
rounds=${ROUNDS:-3}
# A Python with PyTorch: $PYTHON, else python3 on the path, else the
# system's (Debian's package is for /usr/bin/python3, which a pyenv or venv
# python3 on the path hides).
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
	if "$p" -c 'import torch' 2>/dev/null; then
		py=$p
		break
	fi
done
[[ -n $py ]] || { echo "run.sh: no python3 here imports torch (Debian: apt-get install python3-torch; or set PYTHON)" >&2; exit 1; }
mkdir -p bin "$out"
CGO_ENABLED=0 go build -o bin/flowsim ./cmd/flowsim
CGO_ENABLED=0 go build -o bin/flowrun ./cmd/flowrun
: >"$out/runs.jsonl"

# The workloads: torch_baseline.py's, the large ones shrunk to CPU sizes.
workloads=(
	"mnist-cnn 64"
	"mnist-cnn 256"
	"cifar-cnn 128"
	"mlp3x4096:width=1024 1024"
	"gpt2s-blocks:layers=2,hidden=256,heads=4,seq=256 8"
)
plan=$(mktemp --suffix .json)
trap 'rm -f "$plan"' EXIT
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }
for w in "${workloads[@]}"; do
	read -r model batch <<<"$w"
	bin/flowsim plan --model "$model" --cluster local --strategy single --batch "$batch" \
		--optimizer sgd --momentum 0 --lr 0.01 -o "$plan" >/dev/null
	for round in $(seq "$rounds"); do
		f=$(bin/flowrun exec "$plan" --runs "$runs" --iters 20 --warmup 3 --json | field measured_step_s)
		t=$("$py" bench/torchcpu/torch_cpu.py --model "$model" --batch "$batch" --runs "$runs" --iters 20 --warmup 3)
		echo "$t" | python3 -c 'import json,sys; r=json.load(sys.stdin); r.update(round=int(sys.argv[1]), flowrun_ms=float(sys.argv[2])*1e3, date=sys.argv[3]); print(json.dumps(r))' "$round" "$f" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$out/runs.jsonl"
		tail -1 "$out/runs.jsonl"
	done
done

python3 bench/torchcpu/table.py "$out" "$runs"
