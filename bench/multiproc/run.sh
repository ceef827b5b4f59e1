#!/usr/bin/env bash
# Multi-process runs on this machine, predicted against measured: this
# machine's kernels are calibrated ('flowrun calibrate' on mnist-cnn, into
# OUT/calib.json, unless CALIB names a calibration), the transport between
# two processes is measured ('flowrun calibrate link'), which writes
# OUT/procs2.yaml (two processes joined by gRPC over loopback); each plan is
# compiled for that cluster, run by 'flowrun exec --procs 2' (this process
# and one worker it starts) and simulated with the calibration and the
# cluster's routes. Writes OUT/{table.md,link.txt,runs/*.json}, OUT by
# default results/multiproc-cpu-DATE. RUNS, BATCHES (space-separated) and
# STRATEGIES (separated by ;) override the defaults.
#
#	bash bench/multiproc/run.sh
#	OUT=results/multiproc-cpu-2026-12-02 CALIB=results/multiproc-cpu-2026-12-02/calib.json bash bench/multiproc/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-results/multiproc-cpu-$(date -u +%Y-%m-%d)}
cluster=$out/procs2.yaml
runs=${RUNS:-5}
mkdir -p bin "$out/runs"
CGO_ENABLED=0 go build -o bin/flowsim ./cmd/flowsim
CGO_ENABLED=0 go build -o bin/flowrun ./cmd/flowrun
calib=${CALIB:-}
if [[ -z $calib ]]; then
	calib=$out/calib.json
	bin/flowrun calibrate --models mnist-cnn --batches 32,64,128 -o "$calib" | tee "$out/calibrate-output.txt"
fi
bin/flowrun calibrate link --reps 50 --sizes 4KiB,64KiB,256KiB,1MiB,2MiB,4MiB,16MiB -o "$cluster" | tee "$out/link.txt"

field() { sed -n "s/^  \"$1\": \([^,]*\),\?$/\1/p" "$2"; }

{
	echo "# Multi-process runs on this CPU: predicted vs measured"
	echo
	echo "$(date -u +%Y-%m-%d), $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), Go $(go env GOVERSION)."
	echo "The transport (\`flowrun calibrate link\`, in \`link.txt\`): $(sed -n 's/^source: "the fabric: flowrun calibrate link, [0-9-]*: \(.*\)"$/\1/p' "$cluster")."
	echo "Plans compiled for \`$cluster\`; \`flowrun exec --procs 2 --compare --calib $calib --cluster $cluster\`,"
	echo "median of $runs runs of 20 iterations (3 warm-up). The one-process column runs the same plan in one process"
	echo "(\`--procs 1\`), where its transfers and all-reduces are copies in memory."
	echo
	echo "| model | batch | strategy | predicted ms | measured ms (2 processes) | error | measured ms (1 process) |"
	echo "|---|---|---|---|---|---|---|"
} >"$out/table.md"

IFS=';' read -ra strategies <<<"${STRATEGIES:-dp=2;dp=2,bucket=25MiB;dp=2,mb=2;dp=2,mb=2,bucket=25MiB;dp=2,mb=3:1;pp=2,mb=4,sched=1f1b;pp=2,mb=4,sched=gpipe}"
for batch in ${BATCHES:-64 256}; do
	for strategy in "${strategies[@]}"; do
		name="mnist-cnn-b$batch-${strategy//[,=:]/_}"
		plan=$(mktemp --suffix .json)
		bin/flowsim plan --model mnist-cnn --cluster "$cluster" --strategy "$strategy" --batch "$batch" -o "$plan" >/dev/null
		bin/flowrun exec "$plan" --procs 2 --compare --calib "$calib" --cluster "$cluster" --runs "$runs" --json >"$out/runs/$name.json"
		bin/flowrun exec "$plan" --runs "$runs" --json >"$out/runs/$name.one.json"
		rm -f "$plan"
		pred=$(field predicted_step_s "$out/runs/$name.json")
		meas=$(field measured_step_s "$out/runs/$name.json")
		one=$(field measured_step_s "$out/runs/$name.one.json")
		awk -v b="$batch" -v s="$strategy" -v p="$pred" -v m="$meas" -v o="$one" 'BEGIN {
			printf "| mnist-cnn | %d | %s | %.1f | %.1f | %+.1f%% | %.1f |\n", b, s, 1e3*p, 1e3*m, 100*(p-m)/m, 1e3*o }' >>"$out/table.md"
		tail -1 "$out/table.md"
	done
done
