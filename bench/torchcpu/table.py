"""Writes the table of bench/torchcpu/run.sh from its runs.jsonl: OUT/table.md.

Usage: python3 bench/torchcpu/table.py OUT RUNS
"""
import json, platform, statistics, subprocess, sys
out, runs = sys.argv[1], int(sys.argv[2])
recs = [json.loads(l) for l in open(f"{out}/runs.jsonl")]
rounds = max(r["round"] for r in recs)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
go = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
lines = [
    "# flowrun against PyTorch eager on this CPU",
    "",
    f"{recs[0]['date'][:10]}, {recs[0]['threads']} threads ({cpu}), {go}, PyTorch {recs[0]['torch']}",
    f"(its BLAS: {recs[0]['blas'] or 'none found'}; convolutions: oneDNN)."
    + (" OpenBLAS's pthread build: its threads contend with PyTorch's (see run.sh)." if "pthread" in recs[0]["blas"] else ""),
    "One SGD step (lr 0.01, no momentum, f32) on a fixed batch: `flowrun exec` on a plan for the whole CPU",
    "(`flowsim plan --cluster local --strategy single`) and `bench/torchcpu/torch_cpu.py`, alternately,",
    f"{rounds} rounds of each; a round's figure is the median of {runs} runs of the mean of 20 steps after 3 warm-up ones,",
    "the table's the median of the rounds', the rounds' range beside it (every run in `runs.jsonl`).",
    "Below 1 flowrun is faster.",
    "",
    "| workload | batch | flowrun ms (rounds) | PyTorch ms (rounds) | flowrun / PyTorch |",
    "|---|---|---|---|---|",
]
seen = []
for r in recs:
    if (r["workload"], r["batch"]) not in seen:
        seen.append((r["workload"], r["batch"]))
for w, b in seen:
    rs = [r for r in recs if (r["workload"], r["batch"]) == (w, b)]
    fs, ts = [r["flowrun_ms"] for r in rs], [r["step_ms"] for r in rs]
    f, t = statistics.median(fs), statistics.median(ts)
    lines.append(f"| {w} | {b} | {f:.1f} ({min(fs):.1f}–{max(fs):.1f}) | {t:.1f} ({min(ts):.1f}–{max(ts):.1f}) | {f / t:.2f} |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
