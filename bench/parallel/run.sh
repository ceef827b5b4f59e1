#!/usr/bin/env bash
# Sequence parallelism, interleaved pipelines and ZeRO on this machine's CPU,
# predicted against measured, each beside the strategy it refines: a small
# GPT calibrated on its own tasks (tp=2,sp=on's all-gathers and
# reduce-scatters included), then bench/planloop under tp=2 and tp=2,sp=on,
# pp=2 and pp=2,vpp=2 (4 micro-batches), dp=2 and dp=2,zero=1.
# Writes results/parallel-cpu/{calib.json,calibrate-output.txt,table.md,results.json}.
#
#	bash bench/parallel/run.sh        # about 15 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/../.."
exec bash bench/planloop/calibrated.sh results/parallel-cpu "gpt:layers=4,hidden=256,heads=8,seq=64,vocab=4096" \
	4,8,16 16 "tp=2;tp=2,sp=on;pp=2,mb=4;pp=2,vpp=2,mb=4;dp=2;dp=2,zero=1"
