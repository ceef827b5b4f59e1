#!/usr/bin/env bash
# run.sh prints OpenBLAS's sgemm and flowkit's Sgemm side by side, in GFLOP/s,
# on the same shapes (kernels/cpu/bench_test.go), both on 2 threads.
#
# Usage: bench/openblas/run.sh [seconds per OpenBLAS shape, default 1]
#
# It needs gcc and libopenblas-dev and installs nothing itself.
#
# OPENBLAS_CORETYPE defaults to Haswell: on a virtual Zen 3 CPU, OpenBLAS
# 0.3.21's own detection also picks Haswell, and its Zen kernels (the same
# AVX2 code with other blocking) measured no faster here. Override it from
# the environment to compare.
set -euo pipefail

cd "$(dirname "$0")/../.."

if ! dpkg-query -W -f='${Status}' libopenblas-dev 2>/dev/null | grep -q 'install ok installed'; then
	echo "run.sh: libopenblas-dev is not installed; install it with:" >&2
	echo "  apt-get update && apt-get install -y libopenblas-dev" >&2
	exit 1
fi

bin=$(mktemp -t openblas-sgemm.XXXXXX)
trap 'rm -f "$bin"' EXIT
gcc -O2 -Wall -Wextra -o "$bin" bench/openblas/sgemm.c -lopenblas

export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
export OPENBLAS_NUM_THREADS=2
echo "== OpenBLAS (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)"
"$bin" "${1:-1}"

echo "== flowkit kernels/cpu.Sgemm (GOMAXPROCS=2)"
GOMAXPROCS=2 go test -run '^$' -bench Sgemm ./kernels/cpu/
