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

    .venv/bin/python tools/accuracy_vs_fp64.py build/tools/kiln --convs

--convs measures single convolutions instead (random data, shapes of ResNet-50's and
EfficientNet's layers; needs torch for the float64 and PyTorch results): the relative
RMS error of kiln -O0 (the convolution on its input as given, NCHW), of kiln -O3 on a
1x1 convolution then the one measured (which -O3 then holds channels-last: kiln's
Winograd for 3x3 with 32 channels and more at the AVX2 level; its error is taken against
the float64 convolution of kiln's own output of the 1x1, a second graph output), of kiln's generic level
(KILN_ISA=generic: the reference kernels, which sum in double), of onnxruntime and of
PyTorch.

A --config is LABEL=ARGS: ARGS are kiln run's options (-O0..-O3, a pass list written
as -name or +name, which becomes --passes, and isa=LEVEL, which sets KILN_ISA). Without
--config the columns are kiln -O0, -O2, -O3 at the machine's ISA level. Needs numpy,
onnx and onnxruntime (no torch). Not run by the tests: docs/passes.md ("Accuracy
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


def conv_errors(kiln, c, k, hw, ks, stride, group, threads):
    """Relative RMS errors against float64 of Conv(x) (or, for '-O3 after 1x1', of
    Conv(Conv1x1(x))) in each runtime: [(label, error)]."""
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(c * 1000 + k + hw + ks)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    w0 = (rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    w = (rng.standard_normal((k, c // group, ks, ks)) / np.sqrt(c // group * ks * ks)).astype(
        np.float32)
    b = (rng.standard_normal(k) * 0.1).astype(np.float32)
    conv = dict(pads=[ks // 2] * 4, strides=[stride] * 2, group=group)

    def model(pre):
        nodes = ([helper.make_node("Conv", ["x", "w0"], ["x1"])] if pre else []) + [
            helper.make_node("Conv", ["x1" if pre else "x", "w", "b"], ["y"], **conv)]
        inits = dict(w=w, b=b, **({"w0": w0} if pre else {}))
        outs = ["y", "x1"] if pre else ["y"]
        g = helper.make_graph(
            nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outs],
            [numpy_helper.from_array(v, n) for n, v in inits.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m

    def truth(xx, dtype):
        t = lambda a: torch.from_numpy(a).to(dtype)
        with torch.no_grad():
            return torch.nn.functional.conv2d(t(xx), t(w), t(b), stride=stride,
                                              padding=ks // 2, groups=group).numpy()

    def kiln_run(m, args, env, out="y"):
        with tempfile.TemporaryDirectory() as d:
            onnx.save(m, os.path.join(d, "m.onnx"))
            np.save(os.path.join(d, "x.npy"), x)
            r = subprocess.run([kiln, "run", os.path.join(d, "m.onnx"), "--threads",
                                str(threads), "--input", "x=" + os.path.join(d, "x.npy"),
                                "--output-dir", d] + args, capture_output=True, text=True,
                               env=dict(os.environ, **env))
            if r.returncode != 0:
                raise RuntimeError((r.stderr.strip() or r.stdout.strip()).splitlines()[-1])
            return np.load(os.path.join(d, out + ".npy"))

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    plain, pre = model(False), model(True)
    ref = truth(x, torch.float64)
    # -O3: the convolution's input is kiln's own output of the 1x1 before it
    ref_pre = truth(kiln_run(pre, ["-O3"], {}, "x1"), torch.float64)
    rel = lambda y, r: errors([y], [r])[1]
    return [("kiln -O0", rel(kiln_run(plain, ["-O0"], {}), ref)),
            ("kiln -O3 after 1x1", rel(kiln_run(pre, ["-O3"], {}), ref_pre)),
            ("kiln generic", rel(kiln_run(plain, ["-O0"], {"KILN_ISA": "generic"}), ref)),
            ("ORT", rel(ort.InferenceSession(plain.SerializeToString(), so, providers=[
                "CPUExecutionProvider"]).run(None, {"x": x})[0], ref)),
            ("PyTorch", rel(truth(x, torch.float32), ref))]


# (channels in, out, height = width, kernel, stride, groups)
CONVS = [(32, 32, 56, 3, 1, 1), (64, 64, 56, 3, 1, 1), (256, 256, 14, 3, 1, 1),
         (512, 512, 7, 3, 1, 1), (64, 128, 56, 3, 2, 1), (1024, 256, 14, 1, 1, 1),
         (2048, 512, 7, 1, 1, 1), (96, 96, 56, 3, 1, 96)]


def main_convs(kiln, threads):
    print("| convolution | kiln -O0 | kiln -O3 after 1x1 | kiln generic | ORT | PyTorch |")
    print("|---|---|---|---|---|---|")
    for c, k, hw, ks, stride, group in CONVS:
        name = "%s%dx%d%s %d->%d, %dx%d" % ("dw " if group > 1 else "", ks, ks,
                                           " s%d" % stride if stride > 1 else "", c, k, hw, hw)
        errs = conv_errors(kiln, c, k, hw, ks, stride, group, threads)
        print("| %s | %s |" % (name, " | ".join("%.2e" % e for _, e in errs)), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kiln", help="the kiln binary")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/kiln-zoo-bench"))
    ap.add_argument("--models", default="resnet50,squeezenet1_1,efficientnet_b0,"
                    "mobilenet_v2,regnet_y_400mf", help="comma-separated folder names")
    ap.add_argument("--config", action="append", help="LABEL=ARGS (see above); repeatable")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-peers", action="store_true", help="kiln's columns only")
    ap.add_argument("--convs", action="store_true",
                    help="single convolutions instead of the models (needs torch)")
    a = ap.parse_args()
    if a.convs:
        return main_convs(os.path.abspath(a.kiln), a.threads)
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
