#!/usr/bin/env python3
"""tests/models/sum_precision: convolutions whose residual Add is much larger than
their own result, the shape of RAFT's `coords1 = coords1 + flow_head(h)` (docs/passes.md,
"Accuracy against float64"). The expected outputs are the float64 result rounded once to
float32, and tests/meson.build checks them with --rtol 0 --atol 1e-4 at -O0, -O2, -O3:
half a float32 step at 1000 is 3.05e-5, so a kiln that adds the residual to the finished
convolution passes, and one that starts the convolution's sum from the residual (oneDNN's
sum post-op on its direct and gemm convolutions: each of the 1,152 or 144 products then
rounds at the residual's magnitude) fails, by 1.7e-3 (28 steps).

    x [1, 128, 12, 12]
    a = Conv3x3(x; 128 -> 2) + r2           r2 [1, 2, 12, 12]: +-1000 + N(0, 4)
    h = Conv1x1(x; 128 -> 16)               (at -O3 h is held channels-last)
    b = Relu(Conv3x3(h; 16 -> 16) + r16)    r16 [1, 16, 12, 12]: +-1000 (by channel) + N(0, 4)
    c = Abs(Conv3x3(h; 16 -> 16) + (r + r16))    r [1, 16, 12, 12], an input: N(0, 1)

c's residual is a tensor the graph computes and reads nowhere else, whose buffer the
sum may take over (kiln then copies it aside before the convolution writes there); the
Abs keeps that sum out of the graph's outputs, which have buffers of their own. A
session shares buffers from its second run on (its first plans them), so there are two
data sets: two draws of x and r.

The convolutions' own results are about N(0, 1). The Relu after b's sum checks that
the activation still comes after the residual (half of b's channels are near -1000).

    .venv/bin/python tests/models/make_sum_precision.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "sum_precision")


def conv(x, w, b, pad):
    """float64 2-D convolution, stride 1, batch 1: x [C, H, W], w [K, C, kh, kw]."""
    c, h, wd = x.shape
    k, _, kh, kw = w.shape
    xp = np.zeros((c, h + 2 * pad, wd + 2 * pad))
    xp[:, pad:pad + h, pad:pad + wd] = x
    y = np.zeros((k, h, wd))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("kc,chw->khw", w[:, :, i, j], xp[:, i:i + h, j:j + wd])
    return y + b[:, None, None]


def main():
    rng = np.random.default_rng(21)
    f32 = np.float32
    w_a = (rng.standard_normal((2, 128, 3, 3)) / np.sqrt(128 * 9)).astype(f32)
    b_a = (rng.standard_normal(2) * 0.1).astype(f32)
    sign2 = np.array([1, -1], dtype=f32)[None, :, None, None]
    r2 = (1000 * sign2 + 4 * rng.standard_normal((1, 2, 12, 12))).astype(f32)
    w_h = (rng.standard_normal((16, 128, 1, 1)) / np.sqrt(128)).astype(f32)
    w_b = (rng.standard_normal((16, 16, 3, 3)) / np.sqrt(16 * 9)).astype(f32)
    b_b = (rng.standard_normal(16) * 0.1).astype(f32)
    w_c = (rng.standard_normal((16, 16, 3, 3)) / np.sqrt(16 * 9)).astype(f32)
    sign16 = np.where(np.arange(16) % 2 == 0, 1, -1).astype(f32)[None, :, None, None]
    r16 = (1000 * sign16 + 4 * rng.standard_normal((1, 16, 12, 12))).astype(f32)

    nodes = [
        helper.make_node("Conv", ["x", "w_a", "b_a"], ["ca"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["ca", "r2"], ["a"]),
        helper.make_node("Conv", ["x", "w_h"], ["h"]),
        helper.make_node("Conv", ["h", "w_b", "b_b"], ["cb"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["cb", "r16"], ["sb"]),
        helper.make_node("Relu", ["sb"], ["b"]),
        helper.make_node("Add", ["r", "r16"], ["rr"]),
        helper.make_node("Conv", ["h", "w_c"], ["cc"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["cc", "rr"], ["sc"]),
        helper.make_node("Abs", ["sc"], ["c"]),
    ]
    inits = dict(w_a=w_a, b_a=b_a, r2=r2, w_h=w_h, w_b=w_b, b_b=b_b, r16=r16, w_c=w_c)
    value = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
    graph = helper.make_graph(
        nodes, "sum_precision", [value("x", [1, 128, 12, 12]), value("r", [1, 16, 12, 12])],
        [value("a", [1, 2, 12, 12]), value("b", [1, 16, 12, 12]), value("c", [1, 16, 12, 12])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="make_sum_precision.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(OUT, exist_ok=True)
    onnx.save(model, os.path.join(OUT, "model.onnx"))

    d = lambda t: t.astype(np.float64)
    for case in range(2):
        x = rng.standard_normal((1, 128, 12, 12)).astype(f32)
        r = rng.standard_normal((1, 16, 12, 12)).astype(f32)
        h = conv(d(x[0]), d(w_h), np.zeros(16), 0)
        a = conv(d(x[0]), d(w_a), d(b_a), 1) + d(r2[0])
        b = np.maximum(conv(h, d(w_b), d(b_b), 1) + d(r16[0]), 0)
        # r + r16 is a float32 tensor in every runtime: rounded so here too
        c = np.abs(conv(h, d(w_c), np.zeros(16), 1) + d(r[0] + r16[0]))
        folder = os.path.join(OUT, "test_data_set_%d" % case)
        os.makedirs(folder, exist_ok=True)
        for name, t, path in (("x", x, "input_0.pb"), ("r", r, "input_1.pb"),
                              ("a", a[None].astype(f32), "output_0.pb"),
                              ("b", b[None].astype(f32), "output_1.pb"),
                              ("c", c[None].astype(f32), "output_2.pb")):
            with open(os.path.join(folder, path), "wb") as f:
                f.write(numpy_helper.from_array(t, name).SerializeToString())


if __name__ == "__main__":
    main()
