"""PyTorch eager's training-step time on the CPU, for side-by-side runs with flowrun.

The workloads are those of ../gpu/torch_baseline.py (the seed document's MNIST and CIFAR CNNs,
a stack of 4096-wide Linear layers, pre-norm transformer blocks), sized by the same names and
options as flowkit's zoo, so that `flowsim plan --model NAME` and this script build the same
network:

  mnist-cnn, cifar-cnn, mlp3x4096[:depth=D,width=W], gpt2s-blocks[:layers=L,hidden=H,heads=N,seq=S]

A step is one SGD step (lr 0.01, no momentum) on a fixed random batch, the loss cross-entropy
against random labels for the CNNs and the mean square of the output for the others, as in
torch_baseline.py. The time is measured as `flowrun exec` measures its own: the mean step time
over ITERS iterations after WARMUP, median of RUNS runs. Prints one JSON object per workload:
  {"workload": ..., "framework": "pytorch-eager-cpu", "threads": ..., "blas": ..., "step_ms": ..., "runs_ms": [...]}
with "blas" the BLAS library PyTorch loaded (its Linear layers' GEMMs; convolutions are oneDNN's):
Debian's python3-torch takes the system's libblas.so.3, the slow reference one unless OpenBLAS is
installed (its OpenMP build, libopenblas0-openmp: see run.sh).

Usage: python3 torch_cpu.py --model mnist-cnn --batch 64 [--threads N] [--runs 5 --iters 20 --warmup 3]
"""
import argparse, json, os, statistics, sys, time
import torch, torch.nn as nn, torch.nn.functional as F


# The CNNs are torch_baseline.py's own (the seed document's), so that the two scripts time the same
# networks.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from torch_baseline import CifarCNN, MnistCNN  # noqa: E402


def options(spec, defaults):
    """Parses NAME:k=v,… into defaults overridden; an unknown option is an error."""
    name, _, rest = spec.partition(":")
    opts = dict(defaults)
    for kv in filter(None, rest.split(",")):
        k, sep, v = kv.partition("=")
        if not sep or k not in opts:
            sys.exit(f"torch_cpu.py: {spec}: unknown option {kv!r} (options: {', '.join(opts) or 'none'})")
        opts[k] = int(v)
    return name, opts


def workload(spec, batch):
    """Returns the model, its input and its labels (None: mean-square loss)."""
    name = spec.partition(":")[0]
    if name == "mnist-cnn":
        options(spec, {})
        return MnistCNN(), torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    if name == "cifar-cnn":
        options(spec, {})
        return CifarCNN(), torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    if name == "mlp3x4096":
        _, o = options(spec, {"depth": 3, "width": 4096})
        layers = []
        for i in range(o["depth"]):
            layers += [nn.Linear(o["width"], o["width"])] + ([nn.ReLU()] if i < o["depth"] - 1 else [])
        return nn.Sequential(*layers), torch.randn(batch, o["width"]), None
    if name == "gpt2s-blocks":
        _, o = options(spec, {"layers": 12, "hidden": 768, "heads": 12, "seq": 1024})
        layer = nn.TransformerEncoderLayer(o["hidden"], o["heads"], 4 * o["hidden"], dropout=0.0,
                                           batch_first=True, norm_first=True, activation="gelu")
        m = nn.TransformerEncoder(layer, o["layers"], enable_nested_tensor=False)
        return m, torch.randn(batch, o["seq"], o["hidden"]), None
    sys.exit(f"torch_cpu.py: unknown workload {spec!r} (mnist-cnn, cifar-cnn, mlp3x4096, gpt2s-blocks)")


def blas():
    """The BLAS library mapped into this process (after a matrix product has run), or ""."""
    torch.ones(2, 2) @ torch.ones(2, 2)
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.rsplit("/", 1)[-1] and ".so" in line}
    return ", ".join(sorted(os.path.realpath(l) for l in libs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="intra-op threads (default: one per core this process may run on)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model, x, y = workload(a.model, a.batch)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = F.cross_entropy(out, y) if y is not None else out.pow(2).mean()
        loss.backward()
        opt.step()

    runs = []
    for _ in range(a.runs):
        for _ in range(a.warmup):
            step()
        t = time.perf_counter()
        for _ in range(a.iters):
            step()
        runs.append((time.perf_counter() - t) / a.iters * 1e3)
    print(json.dumps({"workload": a.model, "batch": a.batch, "framework": "pytorch-eager-cpu",
                      "torch": torch.__version__, "threads": torch.get_num_threads(), "blas": blas(),
                      "step_ms": round(statistics.median(runs), 3), "runs_ms": [round(r, 3) for r in runs]}))


if __name__ == "__main__":
    main()
