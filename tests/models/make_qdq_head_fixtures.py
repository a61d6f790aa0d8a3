#!/usr/bin/env python3
"""QDQ models of a small classifier head, quantized by onnxruntime's quantize_static in
the QDQ format, for kiln's int8 Gemm and global average pooling (fold_qdq's
QLinearGemm and QLinearGlobalAveragePool):

  x [3, 4, 9, 11] -> Conv 3x3 (4 -> 8) -> Relu -> GlobalAveragePool -> Flatten
    -> Gemm (8 -> 17, transB, bias) -> Relu -> Gemm (17 -> 5, transB, bias)
    -> MatMul (5 -> 7) -> Add (bias [7]) -> y

  qdq_head/      uint8 activations, per-channel int8 weights
  qdq_head_s8/   int8 activations, per-channel int8 weights

Random weights (seeded), calibrated on 8 seeded random batches, reduce_range (7-bit
weights: docs/precision.md); the expected outputs are onnxruntime's on a seeded input.
The script prints the quantized ops it wrote and, for each folder, the output's scale
(one step): kiln's folded graph rounds exact integer sums once where onnxruntime's
float32 nodes between the Q/DQ pairs may round a float32 sum, so the two could differ
by one step; on these inputs they agree exactly (tests/meson.build's models suite
checks them at kiln check's default tolerance).

    /work/main/.venv/bin/python tests/models/make_qdq_head_fixtures.py
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)

here = os.path.dirname(os.path.abspath(__file__))
SHAPE = [3, 4, 9, 11]


class Batches(CalibrationDataReader):
    def __init__(self):
        self.i = 0

    def get_next(self):
        if self.i >= 8:
            return None
        self.i += 1
        return {"x": np.random.default_rng(100 + self.i).standard_normal(SHAPE).astype(np.float32)}


def float_model(path):
    rng = np.random.default_rng(7)

    def init(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [init("w0", [8, 4, 3, 3], 0.3), init("b0", [8], 0.1),
             init("w1", [17, 8], 0.5), init("b1", [17], 0.2),
             init("w2", [5, 17], 0.3), init("b2", [5], 0.2),
             init("w3", [5, 7], 0.5), init("b3", [7], 0.2)]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("GlobalAveragePool", ["r0"], ["p0"]),
        helper.make_node("Flatten", ["p0"], ["f0"]),
        helper.make_node("Gemm", ["f0", "w1", "b1"], ["g1"], transB=1),
        helper.make_node("Relu", ["g1"], ["r1"]),
        helper.make_node("Gemm", ["r1", "w2", "b2"], ["g2"], transB=1),
        helper.make_node("MatMul", ["g2", "w3"], ["m3"]),
        helper.make_node("Add", ["m3", "b3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "qdq_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SHAPE[0], 7])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def make(folder, activations, src):
    out = os.path.join(here, folder)
    data = os.path.join(out, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    quantize_static(src, path, Batches(), quant_format=QuantFormat.QDQ,
                    activation_type=activations, weight_type=QuantType.QInt8,
                    per_channel=True, reduce_range=True)
    x = np.random.default_rng(42).standard_normal(SHAPE).astype(np.float32)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    outs = sess.run(None, {"x": x})
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    for k, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())
    model = onnx.load(path)
    ops = {}
    for n in model.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    last = [n for n in model.graph.node if n.output[0] == "y"][0]
    scale = [i for i in model.graph.initializer if i.name == last.input[1]][0]
    print(folder, ops, "output scale", numpy_helper.to_array(scale))


if __name__ == "__main__":
    src = os.path.join(here, "qdq_head_float.onnx")
    float_model(src)
    make("qdq_head", QuantType.QUInt8, src)
    make("qdq_head_s8", QuantType.QInt8, src)
    os.remove(src)
