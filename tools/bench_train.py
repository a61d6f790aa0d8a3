#!/usr/bin/env python3
"""Times a training step of kiln (`kiln train`) against PyTorch eager on this CPU.

For each model: (a) the digits CNN of models/make_train_refs.py at batch 64 (1x8x8
inputs), (b) ResNet-18 (torchvision's, untrained) at batch 8 on 3x224x224 inputs, 1000
classes, (c) the transformer encoder of models/make_train_refs.py at batch 64, it
exports the model as make_train_refs.py does (inference form, opset 17, no constant
folding, a dynamic batch), writes a random batch to .npz, and times

  PyTorch: zero_grad, forward, cross_entropy, backward, SGD (momentum 0.9) step, with
           torch.set_num_threads(T); median over the steps after 3 warm-up steps;
  kiln:    kiln train MODEL --data X.npz --steps N --batch B --no-shuffle --log L.jsonl
           --threads T (SGD, momentum 0.9); median of the per-step "ms" of the log,
           skipping the first 3 steps,

alternating kiln and PyTorch rounds, and prints a table with the ratio kiln/PyTorch and
each one's peak resident memory (the largest of its rounds: each round is a process of
its own, PyTorch's a child running this script with --torch-child).

--bf16 adds, in the same rounds, kiln's bf16 step (`kiln train --bf16`: split weights,
and convolutions and products in bf16 where the CPU has AVX512-BF16 or AMX) and
PyTorch's (forward and loss under torch.autocast("cpu", dtype=torch.bfloat16), FP32
weights and SGD), with kiln bf16 / kiln float32 and kiln bf16 / PyTorch bf16.

Run from the repository root, with a release build:
  meson setup build-rel -Dbuildtype=release -Dgpu=disabled && ninja -C build-rel
  /path/to/.venv/bin/python tools/bench_train.py --threads 2
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import make_train_refs as refs  # noqa: E402  (the CNN and the encoder)

WARMUP = 3
LR, MOMENTUM = 0.01, 0.9


def resnet18():
    import torchvision
    return torchvision.models.resnet18(weights=None, num_classes=1000)


# name: (make, input name, batch, random batch of inputs, classes)
def cases():
    rng = np.random.default_rng(0)
    return {
        "cnn": (refs.CNN, "x", 64,
                lambda n: rng.random((n, 1, 8, 8), dtype=np.float32), 10),
        "resnet18": (resnet18, "x", 8,
                     lambda n: rng.standard_normal((n, 3, 224, 224), dtype=np.float32), 1000),
        "transformer": (refs.Encoder, "tokens", 64,
                        lambda n: rng.integers(0, 16, size=(n, 12)).astype(np.int64), 4),
    }


def export(model, name, x, path):
    model.eval()
    torch.onnx.export(model, (torch.from_numpy(x[:2]),), path, input_names=[name],
                      output_names=["logits"],
                      dynamic_axes={name: {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, do_constant_folding=False, dynamo=False)


def torch_steps(model, x, y, steps, bf16=False):
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = nn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    return times[WARMUP:]


def run_measured(cmd, stdout=subprocess.DEVNULL):
    """Runs cmd; returns (its stdout or None, its peak resident memory in MiB, or NaN).
    The peak comes from GNU time (Debian's package "time"): a child forked from this
    Python process would count the parent's pages it held before its exec."""
    with tempfile.NamedTemporaryFile(suffix=".rss") as f:
        timed = ["/usr/bin/time", "-f", "%M", "-o", f.name] + cmd
        have_time = os.access("/usr/bin/time", os.X_OK)
        p = subprocess.run(timed if have_time else cmd, stdout=stdout, check=True)
        rss = float("nan")
        if have_time:
            with open(f.name) as r:
                rss = float(r.read().strip().splitlines()[-1]) / 1024.0
    return (p.stdout if stdout == subprocess.PIPE else None), rss


def kiln_steps(kiln, onnx_path, npz, batch, steps, threads, log, bf16=False):
    cmd = [kiln, "train", onnx_path, "--data", npz, "--steps", str(steps), "--batch",
           str(batch), "--no-shuffle", "--log", log, "--threads", str(threads),
           "--optimizer", "sgd", "--lr", str(LR), "--momentum", str(MOMENTUM)]
    if bf16:
        cmd.append("--bf16")
    _, rss = run_measured(cmd)
    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r["ms"] for r in rows[WARMUP:]], rss


def torch_child(name, npz, steps, threads, bf16):
    """--torch-child: PyTorch's steps on the batch of npz, the times as JSON."""
    torch.set_num_threads(threads)
    make, input_name, _, _, _ = cases()[name]
    d = np.load(npz)
    torch.manual_seed(0)
    print(json.dumps(torch_steps(make(), d[input_name], d["target"], steps, bf16)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="build-rel/tools/kiln")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=13, help="steps per round, warm-up included")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="cnn,resnet18,transformer")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--bf16", action="store_true",
                    help="also time kiln train --bf16 and PyTorch under bf16 autocast")
    ap.add_argument("--torch-child", nargs=2, metavar=("MODEL", "NPZ"), help=argparse.SUPPRESS)
    ap.add_argument("--torch-bf16", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_child:
        torch_child(a.torch_child[0], a.torch_child[1], a.steps, a.threads, a.torch_bf16)
        return 0
    torch.set_num_threads(a.threads)
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info = subprocess.run([a.kiln, "info"], capture_output=True, text=True).stdout
    isa = next((l.strip() for l in info.splitlines() if "isa" in l.lower()), "?")
    results = {}
    with tempfile.TemporaryDirectory(prefix="kiln-bench-train-") as tmp:
        for name in a.models.split(","):
            make, input_name, batch, data, classes = cases()[name]
            torch.manual_seed(0)
            model = make()
            x = data(batch)
            y = np.random.default_rng(1).integers(0, classes, size=batch).astype(np.int64)
            onnx_path = os.path.join(tmp, name + ".onnx")
            npz = os.path.join(tmp, name + ".npz")
            export(model, input_name, x, onnx_path)
            np.savez(npz, **{input_name: x, "target": y})
            tk, tt, rk, rt = [], [], 0.0, 0.0
            tk16, tt16 = [], []
            for _ in range(a.rounds):
                for bf16 in [False, True] if a.bf16 else [False]:
                    ms, rss = kiln_steps(a.kiln, onnx_path, npz, batch, a.steps, a.threads,
                                         os.path.join(tmp, name + ".jsonl"), bf16)
                    (tk16 if bf16 else tk).extend(ms)
                    rk = max(rk, rss) if not bf16 else rk
                    out, rss = run_measured([sys.executable, os.path.abspath(__file__),
                                             "--torch-child", name, npz, "--steps",
                                             str(a.steps), "--threads", str(a.threads)] +
                                            (["--torch-bf16"] if bf16 else []),
                                            subprocess.PIPE)
                    (tt16 if bf16 else tt).extend(json.loads(out))
                    rt = max(rt, rss) if not bf16 else rt
            results[name] = {"batch": batch, "kiln_ms": statistics.median(tk),
                             "torch_ms": statistics.median(tt), "kiln_steps": len(tk),
                             "torch_steps": len(tt), "kiln_peak_mib": rk,
                             "torch_peak_mib": rt}
            if a.bf16:
                results[name]["kiln_bf16_ms"] = statistics.median(tk16)
                results[name]["torch_bf16_ms"] = statistics.median(tt16)
            print(f"{name}: kiln {results[name]['kiln_ms']:.2f} ms, "
                  f"torch {results[name]['torch_ms']:.2f} ms", file=sys.stderr)
    print(f"CPU: {cpu}; {isa}; threads: {a.threads}; torch {torch.__version__}; "
          f"{platform.python_version()}")
    print(f"median step time over {a.rounds} alternating rounds of {a.steps - WARMUP} "
          f"steps (after {WARMUP} warm-up steps)")
    print()
    print("| model | batch | kiln ms | PyTorch ms | kiln/PyTorch | kiln peak MiB | "
          "PyTorch peak MiB |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['batch']} | {r['kiln_ms']:.2f} | {r['torch_ms']:.2f} | "
              f"{r['kiln_ms'] / r['torch_ms']:.2f} | {r['kiln_peak_mib']:.0f} | "
              f"{r['torch_peak_mib']:.0f} |")
    if a.bf16:
        print()
        print("| model | batch | kiln float32 ms | kiln bf16 ms | kiln bf16/float32 | "
              "PyTorch bf16 ms | kiln bf16/PyTorch bf16 |")
        print("|---|---|---|---|---|---|---|")
        for name, r in results.items():
            print(f"| {name} | {r['batch']} | {r['kiln_ms']:.2f} | {r['kiln_bf16_ms']:.2f} | "
                  f"{r['kiln_bf16_ms'] / r['kiln_ms']:.2f} | {r['torch_bf16_ms']:.2f} | "
                  f"{r['kiln_bf16_ms'] / r['torch_bf16_ms']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "isa": isa, "threads": a.threads, "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
