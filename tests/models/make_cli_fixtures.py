#!/usr/bin/env python3
"""Small models for the CLI tests (tests/run_bench_cli.sh, tests/run_files_cli.sh):

  qdq/model.onnx    QuantizeLinear then DequantizeLinear over a float16 [1, 32, 64, 64]
                    tensor, with a scalar zero point and a [1] scale. kiln runs both on
                    its portable reference kernels (its fast ones take float32: the
                    float32 form onnxruntime's quantizer writes is no longer slow), so
                    `kiln bench` must warn that most of a run is there.
  names/model.onnx  x [3] -> outputs 'a/b' = x and 'a_b' = -x: two names that make the
                    same file name, which `kiln run --output-dir` must keep apart;
                    'a_b.0' = |x|, the name the first gets to keep apart from the second;
                    and two names of 300 characters alike in their first 296 (= x, -x),
                    whose file names are cut to one.
  seq_names/model.onnx  x [3] -> a sequence 's' of two tensors (x, -x) and a tensor
                    's.0' = |x|: the sequence's elements go to s.0 and s.1, which
                    `kiln run --output-dir` must keep apart from the tensor's s.0.
  empty_rows/model.onnx  LayerNormalization of x [r, 0] (scale and bias of no element):
                    given 2^40 rows of nothing, a run must end at once, not loop over them.
  empty_rows/bn_training.onnx  BatchNormalization in training mode of x [r, 3, 0], with
                    its running statistics as outputs: the same for 2^40 x 3 empty rows.
  empty_rows/bn_grad.onnx  kiln's BatchNormGrad of dy, x [r, 3, 0]: the same (dScale and
                    dB are 0).
  empty_rows/split_seq.onnx  SplitToSequence of x [r, 0] (no split, keepdims 0): 2^40 rows
                    make a sequence of 2^40 empty tensors, whose headers alone pass any
                    --max-tensor-bytes: refused as a limit, before anything of that count
                    is made.
  huge_window/      an ONNX test-case folder: MaxPool, AveragePool (with and without
                    count_include_pad) and LpPool whose windows of 2^40 taps (2^40 by
                    2^40 in 2-D) lie almost all in padding over a 1-element input.
                    Only the taps inside the input may cost time; the expected outputs
                    are worked out by hand (x, x, x / 2^40, |x|).
  seq_many/model.onnx  no input -> a sequence 's' of 70,000 one-element tensors
                    (SplitToSequence of ConstantOfShape): `kiln run --output-dir` would
                    write a file for each, past its limit of 65,536, and must refuse
                    before writing any.
  bf16_out/model.onnx  x [3] float32 -> y bfloat16: `kiln run --output-dir` must refuse
                    .npy (NumPy has no bfloat16) before it runs, and name --format pb.
  many_nodes/       an ONNX test-case folder: 40,000 pairs of Add(., 0.5) and Relu in a
                    chain, 80,000 nodes (the passes once asked who read each value by
                    scanning the whole graph: 47 s for such a model at -O2). x holds
                    multiples of 0.25, so x + 20000 is exact at every step.

  check_names/      an ONNX test-case folder: x [3], w [3] -> 'a' = x + w, 'b' = x - w,
                    whose outputs differ at every element, for `kiln check`'s binding of
                    the files by name (tests/run_check_names.sh): test_data_set_0 named
                    as the model's, and in variants/ a's values without a name
                    (a_unnamed.pb) and named 'sum' (a_as_sum.pb), and b's named 'b'
                    but 0.5 off (b_wrong.pb).
  long_stft/        an ONNX test-case folder: the STFT of a signal of 16,384 samples
                    made from its shape (ConstantOfShape 0.5), frames of 2,048 at step 1,
                    summed. As a direct sum (kiln once did it that way) that is 7 * 10^10
                    steps, about a minute; as FFTs, under a second. Every frame's
                    spectrum is 1024 at bin 0 and 0 elsewhere: the sum is frames * 1024.

    .venv/bin/python tests/models/make_cli_fixtures.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

here = os.path.dirname(os.path.abspath(__file__))


def save(model, folder):
    onnx.checker.check_model(model)
    os.makedirs(os.path.join(here, folder), exist_ok=True)
    onnx.save(model, os.path.join(here, folder, "model.onnx"))


def qdq():
    scale = numpy_helper.from_array(np.array([0.05], np.float16), "scale")
    zero = numpy_helper.from_array(np.array(128, np.uint8), "zero")
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])]
    shape = [1, 32, 64, 64]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, shape)],
                              [scale, zero])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "qdq")


def names():
    long = "n" * 296
    ops = (("Identity", "a/b"), ("Neg", "a_b"), ("Abs", "a_b.0"), ("Identity", long + "_one"),
           ("Neg", long + "_two"))
    nodes = [helper.make_node(op, ["x"], [out]) for op, out in ops]
    graph = helper.make_graph(nodes, "names", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [3]) for _, out in ops])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "names")


def empty_rows():
    scale = numpy_helper.from_array(np.zeros(0, np.float32), "scale")
    bias = numpy_helper.from_array(np.zeros(0, np.float32), "bias")
    nodes = [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "empty_rows",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["r", 0])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["r", 0])],
                              [scale, bias])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "empty_rows")
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 0), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    with open(os.path.join(here, "empty_rows", "x_2p40_rows.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)
    # BatchNormalization in training mode: its running statistics (one per channel) are
    # not empty, so the node runs over X of 2^40 x 3 empty rows
    stats = [numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("s", [1, 2, 3]), ("b", [0, 1, 2]), ("m", [0, 0, 0]), ("v", [1, 1, 1]))]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                              training_mode=1)]
    graph = helper.make_graph(nodes, "bn_training_empty_rows",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["r", 3, 0])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["r", 3, 0]),
                               helper.make_tensor_value_info("rm", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("rv", TensorProto.FLOAT, [3])], stats)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(here, "empty_rows", "bn_training.onnx"))
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 3, 0), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    with open(os.path.join(here, "empty_rows", "x_2p40x3x0.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)
    # kiln's BatchNormGrad: dScale and dB (one per channel) are not empty either
    nodes = [helper.make_node("BatchNormGrad", ["dy", "x", "s"], ["dx", "ds", "db"], domain="kiln")]
    graph = helper.make_graph(nodes, "bn_grad_empty_rows",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["r", 3, 0])
                               for n in ("dy", "x")],
                              [helper.make_tensor_value_info("dx", TensorProto.FLOAT, ["r", 3, 0]),
                               helper.make_tensor_value_info("ds", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("db", TensorProto.FLOAT, [3])], stats[:1])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15),
                                                    helper.make_opsetid("kiln", 1)])
    onnx.save(model, os.path.join(here, "empty_rows", "bn_grad.onnx"))
    # SplitToSequence of x [r, 0]: r empty tensors
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0)]
    graph = helper.make_graph(nodes, "split_seq_empty_rows",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["r", 0])],
                              [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(here, "empty_rows", "split_seq.onnx"))


def huge_window():
    big = 1 << 40
    x1 = np.array([[[-1.75]]], np.float32)
    x2 = np.array([[[[2.5]], [[-0.5]]]], np.float32)
    # x2 goes through an identity 1x1 Conv first, so that at -O3 its pools run on the
    # channels-last layout the Conv's oneDNN primitive hands them
    eye = numpy_helper.from_array(np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1), "eye")
    nodes = [helper.make_node("Conv", ["x2", "eye"], ["x2c"])]
    outs, expect = [], []
    for name, x, n in (("x1", x1, 1), ("x2c", x2, 2)):
        geo = dict(kernel_shape=[big] * n, pads=[big - 1] * (2 * n), strides=[big] * n)
        for op, extra, want in (("MaxPool", {}, x),
                                ("AveragePool", {}, x),
                                ("AveragePool", {"count_include_pad": 1}, x / np.float32(big) ** n),
                                ("LpPool", {"p": 2}, np.abs(x))):
            out = f"{name}_{op}_{len(outs)}"
            nodes.append(helper.make_node(op, [name], [out], **geo, **extra))
            outs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, list(x.shape)))
            expect.append(want.astype(np.float32))
    graph = helper.make_graph(nodes, "huge_window",
                              [helper.make_tensor_value_info("x1", TensorProto.FLOAT, list(x1.shape)),
                               helper.make_tensor_value_info("x2", TensorProto.FLOAT, list(x2.shape))],
                              outs, [eye])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), "huge_window")
    data = os.path.join(here, "huge_window", "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for i, (name, x) in enumerate((("x1", x1), ("x2", x2))):
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, name).SerializeToString())
    for i, (out, want) in enumerate(zip(outs, expect)):
        with open(os.path.join(data, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(want, out.name).SerializeToString())


def many_nodes():
    pairs = 40000
    x = (np.arange(8, dtype=np.float32) * np.float32(0.25)).reshape(1, 8)
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    nodes, prev = [], "x"
    for i in range(pairs):
        nodes.append(helper.make_node("Add", [prev, "half"], [f"a{i}"]))
        nodes.append(helper.make_node("Relu", [f"a{i}"], [f"r{i}"]))
        prev = f"r{i}"
    graph = helper.make_graph(nodes, "many_nodes",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 8])],
                              [half])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), "many_nodes")
    data = os.path.join(here, "many_nodes", "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    with open(os.path.join(data, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x + np.float32(pairs * 0.5), prev).SerializeToString())


def long_stft():
    samples, frame = 16384, 2048
    frames = samples - frame + 1
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["signal"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
        helper.make_node("STFT", ["signal", "step", "", "frame"], ["spectrum"]),
        helper.make_node("ReduceSum", ["spectrum"], ["total"], keepdims=0),
    ]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "step"),
             numpy_helper.from_array(np.array(frame, np.int64), "frame")]
    graph = helper.make_graph(nodes, "long_stft",
                              [helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("total", TensorProto.FLOAT, [])],
                              inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), "long_stft")
    data = os.path.join(here, "long_stft", "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(np.array([1, samples, 1], np.int64), "shape")
                .SerializeToString())
    with open(os.path.join(data, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(np.array(frames * 1024, np.float32), "total")
                .SerializeToString())


def check_names():
    nodes = [helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Sub", ["x", "w"], ["b"])]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("x", "w", "a", "b")]
    graph = helper.make_graph(nodes, "check_names", vi[:2], vi[2:])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "check_names")
    x, w = np.array([1, 2, 3], np.float32), np.array([0.5, -1, 4], np.float32)
    files = {"test_data_set_0/input_0.pb": (x, "x"), "test_data_set_0/input_1.pb": (w, "w"),
             "test_data_set_0/output_0.pb": (x + w, "a"),
             "test_data_set_0/output_1.pb": (x - w, "b"), "variants/a_unnamed.pb": (x + w, ""),
             "variants/a_as_sum.pb": (x + w, "sum"), "variants/b_wrong.pb": (x - w + 0.5, "b")}
    for path, (value, name) in files.items():
        path = os.path.join(here, "check_names", path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(numpy_helper.from_array(value, name).SerializeToString())


def seq_names():
    nodes = [helper.make_node("Neg", ["x"], ["n"]),
             helper.make_node("SequenceConstruct", ["x", "n"], ["s"]),
             helper.make_node("Abs", ["x"], ["s.0"])]
    graph = helper.make_graph(nodes, "seq_names", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("s.0", TensorProto.FLOAT, [3])])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "seq_names")


def seq_many():
    shape = helper.make_tensor("shape", TensorProto.INT64, [1], [70000])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5])),
             helper.make_node("SplitToSequence", ["c"], ["s"], axis=0)]
    graph = helper.make_graph(nodes, "seq_many", [],
                              [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [1])],
                              [shape])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "seq_many")


def bf16_out():
    cast = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)
    graph = helper.make_graph([cast], "bf16_out",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3])])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "bf16_out")


qdq()
names()
seq_names()
seq_many()
bf16_out()
empty_rows()
huge_window()
many_nodes()
long_stft()
check_names()
