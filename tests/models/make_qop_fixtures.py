#!/usr/bin/env python3
"""QOperator models: tests/models/ts/mobile_onnx quantized by onnxruntime's own
quantize_static with QuantFormat.QOperator, which writes onnxruntime's contrib ops of
domain com.microsoft (QLinearMul, QLinearSigmoid, QLinearConcat,
QLinearGlobalAveragePool, QGemm) beside ONNX's QLinearConv, QuantizeLinear and
DequantizeLinear:

  qop_mobile/      per-tensor weights
  qop_mobile_pc/   per-channel weights (QGemm's B scale per output column)
  qop_ops/         written by hand: the contrib ops the quantizer did not write above,
                   QLinearLeakyRelu, QLinearAveragePool (padded, ceil mode), QLinearAdd
                   (of a broadcast second branch), QLinearSoftmax, and com.microsoft's
                   QuantizeLinear and DequantizeLinear

uint8 activations, int8 weights, calibrated on 8 seeded random batches; the expected
outputs are onnxruntime's on a seeded input. reduce_range (7-bit weights) because
onnxruntime's AVX2 u8s8 kernels saturate their 16-bit pair sums with full-range
weights (the first QLinearConv of this model then differs from the exact result by up
to 59 steps in 138 of 2048 values, on an AVX2 Zen 3), which would make onnxruntime the
wrong oracle; with it, kiln matches onnxruntime exactly in every quantized tensor.

    .venv/bin/python tests/models/make_qop_fixtures.py
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)

here = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(here, "ts", "mobile_onnx", "model.onnx")
SHAPE = [2, 3, 16, 16]


class Batches(CalibrationDataReader):
    def __init__(self, name):
        self.name, self.i = name, 0

    def get_next(self):
        if self.i >= 8:
            return None
        self.i += 1
        return {self.name: np.random.default_rng(self.i).standard_normal(SHAPE).astype(np.float32)}


def make(folder, per_channel):
    out = os.path.join(here, folder)
    data = os.path.join(out, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    name = onnx.load(SRC).graph.input[0].name
    path = os.path.join(out, "model.onnx")
    quantize_static(SRC, path, Batches(name), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=per_channel, reduce_range=True)
    ops = sorted({n.op_type for n in onnx.load(path).graph.node if n.domain == "com.microsoft"})
    x = np.random.default_rng(42).standard_normal(SHAPE).astype(np.float32)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    outs = sess.run(None, {name: x})
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, name).SerializeToString())
    for k, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())
    print(folder, "contrib ops:", ", ".join(ops))


def write_case(folder, path, feeds):
    data = os.path.join(here, folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    for k, (name, x) in enumerate(feeds.items()):
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, name).SerializeToString())
    for k, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())


def ops():
    ms = "com.microsoft"

    def q(name, scale, zero):
        return [numpy_helper.from_array(np.array(scale, np.float32), name + "_s"),
                numpy_helper.from_array(np.array(zero, np.uint8), name + "_z")]

    inits = (q("x", 0.05, 120) + q("r", 0.04, 100) + q("p", 0.035, 90) + q("b", 0.03, 128) +
             q("a", 0.06, 110) + q("y", 1 / 256, 0))
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"], domain=ms),
        helper.make_node("QLinearLeakyRelu", ["xq", "x_s", "x_z", "r_s", "r_z"], ["rq"],
                         domain=ms, alpha=0.2),
        helper.make_node("QLinearAveragePool", ["rq", "r_s", "r_z", "p_s", "p_z"], ["pq"],
                         domain=ms, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                         ceil_mode=1, count_include_pad=0),
        helper.make_node("QuantizeLinear", ["bias", "b_s", "b_z"], ["bq"], domain=ms),
        helper.make_node("QLinearAdd", ["pq", "p_s", "p_z", "bq", "b_s", "b_z", "a_s", "a_z"],
                         ["aq"], domain=ms),
        helper.make_node("QLinearSoftmax", ["aq", "a_s", "a_z", "y_s", "y_z"], ["yq"],
                         domain=ms, axis=-1, opset=13),
        helper.make_node("DequantizeLinear", ["yq", "y_s", "y_z"], ["y"], domain=ms),
    ]
    graph = helper.make_graph(
        nodes, "qop_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 9]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, [3, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ms, 1)])
    os.makedirs(os.path.join(here, "qop_ops"), exist_ok=True)
    path = os.path.join(here, "qop_ops", "model.onnx")
    onnx.save(model, path)
    rng = np.random.default_rng(7)
    write_case("qop_ops", path, {"x": (rng.standard_normal([2, 3, 7, 9]) * 2).astype(np.float32),
                                 "bias": rng.uniform(-3, 3, [3, 1, 1]).astype(np.float32)})
    print("qop_ops")


if __name__ == "__main__":
    make("qop_mobile", False)
    make("qop_mobile_pc", True)
    ops()
