#!/usr/bin/env bash
# Re-predicts the measured rows of a bench/multiproc/run.sh result folder
# with this checkout's simulator: each run's plan is compiled again for the
# folder's procs2.yaml and simulated with its calib.json, and its
# prediction set beside the one recorded and the measured step. For a
# change to the cost model, judged on measurements already made. CALIB
# names the calibration where the folder holds none (results/multiproc-cpu
# was predicted with results/plan-loop-cpu/calib.json); CLUSTER another
# cluster file to simulate on (the same processes, a link measured anew).
#
#	bash bench/multiproc/resim.sh results/multiproc-cpu-2026-12-02
#	CALIB=results/plan-loop-cpu/calib.json bash bench/multiproc/resim.sh results/multiproc-cpu
set -euo pipefail
calib=${CALIB:-${1:-}/calib.json}
cluster=${CLUSTER:-${1:-}/procs2.yaml}
if [[ $# -ne 1 || ! -f $cluster || ! -f $calib ]]; then
	echo "usage: [CALIB=FILE] [CLUSTER=FILE] $0 DIR (a bench/multiproc/run.sh output: runs/*.json, procs2.yaml unless CLUSTER names a cluster, and calib.json unless CALIB names one)" >&2
	exit 2
fi
dir=$1
cd "$(dirname "$0")/../.."
mkdir -p bin
CGO_ENABLED=0 go build -o bin/flowsim ./cmd/flowsim
plan=$(mktemp --suffix .json)
trap 'rm -f "$plan"' EXIT
echo "| model | batch | strategy | measured ms | recorded prediction | error | this simulator | error |"
echo "|---|---|---|---|---|---|---|---|"
for run in "$dir"/runs/*.json; do
	[[ $run == *.one.json ]] && continue
	read -r model batch strategy meas pred < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(d["model"], d["batch"], d["strategy"], d["measured_step_s"], d["predicted_step_s"])' "$run")
	if ! err=$(bin/flowsim plan --model "$model" --cluster "$cluster" --strategy "$strategy" --batch "$batch" -o "$plan" 2>&1 >/dev/null); then
		echo "$run: skipped, not a plan for $cluster: $err" >&2
		continue
	fi
	now=$(bin/flowsim simulate --plan "$plan" --cluster "$cluster" --calib "$calib" --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["step_time_s"])')
	python3 -c '
import sys
model, batch, strategy = sys.argv[1:4]
meas, pred, now = map(float, sys.argv[4:])
print(f"| {model} | {batch} | {strategy} | {1e3*meas:.2f} | {1e3*pred:.2f} | {100*(pred-meas)/meas:+.1f}% | {1e3*now:.2f} | {100*(now-meas)/meas:+.1f}% |")' \
		"$model" "$batch" "$strategy" "$meas" "$pred" "$now"
done
