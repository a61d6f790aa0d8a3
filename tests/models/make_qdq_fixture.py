#!/usr/bin/env python3
"""tests/models/qdq/model.onnx: QuantizeLinear then DequantizeLinear over a float
[1, 32, 64, 64] tensor, with the scalar zero point and [1] scale that onnxruntime's own
quantizer writes. kiln runs both on its portable reference kernels, so `kiln bench`
must warn that most of a run is there (tests/run_bench_cli.sh).

    .venv/bin/python tests/models/make_qdq_fixture.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

here = os.path.dirname(os.path.abspath(__file__))
scale = numpy_helper.from_array(np.array([0.05], np.float32), "scale")
zero = numpy_helper.from_array(np.array(128, np.uint8), "zero")
nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])]
graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 64, 64])],
                          [scale, zero])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(model)
onnx.save(model, os.path.join(here, "qdq", "model.onnx"))
