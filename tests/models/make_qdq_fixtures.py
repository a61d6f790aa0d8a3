#!/usr/bin/env python3
"""QDQ models: tests/models/ts/mobile_onnx quantized by onnxruntime's quantize_static
in the QDQ format (QuantizeLinear/DequantizeLinear pairs around float ops), as a user
makes an int8 model today:

  qdq_mobile/      uint8 activations, per-channel int8 weights
  qdq_mobile_s8/   int8 activations, per-channel int8 weights

Calibrated on 8 seeded random batches; the expected outputs are onnxruntime's on a
seeded input. reduce_range (7-bit weights), as in make_qop_fixtures.py: onnxruntime's
AVX2 u8s8 kernels saturate their 16-bit pair sums with full-range weights, and so
would kiln's oneDNN int8 convolutions (docs/precision.md); with it both are exact.
kiln folds every convolution into QLinearConv at -O2 (fold_qdq) and runs it on
oneDNN's int8 primitives; tests/meson.build checks the folders at -O0, -O2 and -O3
with --fast-only.

    .venv/bin/python tests/models/make_qdq_fixtures.py
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

from make_qop_fixtures import SHAPE, SRC, Batches

here = os.path.dirname(os.path.abspath(__file__))


def make(folder, activations):
    out = os.path.join(here, folder)
    data = os.path.join(out, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    name = onnx.load(SRC).graph.input[0].name
    path = os.path.join(out, "model.onnx")
    quantize_static(SRC, path, Batches(name), quant_format=QuantFormat.QDQ,
                    activation_type=activations, weight_type=QuantType.QInt8,
                    per_channel=True, reduce_range=True)
    x = np.random.default_rng(42).standard_normal(SHAPE).astype(np.float32)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    outs = sess.run(None, {name: x})
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, name).SerializeToString())
    for k, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())
    ops = {}
    for n in onnx.load(path).graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    print(folder, ops)


if __name__ == "__main__":
    make("qdq_mobile", QuantType.QUInt8)
    make("qdq_mobile_s8", QuantType.QInt8)
