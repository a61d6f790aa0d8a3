"""kiln's QLinearGlobalAveragePool rounding (src/ir/ops.def) against onnxruntime's own
com.microsoft QLinearGlobalAveragePool kernel, on random planes.

usage: check_qgap_ort.py

kiln's kernels compute acc = sum(X - x_zero_point) over each plane's S codes (exact),
m = x_scale / (y_scale * S) and y = saturate(rint(float(acc) * m) + y_zero_point), each
step in float32. This script writes that formula in NumPy float32 and requires
onnxruntime's outputs to be the same codes, for uint8 and int8, 40 random shapes
[N, C, H, W] (H, W 1 to 39), scales and zero points. Exits 1 on any difference.
(The kernels' own agreement with this formula is tests/unit/test_qpool.c's.)
"""
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper


def ort_pool(x, sx, zx, sy, zy, tp):
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "sx", "zx", "sy", "zy"], ["y"],
                            domain="com.microsoft", channels_last=0)
    graph = helper.make_graph(
        [node], "qgap", [helper.make_tensor_value_info("x", tp, list(x.shape))],
        [helper.make_tensor_value_info("y", tp, None)],
        [helper.make_tensor("sx", TensorProto.FLOAT, [], [sx]),
         helper.make_tensor("zx", tp, [], [int(zx)]),
         helper.make_tensor("sy", TensorProto.FLOAT, [], [sy]),
         helper.make_tensor("zy", tp, [], [int(zy)])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def kiln_pool(x, sx, zx, sy, zy, lo, hi):
    n, c = x.shape[:2]
    size = x.shape[2] * x.shape[3]
    acc = x.reshape(n * c, size).astype(np.int64).sum(1) - int(zx) * size
    m = np.float32(sx / np.float32(sy * np.float32(size)))
    q = acc.astype(np.float32) * m
    return np.clip(np.rint(q).astype(np.int64) + int(zy), lo, hi - 1)


def main():
    rng = np.random.default_rng(0)
    compared = differing = 0
    for trial in range(40):
        u8 = trial % 2 == 0
        dt, tp = (np.uint8, TensorProto.UINT8) if u8 else (np.int8, TensorProto.INT8)
        lo, hi = (0, 256) if u8 else (-128, 128)
        shape = [int(rng.integers(1, 4)), int(rng.integers(1, 70)), int(rng.integers(1, 40)),
                 int(rng.integers(1, 40))]
        x = rng.integers(lo, hi, size=shape).astype(dt)
        sx, sy = np.float32(rng.uniform(0.001, 0.1)), np.float32(rng.uniform(0.0005, 0.05))
        zx, zy = dt(rng.integers(lo, hi)), dt(rng.integers(lo, hi))
        got = ort_pool(x, sx, zx, sy, zy, tp).reshape(-1).astype(np.int64)
        want = kiln_pool(x, sx, zx, sy, zy, lo, hi)
        compared += want.size
        differing += int((got != want).sum())
    print(f"{compared} outputs compared, {differing} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
