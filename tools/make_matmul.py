#!/usr/bin/env python3
"""Single-MatMul models for benchmarking matrix products, as zoo folders.

For every M_K_N given, writes OUT/matmul_M_K_N/model.onnx (Y = X W, X float32 [M, K]
an input, W float32 [K, N] a constant of seeded random values in [-0.5, 0.5)) and
OUT/matmul_M_K_N/test_data_set_0/input_0.pb (a seeded random X), the layout that
tools/bench_vs_ort.py --zoo OUT --models matmul_M_K_N and `kiln bench` read.

Usage:
    .venv/bin/python tools/make_matmul.py --out ~/.cache/kiln-zoo 8_768_3072 128_768_3072
"""
import argparse
import os
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the folder to write matmul_M_K_N into")
    ap.add_argument("shapes", nargs="+", metavar="M_K_N", help="the product's sizes")
    args = ap.parse_args()

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    for spec in args.shapes:
        if not re.fullmatch(r"[1-9]\d*_[1-9]\d*_[1-9]\d*", spec):
            sys.exit(f"make_matmul: {spec!r} is not M_K_N (three positive integers)")
        m, k, n = (int(v) for v in spec.split("_"))
        rng = np.random.default_rng(m * 1_000_003 + k * 1009 + n)
        w = (rng.random((k, n), dtype=np.float32) - 0.5).astype(np.float32)
        x = (rng.random((m, k), dtype=np.float32) - 0.5).astype(np.float32)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "W"], ["y"])], f"matmul_{spec}",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
            [numpy_helper.from_array(w, "W")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        folder = os.path.join(args.out, f"matmul_{spec}")
        os.makedirs(os.path.join(folder, "test_data_set_0"), exist_ok=True)
        onnx.save(model, os.path.join(folder, "model.onnx"))
        with open(os.path.join(folder, "test_data_set_0", "input_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, "x").SerializeToString())
        print(folder)


if __name__ == "__main__":
    main()
