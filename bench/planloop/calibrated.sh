#!/usr/bin/env bash
# The plan loop on models calibrated on their own tasks: builds flowrun,
# calibrates on MODELS at CALIB_BATCHES, then runs bench/planloop on them at
# BATCHES under STRATEGIES (RUNS runs each, default 3). Writes
# OUT/{calib.json,calibrate-output.txt,table.md,results.json}.
#
#	bash bench/planloop/calibrated.sh OUT MODELS CALIB_BATCHES BATCHES STRATEGIES
set -euo pipefail
if [[ $# -ne 5 ]]; then
	echo "usage: $0 OUT MODELS CALIB_BATCHES BATCHES STRATEGIES" >&2
	exit 2
fi
out=$1 models=$2 calib_batches=$3 batches=$4 strategies=$5
cd "$(dirname "$0")/../.."
mkdir -p bin "$out"
CGO_ENABLED=0 go build -o bin/flowrun ./cmd/flowrun
bin/flowrun calibrate --models "$models" --batches "$calib_batches" -o "$out/calib.json" | tee "$out/calibrate-output.txt"
go run ./bench/planloop --calib "$out/calib.json" --models "$models" --batches "$batches" \
	--strategies "$strategies" --runs "${RUNS:-3}" --out "$out"
