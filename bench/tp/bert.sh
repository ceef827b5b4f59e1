#!/usr/bin/env bash
# A small BERT on this machine's CPU, predicted against measured:
# calibrates the cost model on the BERT's own tasks (bidirectional
# attention, post-norm layer norms, the head's decoder bias; its
# vocab-parallel embedding, statistics and loss under tp=2 included), then
# runs bench/planloop on it under single, dp=2, tp=2 and a pipeline.
# Writes results/bert-cpu/{calib.json,calibrate-output.txt,table.md,results.json}.
#
#	bash bench/tp/bert.sh       # about 10 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/../.."
exec bash bench/planloop/calibrated.sh results/bert-cpu "bert:layers=2,hidden=256,heads=8,seq=64,vocab=4096" \
	4,8,16 16 "single;dp=2;tp=2;pp=2,mb=2"
