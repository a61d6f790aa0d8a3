#!/usr/bin/env python3
"""kiln against onnxruntime on recurrent layers: nn.LSTM and nn.GRU (one layer, input 256,
hidden 512, sequence 100, batch 1 and 8) exported to ONNX (one LSTM / GRU node), and an
LSTM of input and hidden 1024 over 1000 steps (batch 1); the p50 latency of `kiln bench`
and of an onnxruntime.InferenceSession (intra_op_num_threads = kiln's threads, the same
random inputs' shapes) at each thread count. Prints a Markdown table.

  python tools/bench_rnn.py build-rel/tools/kiln [--threads 1 2] [--dir /tmp/kiln-rnn]

Needs torch, onnx and onnxruntime (a by-hand benchmark, not run by meson test)."""
import argparse
import json
import os
import subprocess
import time

import numpy as np
import onnxruntime as ort
import torch
import torch.nn as nn

# name, kind, input, hidden, batch, seq, iterations
CASES = [
    ("lstm b1", "lstm", 256, 512, 1, 100, 50),
    ("lstm b8", "lstm", 256, 512, 8, 100, 50),
    ("gru b1", "gru", 256, 512, 1, 100, 50),
    ("gru b8", "gru", 256, 512, 8, 100, 50),
    ("lstm 1024 x 1000 steps", "lstm", 1024, 1024, 1, 1000, 5),
]


class Wrap(nn.Module):
    def __init__(self, kind, inp, hidden):
        super().__init__()
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(inp, hidden)

    def forward(self, x):
        return self.rnn(x)[0]


def export(path, kind, inp, hidden, batch, seq):
    if os.path.exists(path):
        return
    torch.manual_seed(0)
    m = Wrap(kind, inp, hidden).eval()
    x = torch.randn(seq, batch, inp)
    torch.onnx.export(m, (x,), path, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamo=False)


def ort_p50(path, shape, threads, iterations):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    for _ in range(3):
        s.run(None, {"x": x})
    lat = []
    for _ in range(iterations):
        t = time.perf_counter()
        s.run(None, {"x": x})
        lat.append((time.perf_counter() - t) * 1e3)
    return float(np.percentile(lat, 50))


def kiln_p50(kiln, path, threads, iterations):
    out = subprocess.run([kiln, "bench", path, "--json", "--threads", str(threads),
                          "--iterations", str(iterations)], check=True, capture_output=True,
                         text=True).stdout
    r = json.loads(out)
    return r["latency_ms"]["p50"], r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--dir", default="/tmp/kiln-rnn")
    ap.add_argument("--only", help="run the cases whose name contains this")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    print("| model | threads | kiln p50 ms | onnxruntime p50 ms | kiln / ort |")
    print("|---|---|---|---|---|")
    for name, kind, inp, hidden, batch, seq, iters in CASES:
        if a.only and a.only not in name:
            continue
        path = os.path.join(a.dir, f"{kind}_{inp}x{hidden}_b{batch}_s{seq}.onnx")
        export(path, kind, inp, hidden, batch, seq)
        for t in a.threads:
            k, _ = kiln_p50(a.kiln, path, t, iters)
            o = ort_p50(path, (seq, batch, inp), t, iters)
            print(f"| {name} (input {inp}, hidden {hidden}, seq {seq}, batch {batch}) | {t} | "
                  f"{k:.3f} | {o:.3f} | {k / o:.2f} |", flush=True)


if __name__ == "__main__":
    main()
