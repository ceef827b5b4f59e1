#!/usr/bin/env bash
# Tensor parallelism on this machine's CPU, predicted against measured:
# calibrates the cost model on models that have a tensor-parallel layout
# (their tp=2 plans included: the sums and the kernels on split weights),
# then runs bench/planloop on them under single, dp=2, tp=2 and pipelines,
# each plan executed unchanged and simulated with that calibration.
# Writes results/tp-cpu/{calib.json,calibrate-output.txt,table.md,results.json}.
#
#	bash bench/tp/run.sh        # about 45 minutes on 2 cores (the calibration 33)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec bash bench/planloop/calibrated.sh results/tp-cpu "mlp,mlp3x4096:width=1024,gpt2s-blocks:layers=2,hidden=256,heads=8,seq=64" \
	8,16,32,64,128 16,64 "single;dp=2;tp=2;tp=2,mb=2;pp=2,mb=2"
