#!/usr/bin/env python3
"""Where kiln and onnxruntime spend their time on one model, side by side.

Runs `kiln bench --trace` (kiln's per-node profile) and onnxruntime with its profiler
on (SessionOptions.enable_profiling), each in its own process, alternately, ROUNDS
times, on the same inputs (the model folder's test_data_set_0 when there is one, else
made ones of the declared shapes, symbolic dims 1: float uniform in [0, 1), integer
ones) and thread count. Sums each
runtime's node times per group, takes the median over the rounds, and prints one line
per group, the groups where kiln loses most first:

    --by op      op type (kiln's fused ops are their own types, so compare totals)
    --by node    node name cut to its first --depth path components ('/'-separated),
                 which puts a block's nodes, fused or not, under one name in both
                 runtimes; a fused node keeps the name of one of the nodes it came
                 from, not always the same one in both (MNASNet's Conv + Relu: kiln
                 names it after the Conv, onnxruntime after the Relu), and such a
                 pair shows as two lines; onnxruntime's layout reorders are one group

Both profilers add their overhead to every node, so the sums are above the p50s of
`kiln bench` and tools/bench_vs_ort.py; compare the groups, not the totals with those.

Usage:
    .venv/bin/python tools/profile_vs_ort.py ~/.cache/kiln-zoo/efficientnet_b0 --by op
    .venv/bin/python tools/profile_vs_ort.py ~/.cache/kiln-zoo/mnasnet1_0 --by node --depth 4
    .venv/bin/python tools/profile_vs_ort.py MODEL.onnx --threads 2 --rounds 5 --realtime
"""

import argparse
import atexit
import collections
import glob
import json
import os
import statistics
import subprocess
import sys
import shutil
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ORT_WORKER = r"""
import glob, json, os, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
model, threads, runs, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
WARMUP = 3  # as kiln's --warmup 3: the first runs (arena growth, first touches) are left out
files = sys.argv[5:]
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
so.enable_profiling = True
so.profile_file_prefix = prefix
s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
feeds = {i.name: numpy_helper.to_array(onnx.load_tensor(f)) for i, f in zip(s.get_inputs(), files)}
for _ in range(WARMUP + runs):
    s.run(None, feeds)
print(s.end_profiling())
"""


def group_of(name, op, by, depth):
    if by == "op":
        return op
    if name.startswith("Reorder"):
        return "(onnxruntime layout reorders)"
    if name.endswith("_kernel_time"):
        name = name[: -len("_kernel_time")]
    parts = [p for p in name.split("/") if p]
    if parts and "_output_" in parts[-1]:  # onnxruntime's NCHWc nodes: Conv_output_0_nchwc
        parts[-1] = parts[-1][: parts[-1].index("_output_")]
    return "/" + "/".join(parts[:depth]) if len(parts) > depth else "/" + "/".join(parts)


def kiln_once(a, model, runs):
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        cmd = [a.kiln, "bench", model, "--threads", str(a.threads), "--iterations", str(runs),
               "--warmup", "3", "--trace", trace]
        for k, f in enumerate(inputs_of(model)):
            cmd += ["--input", "%s=%s" % (input_names(model)[k], f)]
        if a.realtime:
            cmd = ["chrt", "-f", "50"] + cmd
        subprocess.run(cmd, check=True, capture_output=True)
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
    traced = min(runs, 10)  # kiln's trace holds the first 10 timed runs
    sums = collections.defaultdict(float)
    for e in events:
        sums[group_of(e["name"], e["cat"], a.by, a.depth)] += e["dur"] / 1000.0 / traced
    return sums


def ort_once(a, model, runs):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", ORT_WORKER, model, str(a.threads), str(runs),
               os.path.join(tmp, "ort")] + inputs_of(model)
        if a.realtime:
            cmd = ["chrt", "-f", "50"] + cmd
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        with open(out.strip().splitlines()[-1]) as f:
            events = json.load(f)
    # Only the nodes of the timed runs: each run is one "model_run" event of the session,
    # and the warm-up runs (ORT_WORKER's WARMUP) come first.
    starts = sorted(e["ts"] for e in events
                    if e.get("cat") == "Session" and e["name"] == "model_run")
    if len(starts) < runs:
        raise SystemExit("onnxruntime's profile holds %d runs, expected %d" % (len(starts), runs))
    first = starts[len(starts) - runs]
    sums = collections.defaultdict(float)
    for e in events:
        if (e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
                and e["ts"] >= first):
            op = e.get("args", {}).get("op_name", "?")
            sums[group_of(e["name"], op, a.by, a.depth)] += e["dur"] / 1000.0 / runs
    return sums


_names = {}


def input_names(model):
    if model not in _names:
        import onnx
        m = onnx.load(model, load_external_data=False)
        inits = {i.name for i in m.graph.initializer}
        _names[model] = [i.name for i in m.graph.input if i.name not in inits]
    return _names[model]


_made = {}


def inputs_of(model):
    """The folder's test_data_set_0/input_*.pb, else inputs made once for both runtimes
    (float: uniform in [0, 1); integer: ones, valid token ids, types and masks; dynamic
    dims 1), as .pb files in a temporary folder."""
    files = sorted(glob.glob(os.path.join(os.path.dirname(model), "test_data_set_0",
                                          "input_*.pb")))
    if files:
        return files
    if model not in _made:
        import numpy as np
        import onnx
        from onnx import numpy_helper
        m = onnx.load(model, load_external_data=False)
        inits = {i.name for i in m.graph.initializer}
        tmp = tempfile.mkdtemp(prefix="kiln-profile-inputs-")
        atexit.register(shutil.rmtree, tmp, True)
        rng = np.random.default_rng(0)
        _made[model] = []
        for k, i in enumerate(x for x in m.graph.input if x.name not in inits):
            t = i.type.tensor_type
            shape = [d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim]
            dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            a = (np.ones(shape, dt) if np.issubdtype(dt, np.integer)
                 else rng.random(shape).astype(dt))
            path = os.path.join(tmp, "input_%d.pb" % k)
            with open(path, "wb") as f:
                f.write(numpy_helper.from_array(a, i.name).SerializeToString())
            _made[model].append(path)
    return _made[model]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="model.onnx, or a zoo folder holding one")
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "tools", "kiln"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=30, help="timed runs per process")
    ap.add_argument("--by", choices=["op", "node"], default="op")
    ap.add_argument("--depth", type=int, default=4, help="--by node: path components kept")
    ap.add_argument("--top", type=int, default=30, help="groups printed")
    ap.add_argument("--realtime", action="store_true", help="chrt -f 50 (CAP_SYS_NICE)")
    a = ap.parse_args()
    model = a.model
    if os.path.isdir(model):
        model = os.path.join(model, "model.onnx")
    if not os.path.exists(model):
        print("no such model: %s" % model, file=sys.stderr)
        return 2
    ks, os_ = [], []
    for r in range(a.rounds):
        ks.append(kiln_once(a, model, a.runs))
        os_.append(ort_once(a, model, a.runs))

    def median(runs):
        keys = set().union(*runs)
        return {k: statistics.median([r.get(k, 0.0) for r in runs]) for k in keys}

    k, o = median(ks), median(os_)
    tk, to = sum(k.values()), sum(o.values())
    print("%s, %d thread(s), %d rounds of %d runs: in nodes kiln %.3f ms, onnxruntime %.3f "
          "ms (profilers on), kiln/onnxruntime %.2f" % (model, a.threads, a.rounds, a.runs, tk,
                                                        to, tk / to if to else float("nan")))
    rows = sorted(set(k) | set(o), key=lambda g: -(k.get(g, 0.0) - o.get(g, 0.0)))
    print("%-60s %10s %10s %10s" % ("group", "kiln ms", "ort ms", "diff"))
    for g in rows[: a.top]:
        print("%-60s %10.4f %10.4f %+10.4f" % (g[-60:], k.get(g, 0.0), o.get(g, 0.0),
                                               k.get(g, 0.0) - o.get(g, 0.0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
