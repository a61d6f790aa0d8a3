#!/usr/bin/env python3
"""How far kiln's float32 outputs are from the float64 truth, next to onnxruntime's and
PyTorch's: one markdown row per model and runtime.

Reads the zoo folders of tools/export_zoo.py (NAME/model.onnx, test_data_set_0/input_K.pb,
float64_outputs/output_K.pb: the model run in float64 by PyTorch; torch_outputs/: PyTorch
float32 eager). For each model it runs

    kiln run -O0/-O2/-O3 (each --config adds a column: KILN_ISA and --passes)
    onnxruntime, graph optimizations ORT_ENABLE_ALL and ORT_DISABLE_ALL
    PyTorch float32 (the folder's torch_outputs, where it has them)

and prints, per runtime, the largest absolute error against float64 over all outputs and
the relative RMS error (root mean square of the error over root mean square of the
float64 output, over all outputs together).

    .venv/bin/python tools/accuracy_vs_fp64.py build/tools/kiln \\
        --models resnet50,squeezenet1_1 [--cache ~/.cache/kiln-zoo-bench] \\
        [--config 'O2 generic=-O2 isa=generic' --config 'O2 -fuse_sum=-O2 -fuse_sum']

A --config is LABEL=ARGS: ARGS are kiln run's options (-O0..-O3, a pass list written
as -name or +name, which becomes --passes, and isa=LEVEL, which sets KILN_ISA). Without
--config the columns are kiln -O0, -O2, -O3 at the machine's ISA level. Needs numpy,
onnx and onnxruntime (no torch). Not run by the tests: docs/benchmarks.md ("Accuracy
against float64") holds its output.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_zoo  # noqa: E402  (read_pb)

DEFAULT_CONFIGS = ["kiln -O0=-O0", "kiln -O2=-O2", "kiln -O3=-O3"]


def parse_config(text):
    """'LABEL=ARGS' -> (label, kiln run arguments, environment additions)."""
    label, _, spec = text.partition("=")
    args, passes, env = [], [], {}
    for tok in spec.split():
        if tok.startswith("isa="):
            env["KILN_ISA"] = tok[4:]
        elif tok.startswith("-O"):
            args.append(tok)
        elif tok[0] in "+-":
            passes.append(tok)
        else:
            args.append(tok)
    if passes:
        args += ["--passes", ",".join(passes)]
    return label.strip(), args, env


def case_files(folder):
    """[(input name, path)], [float64 outputs], [PyTorch float32 outputs or None]."""
    case = os.path.join(folder, "test_data_set_0")
    inputs, f64, pt = [], [], []
    k = 0
    while os.path.exists(os.path.join(case, "input_%d.pb" % k)):
        path = os.path.join(case, "input_%d.pb" % k)
        inputs.append((export_zoo.read_pb(path)[0], path))
        k += 1
    k = 0
    while os.path.exists(os.path.join(folder, "float64_outputs", "output_%d.pb" % k)):
        f64.append(export_zoo.read_pb(os.path.join(folder, "float64_outputs",
                                                   "output_%d.pb" % k))[1])
        tp = os.path.join(folder, "torch_outputs", "output_%d.pb" % k)
        pt.append(export_zoo.read_pb(tp)[1] if os.path.exists(tp) else None)
        k += 1
    return inputs, f64, pt


def errors(outs, f64):
    """(largest absolute error, relative RMS error) of outs against f64, all outputs."""
    max_abs, sq_err, sq_ref = 0.0, 0.0, 0.0
    for o, r in zip(outs, f64):
        d = o.astype(np.float64) - r.astype(np.float64)
        max_abs = max(max_abs, float(np.abs(d).max(initial=0)))
        sq_err += float((d * d).sum())
        sq_ref += float((r.astype(np.float64) ** 2).sum())
    return max_abs, (sq_err / sq_ref) ** 0.5 if sq_ref else sq_err ** 0.5


def run_kiln(kiln, folder, inputs, args, env, threads):
    import onnx

    names = [o.name for o in onnx.load(os.path.join(folder, "model.onnx"),
                                       load_external_data=False).graph.output]
    cmd = [kiln, "run", os.path.join(folder, "model.onnx"), "--format", "npy",
           "--threads", str(threads)] + args
    for n, p in inputs:
        cmd += ["--input", "%s=%s" % (n, p)]
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run(cmd + ["--output-dir", out], capture_output=True, text=True,
                           env=dict(os.environ, **env))
        if r.returncode != 0:
            raise RuntimeError((r.stderr.strip() or r.stdout.strip()).splitlines()[-1])
        return [np.load(os.path.join(out, n + ".npy")) for n in names]


def run_ort(folder, inputs, level, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(os.path.join(folder, "model.onnx"), so,
                                providers=["CPUExecutionProvider"])
    feeds = {n: export_zoo.read_pb(p)[1] for n, p in inputs}
    return sess.run(None, feeds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kiln", help="the kiln binary")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/kiln-zoo-bench"))
    ap.add_argument("--models", default="resnet50,squeezenet1_1,efficientnet_b0,"
                    "mobilenet_v2,regnet_y_400mf", help="comma-separated folder names")
    ap.add_argument("--config", action="append", help="LABEL=ARGS (see above); repeatable")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-peers", action="store_true", help="kiln's columns only")
    a = ap.parse_args()
    import onnxruntime as ort

    configs = [parse_config(c) for c in (a.config or DEFAULT_CONFIGS)]
    print("| model | max abs out | runtime | max abs err | rel. RMS err |")
    print("|---|---|---|---|---|")
    for m in a.models.split(","):
        folder = os.path.join(os.path.expanduser(a.cache), m)
        inputs, f64, pt = case_files(folder)
        peak = max(float(np.abs(r).max()) for r in f64)
        rows = []
        for label, args, env in configs:
            try:
                rows.append((label, errors(run_kiln(os.path.abspath(a.kiln), folder, inputs,
                                                    args, env, a.threads), f64)))
            except RuntimeError as e:
                rows.append((label, str(e)))
        if not a.no_peers:
            for label, level in (("ORT all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
                                 ("ORT off", ort.GraphOptimizationLevel.ORT_DISABLE_ALL)):
                rows.append((label, errors(run_ort(folder, inputs, level, a.threads), f64)))
            if all(p is not None for p in pt):
                rows.append(("PyTorch", errors(pt, f64)))
        for label, e in rows:
            cells = ("%.2e | %.2e" % e) if isinstance(e, tuple) else "FAIL: " + e + " |"
            print("| %s | %.3g | %s | %s |" % (m, peak, label, cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
