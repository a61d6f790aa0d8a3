#!/usr/bin/env python3
"""QDQ int8 models from the zoo's fp32 ones, as a user makes them with onnxruntime.

For each NAME, reads ZOO/NAME/model.onnx (tools/export_zoo.py writes it; run that
first when it is missing) and writes ZOO/NAME-qdq-u8 (uint8 activations) and, with
--int8-activations, ZOO/NAME-qdq-s8 (int8 activations): onnxruntime's quantize_static
in the QDQ format, per-channel int8 weights, calibrated (MinMax) on --calib random
inputs (the test input plus noise, seeded). Each folder holds model.onnx and
test_data_set_0/{input_0,output_K}.pb, whose outputs are onnxruntime's int8 results
(ORT_ENABLE_ALL, 1 thread) on the fp32 model's test input, so that
`kiln check ZOO/NAME-qdq-u8` compares kiln against onnxruntime int8. meta.json gives
the output scale of each output (the scale of its last DequantizeLinear, when there
is one), for reading errors in quantization steps.

With --reduce-range the weights are 7-bit (quantize_static's reduce_range), folders
NAME-qdq-u8-rr: on AVX2 without VNNI only those run exactly on int8 kernels, kiln's
and onnxruntime's alike (docs/precision.md).

--compare KILN (after the folders exist) prints, per folder, how far apart the
outputs of kiln at -O0, -O2 and -O3 and onnxruntime with all its graph optimizations
(its int8 kernels) and with none (the QDQ graph in float32) are, in steps of the
output's quantization scale (meta.json): the largest and the mean difference.

Nothing is downloaded; the models are never committed (a few MB each).

Usage:
    /work/main/.venv/bin/python tools/make_qdq_zoo.py \\
        --models mobilenet_v2,squeezenet1_1,resnet50,efficientnet_b0,regnet_y_400mf
    /work/main/.venv/bin/python tools/make_qdq_zoo.py --reduce-range
    /work/main/.venv/bin/python tools/make_qdq_zoo.py --reduce-range --compare build-rel/tools/kiln
"""

import argparse
import json
import os
import sys

DEFAULT_MODELS = "mobilenet_v2,squeezenet1_1,resnet50,efficientnet_b0,regnet_y_400mf"


def read_pb(path):
    import onnx
    import onnx.numpy_helper

    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, onnx.numpy_helper.to_array(t)


def save_pb(array, name, path):
    import onnx.numpy_helper

    t = onnx.numpy_helper.from_array(array, name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


class Reader:
    """calib inputs: the test input plus seeded noise of its own spread."""

    def __init__(self, name, x, n, seed):
        import numpy as np

        g = np.random.default_rng(seed)
        spread = float(x.std()) or 1.0
        self.items = [{name: x}] + [
            {name: (x + g.standard_normal(x.shape) * 0.5 * spread).astype(x.dtype)}
            for _ in range(n - 1)
        ]

    def get_next(self):
        return self.items.pop(0) if self.items else None


def output_scales(model):
    """graph output name -> scale of the DequantizeLinear that makes it, if any."""
    import onnx.numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    made = {o: n for n in model.graph.node for o in n.output}
    scales = {}
    for out in model.graph.output:
        n = made.get(out.name)
        if n is not None and n.op_type == "DequantizeLinear" and n.input[1] in inits:
            scales[out.name] = float(onnx.numpy_helper.to_array(inits[n.input[1]]).ravel()[0])
    return scales


def folder_name(name, act, reduce_range):
    return "%s-qdq-%s%s" % (name, act, "-rr" if reduce_range else "")


def make_one(zoo, name, act, calib, seed, reduce_range=False):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src = os.path.join(zoo, name)
    out = os.path.join(zoo, folder_name(name, act, reduce_range))
    case = os.path.join(out, "test_data_set_0")
    os.makedirs(case, exist_ok=True)
    in_name, x = read_pb(os.path.join(src, "test_data_set_0", "input_0.pb"))
    pre = os.path.join(out, "pre.onnx")
    quant_pre_process(os.path.join(src, "model.onnx"), pre, skip_symbolic_shape=True)
    path = os.path.join(out, "model.onnx")
    quantize_static(pre, path, Reader(in_name, x, calib, seed), quant_format=QuantFormat.QDQ,
                    per_channel=True, weight_type=QuantType.QInt8,
                    activation_type=QuantType.QUInt8 if act == "u8" else QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, reduce_range=reduce_range)
    os.remove(pre)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    save_pb(x, in_name, os.path.join(case, "input_0.pb"))
    outs = sess.run(None, {in_name: x})
    for k, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
        save_pb(np.asarray(v), o.name, os.path.join(case, "output_%d.pb" % k))
    model = onnx.load(path)
    ops = {}
    for n in model.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    meta = dict(name=name, activations=act, reduce_range=reduce_range, calib_inputs=calib,
                seed=seed,
                onnxruntime=ort.__version__, ops=ops, output_scales=output_scales(model),
                model_bytes=os.path.getsize(path))
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return out


def kiln_outputs(kiln, folder, level):
    import subprocess
    import tempfile

    import numpy as np

    path = os.path.join(folder, "test_data_set_0", "input_0.pb")
    name = read_pb(path)[0]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([kiln, "run", os.path.join(folder, "model.onnx"), level, "--format",
                        "npy", "--input", "%s=%s" % (name, path), "--output-dir", out],
                       check=True, capture_output=True)
        files = sorted(f for f in os.listdir(out) if f.endswith(".npy"))
        return np.load(os.path.join(out, files[0]))


def ort_outputs(folder, optimized):
    import onnxruntime as ort

    name, x = read_pb(os.path.join(folder, "test_data_set_0", "input_0.pb"))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    if not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(os.path.join(folder, "model.onnx"), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {name: x})[0]


def compare(kiln, folder):
    """Largest and mean differences, in output steps, between every pair of runs."""
    import numpy as np

    with open(os.path.join(folder, "meta.json")) as f:
        step = list(json.load(f)["output_scales"].values())[0]
    runs = {"ort": ort_outputs(folder, True), "ort-float": ort_outputs(folder, False)}
    for level in ("-O0", "-O2", "-O3"):
        runs["kiln" + level] = kiln_outputs(kiln, folder, level)
    names = list(runs)
    print(os.path.basename(folder))
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            d = np.abs(runs[a].astype(np.float64) - runs[b]) / step
            print("  %-10s vs %-10s  max %5.1f steps, mean %6.3f, top-1 %s" %
                  (a, b, d.max(), d.mean(),
                   "same" if runs[a].argmax() == runs[b].argmax() else "differs"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zoo", default=os.path.expanduser("~/.cache/kiln-zoo"))
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--calib", type=int, default=4, help="calibration inputs (default 4)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--int8-activations", action="store_true",
                    help="also int8 activations (NAME-qdq-s8)")
    ap.add_argument("--reduce-range", action="store_true",
                    help="7-bit weights (quantize_static's reduce_range), folders "
                         "NAME-qdq-u8-rr: exact on AVX2 without VNNI (docs/precision.md)")
    ap.add_argument("--force", action="store_true", help="remake existing folders")
    ap.add_argument("--compare", metavar="KILN", help="compare the folders' outputs (above)")
    a = ap.parse_args()
    acts = ["u8"] + (["s8"] if a.int8_activations else [])
    if a.compare:
        for name in a.models.split(","):
            for act in acts:
                compare(a.compare, os.path.join(a.zoo, folder_name(name, act, a.reduce_range)))
        return
    for name in a.models.split(","):
        if not os.path.exists(os.path.join(a.zoo, name, "model.onnx")):
            sys.exit("%s: no %s/%s/model.onnx; export it first: tools/export_zoo.py "
                     "--models %s" % (name, a.zoo, name, name))
        for act in acts:
            out = os.path.join(a.zoo, folder_name(name, act, a.reduce_range))
            if os.path.exists(os.path.join(out, "meta.json")) and not a.force:
                print("have", out)
                continue
            print("made", make_one(a.zoo, name, act, a.calib, a.seed, a.reduce_range),
                  flush=True)


if __name__ == "__main__":
    main()
