#!/usr/bin/env python3
"""Write kiln's bad-input corpus: tests/corpus/bad/*.onnx (and a few input files) plus
MANIFEST.tsv, the expectations tests/run_bad_corpus.sh checks.

Every case is a file that `kiln run` must refuse with exit code 1 and one line on
stderr that contains the manifest's substring: malformed files, inconsistent models,
resource bombs, and valid models given bad inputs. The output is deterministic (fixed
seeds, no timestamps), so re-running the script changes nothing.

    .venv/bin/python tests/corpus/make_bad_corpus.py

Needs onnx and numpy. The corpus stays well under 1 MB.
"""
import os
import random
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "corpus", "bad")
BASE_MODEL = os.path.join(ROOT, "models", "digits_mlp", "model.onnx")
OPSET = 13
IR = 7
FLOAT = TensorProto.FLOAT

cases = []  # (file, inputs or "-", exit code, substring, what it tests)


def case(name, data, substring, what, inputs="-"):
    """Record a case; data is the file's bytes (None when the file is already written)."""
    if data is not None:
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    assert "\t" not in substring and "\n" not in substring
    cases.append((name, inputs, 1, substring, what))


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def model_bytes(nodes, inputs, outputs, inits=(), opset=OPSET, ir=IR, value_info=(),
                domains=(), check=False):
    g = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits),
                          value_info=list(value_info))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(g, opset_imports=ops, producer_name="kiln-bad-corpus")
    m.ir_version = ir
    if check:
        onnx.checker.check_model(m)
    return m.SerializeToString()


def vi(name, dims, elem=FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def f32(name, shape, seed=0):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def parses(data):
    try:
        onnx.ModelProto.FromString(data)
        return True
    except Exception:  # DecodeError and friends: not a protobuf
        return False


# ---- a tiny protobuf writer, for files the onnx package refuses to build ----

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, b):
    if isinstance(b, str):
        b = b.encode()
    return varint(num << 3 | 2) + varint(len(b)) + b


# ---- file-level damage ----

def file_cases():
    base = open(BASE_MODEL, "rb").read()
    case("empty.onnx", b"", "empty", "a file of zero bytes")
    # Most cuts fall inside a length-delimited field (the graph runs to near the end of
    # the file), which then runs past the end: not a protobuf. A cut between two fields
    # is a valid protobuf that lacks the graph: its message must at least name the file.
    cuts = [1, 2, 3, 7, 16, 40, 100, 333, 1000, 2500, 6000, 11000, 16000, len(base) - 1]
    for n in cuts:
        name = "trunc_%05d.onnx" % n
        want = name if parses(base[:n]) else "not an ONNX model"
        case(name, base[:n], want,
             "the digits MLP cut after %d of %d bytes" % (n, len(base)))
    rng = random.Random(1234)
    for size in (1, 64, 4096):
        for _ in range(100):
            data = bytes(rng.getrandbits(8) for _ in range(size))
            if not parses(data):
                break
        case("random_%04d.onnx" % size, data, "not an ONNX model", "%d random bytes" % size)
    case("text_format.onnx", b'ir_version: 7\ngraph {\n  node { op_type: "Relu" }\n}\n',
         "not an ONNX model", "the protobuf text format instead of the binary one")
    bitflip_cases(base)


def flip(data, pos, bit):
    b = bytearray(data)
    b[pos] ^= 1 << bit
    return bytes(b)


def bitflip_cases(base):
    m = onnx.ModelProto.FromString(base)
    # the op_type "Relu": 'R' ^ 0x20 is 'r', an op no domain has
    op_pos = base.index(b"\x22\x04Relu") + 2
    case("flip_op_type.onnx", flip(base, op_pos, 5), "relu", "a bit flip that makes Relu relu")
    # ir_version 7 -> 71 (bit 6 of the varint after the field key 0x08)
    assert base[0] == 0x08 and base[1] == m.ir_version
    case("flip_ir_version.onnx", flip(base, 1, 6), "IR version 71",
         "a bit flip that makes the IR version 71")
    # the default opset 13 -> 77 at the end of the file (opset_import is the last field)
    tail = base.rindex(b"\x10" + bytes([OPSET]))
    case("flip_opset.onnx", flip(base, tail + 1, 6), "opset 77",
         "a bit flip that makes the opset 77")
    # the length of the graph field: one more than the bytes that follow
    g_pos = base.index(b"\x3a")  # field 7, wire type 2
    case("flip_graph_length.onnx", flip(base, g_pos + 1, 0) if base[g_pos + 1] & 1 == 0
         else flip(base, g_pos + 1, 1), "not an ONNX model",
         "a bit flip in the graph's length prefix")
    # the data_type of the first initializer: FLOAT (1) -> INT8 (3): raw_data no longer fits
    init = m.graph.initializer[0]
    raw_pos = base.index(init.raw_data[:32])
    dt_pos = base.rindex(b"\x10\x01", 0, raw_pos)
    case("flip_init_dtype.onnx", flip(base, dt_pos + 1, 1), init.name,
         "a bit flip that turns a float initializer into int8")
    # a dim of the first initializer: 64 -> 65 (bit 0), raw_data too short for it
    dim_pos = base.rindex(b"\x08" + bytes([init.dims[0]]), 0, raw_pos)
    case("flip_init_dim.onnx", flip(base, dim_pos + 1, 0), "raw_data has",
         "a bit flip in an initializer's dim")
    # a few flips at seeded random places inside the graph's structure (not weights):
    # whatever kiln says, it must name the file and not crash
    rng = random.Random(99)
    weights = [(base.index(t.raw_data), len(t.raw_data)) for t in m.graph.initializer]
    made = 0
    while made < 4:
        pos = rng.randrange(len(base))
        if any(s <= pos < s + n for s, n in weights):
            continue
        data = flip(base, pos, rng.randrange(8))
        try:
            mm = onnx.ModelProto.FromString(data)
            onnx.checker.check_model(mm, full_check=True)
            continue  # still a valid model: not a bad case
        except Exception:
            pass
        name = "flip_random_%05d.onnx" % pos
        case(name, data, name, "a random bit flip at byte %d" % pos)
        made += 1


# ---- versions and domains ----

def version_cases():
    relu = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    io = ([vi("x", [2, 3])], [vi("y", [2, 3])])
    case("opset_future.onnx", model_bytes(relu, *io, opset=99), "opset 99",
         "a default-domain opset from the future")
    case("opset_ancient.onnx", model_bytes(relu, *io, opset=1), "opset 1",
         "opset 1, before kiln's oldest")
    case("ir_future.onnx", model_bytes(relu, *io, ir=99), "IR version 99",
         "an IR version from the future")
    no_ir = onnx.ModelProto.FromString(model_bytes(relu, *io))
    no_ir.ClearField("ir_version")
    case("ir_missing.onnx", no_ir.SerializeToString(), "ir_version", "no ir_version at all")
    no_opset = onnx.ModelProto.FromString(model_bytes(relu, *io))
    del no_opset.opset_import[:]
    case("opset_missing.onnx", no_opset.SerializeToString(), "opset",
         "no opset_import of the default domain")
    unknown = [helper.make_node("FooBarOp", ["x"], ["y"], name="mystery")]
    case("op_unknown.onnx", model_bytes(unknown, *io), "FooBarOp", "an op no domain has")
    custom = [helper.make_node("Relu", ["x"], ["y"], name="c", domain="com.example")]
    case("op_custom_domain.onnx", model_bytes(custom, *io, domains=["com.example"]),
         "com.example", "a node of a domain kiln does not know")
    cast = helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64)
    if_node = [helper.make_node("If", ["c"], ["y"], name="branch",
                                then_branch=helper.make_graph([], "t", [], [vi("x", [2, 3])]),
                                else_branch=helper.make_graph([cast], "e", [],
                                                              [vi("xi", [2, 3], TensorProto.INT64)]))]
    case("op_if.onnx", model_bytes(if_node, [vi("c", [], TensorProto.BOOL), vi("x", [2, 3])],
                                   [vi("y", [2, 3])]),
         "node 'branch' (If): output 0 is float32 in one case and int64 in the other",
         "If branches whose outputs have different dtypes")


# ---- tensors and types ----

def tensor_proto(name, dims, dtype=FLOAT, raw=None, floats=None):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    if raw is not None:
        t.raw_data = raw
    if floats is not None:
        t.float_data.extend(floats)
    return t


def add_model(init, xdims):
    """y = x + init: a model whose only interesting part is the initializer."""
    node = helper.make_node("Add", ["x", init.name], ["y"], name="add")
    return model_bytes([node], [vi("x", xdims)], [vi("y", None)], [init])


def tensor_cases():
    case("init_negative_dim.onnx", add_model(tensor_proto("w", [-3], raw=b""), [3]),
         "size -3", "an initializer with a negative dim")
    case("init_dims_overflow.onnx",
         add_model(tensor_proto("w", [1 << 40, 1 << 40], raw=b""), [1]),
         "too large", "an initializer whose dims multiply past int64")
    case("init_empty_huge.onnx",
         add_model(tensor_proto("w", [0, 1 << 62, 4], raw=b""), [1]),
         "too large", "an empty initializer whose other dims overflow its strides")
    case("init_huge.onnx", add_model(tensor_proto("w", [1 << 31, 1 << 29], raw=b""), [1]),
         "limit", "an initializer of 2^60 elements with no data")
    case("init_raw_short.onnx", add_model(tensor_proto("w", [4], raw=b"\0" * 12), [4]),
         "raw_data has 12 bytes", "raw_data shorter than the dims need")
    case("init_raw_long.onnx", add_model(tensor_proto("w", [4], raw=b"\0" * 20), [4]),
         "raw_data has 20 bytes", "raw_data longer than the dims need")
    case("init_float_data_short.onnx",
         add_model(tensor_proto("w", [4], floats=[1.0, 2.0, 3.0]), [4]),
         "3 elements", "float_data with fewer values than the dims need")
    case("init_no_data.onnx", add_model(tensor_proto("w", [4]), [4]), "'w'",
         "an initializer without any data")
    # packed sub-byte types: 5 int4 take 3 bytes, 7 uint2 take 2
    case("init_int4_raw_short.onnx",
         add_model(tensor_proto("w", [5], TensorProto.INT4, raw=b"\x21\x43"), [5]),
         "raw_data has 2 bytes, expected 3", "packed int4 raw_data one byte short")
    case("init_int4_raw_long.onnx",
         add_model(tensor_proto("w", [5], TensorProto.INT4, raw=b"\0" * 5), [5]),
         "raw_data has 5 bytes, expected 3", "packed int4 raw_data sized one byte a value")
    u2 = tensor_proto("w", [7], TensorProto.UINT2)
    u2.int32_data.extend([0x1b] * 7)
    case("init_uint2_int32_unpacked.onnx", add_model(u2, [7]),
         "int32_data has 7 elements, expected 2", "uint2 int32_data one value an int32, not packed")
    add4 = [helper.make_node("Add", ["a", "a"], ["b"], name="add4")]
    case("op_add_int4.onnx", model_bytes(add4, [vi("a", [3], TensorProto.INT4)],
                                          [vi("b", [3], TensorProto.INT4)]),
         "node 'add4' (Add): input 0 (A) is int4", "arithmetic on a storage-only dtype")
    i4 = tensor_proto("w", [2], TensorProto.INT4)
    i4.int32_data.append(300)
    case("init_int4_int32_range.onnx", add_model(i4, [2]),
         "not a packed byte of int4", "int4 int32_data holding a value over a byte")
    s = TensorProto()
    s.name = "words"
    s.data_type = TensorProto.STRING
    s.dims.append(2)
    s.string_data.extend([b"hello", b"world"])
    case("init_string.onnx", add_model(s, [2]), "string", "a string tensor initializer")
    c = tensor_proto("z", [2], dtype=TensorProto.COMPLEX64, raw=b"\0" * 16)
    case("init_complex.onnx", add_model(c, [2]), "complex64", "a complex64 initializer")
    nameless = tensor_proto("", [1], raw=b"\0" * 4)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [vi("x", [1])],
                          [vi("y", [1])], [nameless])
    case("init_no_name.onnx", helper.make_model(
        g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR).SerializeToString(),
        "no name", "an initializer without a name")
    dup = model_bytes([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [1])],
                      [vi("y", [1])], [f32("w", [1]), f32("w", [1], seed=1)])
    case("init_duplicate.onnx", dup, "'w'", "two initializers of the same name")
    relu = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    case("input_negative_dim.onnx", model_bytes(relu, [vi("x", [2, -2])], [vi("y", None)]),
         "-2", "a graph input declared with a negative dim")
    case("input_rank9.onnx", model_bytes(relu, [vi("x", [1] * 9)], [vi("y", None)]),
         "rank 9", "a graph input of rank 9")
    seq = helper.make_tensor_sequence_value_info("x", FLOAT, [2])
    case("input_sequence.onnx", model_bytes(relu, [seq], [vi("y", None)]), "tensor",
         "a sequence-typed graph input")
    case("input_dims_overflow.onnx",
         model_bytes(relu, [vi("x", [1 << 40, 1 << 40])], [vi("y", None)]),
         "too large", "an input whose declared shape is too large to make")
    case("input_huge.onnx", model_bytes(relu, [vi("x", [100000, 100000])], [vi("y", None)]),
         "too large", "an input of 10^10 floats")


# ---- graph structure ----

def graph_cases():
    x, y = [vi("x", [2, 3])], [vi("y", [2, 3])]
    dangling = [helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")]
    case("node_dangling_input.onnx", model_bytes(dangling, x, y), "nowhere",
         "a node input nothing produces")
    cycle = [helper.make_node("Relu", ["b"], ["a"], name="loop_a"),
             helper.make_node("Relu", ["a"], ["b"], name="loop_b"),
             helper.make_node("Add", ["x", "a"], ["y"], name="after")]
    case("graph_cycle.onnx", model_bytes(cycle, x, y), "cycle", "two nodes feeding each other")
    # the node after the cycle comes first in the file: the message must still name a
    # node on the cycle
    cycle2 = [cycle[2], cycle[0], cycle[1]]
    case("graph_cycle_after_first.onnx", model_bytes(cycle2, x, y), "loop_",
         "a cycle, with a node downstream of it listed first")
    dup = [helper.make_node("Relu", ["x"], ["y"], name="one"),
           helper.make_node("Sigmoid", ["x"], ["y"], name="two")]
    case("node_duplicate_output.onnx", model_bytes(dup, x, y), "'y'",
         "two nodes producing the same value")
    ghost = [helper.make_node("Relu", ["x"], ["h"], name="r")]
    case("output_never_computed.onnx", model_bytes(ghost, x, [vi("ghost", [2, 3])]), "ghost",
         "a graph output no node computes")
    over = [helper.make_node("Relu", ["x", "x"], ["y"], name="two_inputs")]
    case("node_arity.onnx", model_bytes(over, x, y), "two_inputs", "Relu with two inputs")
    twice = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)
    twice.attribute.extend([helper.make_attribute("axis", 0)])
    case("attr_twice.onnx", model_bytes([twice], x, y), "given twice",
         "an attribute given twice")
    sub = helper.make_node("Softmax", ["x"], ["y"], name="sm")
    sub.attribute.extend([helper.make_attribute("axis", helper.make_graph([], "e", [], []))])
    case("attr_graph_on_softmax.onnx", model_bytes([sub], x, y),
         "attribute 'axis' is of type GRAPH (a subgraph); only If's",
         "a subgraph as Softmax's axis: said to be outside the op's schema (it read: "
         "subgraphs, as in If, Loop, Scan, not supported)")
    unnamed = helper.make_node("Softmax", ["x"], ["y"], name="sm")
    a = unnamed.attribute.add()
    a.type = onnx.AttributeProto.INT
    a.i = 1
    case("attr_name_empty.onnx", model_bytes([unnamed], x, y),
         "an attribute's name is missing or empty", "an attribute without a name")
    bad_name = helper.make_node("Relu", ["x"], ["y"])
    bad_name.name = "n"
    good = model_bytes([bad_name], x, y)
    data = good.replace(b"\x1a\x01n", b"\x1a\x01\xff")  # NodeProto.name is field 3
    assert data != good
    case("node_name_not_utf8.onnx", data, "not valid", "a node name that is not UTF-8")
    cnst = helper.make_node("Constant", [], ["c"], name="empty_const")
    add = helper.make_node("Add", ["x", "c"], ["y"], name="add")
    case("constant_no_value.onnx", model_bytes([cnst, add], x, y), "Constant",
         "a Constant node with no value")
    declared = model_bytes([helper.make_node("Relu", ["x"], ["y"], name="r")], x,
                           [vi("y", [2, 3], TensorProto.INT64)])
    case("declared_type_conflict.onnx", declared, "declared",
         "an output declared int64 that Relu computes as float32")
    case("deep_if_30.onnx", nested_if(30), "If", "If nested 30 deep (inside the depth limit)")
    case("deep_if_1000.onnx", nested_if(1000), "deeper",
         "If nested 1000 deep: a stack bomb for a recursive parser")
    case("deep_sequence_type.onnx", nested_sequence_type(5000), "deeper",
         "an input type of sequences nested 5000 deep")


def nested_if(depth):
    """ModelProto whose graph is If(then_branch = graph with If(...)), hand-encoded so
    that no protobuf library's depth limit stops us writing it."""
    g = field_bytes(2, "leaf")  # GraphProto.name
    for level in range(depth):
        attr = field_bytes(1, "then_branch") + field_varint(20, 5) + field_bytes(6, g)
        node = (field_bytes(1, "c") + field_bytes(2, "y%d" % level) +
                field_bytes(3, "if%d" % level) + field_bytes(4, "If") + field_bytes(5, attr))
        g = field_bytes(1, node) + field_bytes(2, "g%d" % level)
    opset = field_varint(2, OPSET)
    return field_varint(1, IR) + field_bytes(7, g) + field_bytes(8, opset)


def nested_sequence_type(depth):
    """An input whose TypeProto is sequence(sequence(...(tensor float)))."""
    t = field_bytes(1, field_varint(1, FLOAT))  # TypeProto.tensor_type.elem_type
    for _ in range(depth):
        t = field_bytes(4, field_bytes(1, t))  # TypeProto.sequence_type.elem_type
    value_info = field_bytes(1, "x") + field_bytes(2, t)
    node = field_bytes(1, "x") + field_bytes(2, "y") + field_bytes(4, "Identity")
    out = field_bytes(1, "y")
    g = field_bytes(1, node) + field_bytes(2, "g") + field_bytes(11, value_info) + \
        field_bytes(12, out)
    return field_varint(1, IR) + field_bytes(7, g) + field_bytes(8, field_varint(2, OPSET))


# ---- ops whose attributes or shapes do not agree ----

def op_cases():
    many = helper.make_node("Sum", ["x"] * 1500, ["y"], name="sum")
    case("sum_1500_inputs.onnx", model_bytes([many], [vi("x", [2])], [vi("y", [2])]),
         "kiln takes at most 1000", "a Sum of 1500 inputs (it said 'at least 1')")
    conv_w = f32("W", [2, 1, 3, 3])
    conv = helper.make_node("Conv", ["X", "W"], ["Y"], name="conv", kernel_shape=[5, 5])
    case("conv_kernel_shape.onnx",
         model_bytes([conv], [vi("X", [1, 1, 8, 8])], [vi("Y", None)], [conv_w]),
         "kernel_shape", "Conv kernel_shape 5x5 with 3x3 weights")
    conv = helper.make_node("Conv", ["X", "W"], ["Y"], name="conv")
    case("conv_channels.onnx",
         model_bytes([conv], [vi("X", [1, 3, 8, 8])], [vi("Y", None)], [conv_w]),
         "channels", "Conv weights for 1 input channel on a 3-channel input")
    conv = helper.make_node("Conv", ["X", "W"], ["Y"], name="conv", strides=[0, 1])
    case("conv_zero_stride.onnx",
         model_bytes([conv], [vi("X", [1, 1, 8, 8])], [vi("Y", None)], [conv_w]),
         "strides", "Conv with a stride of 0")
    conv = helper.make_node("Conv", ["X", "W"], ["Y"], name="conv", auto_pad="SIDEWAYS")
    case("conv_auto_pad.onnx",
         model_bytes([conv], [vi("X", [1, 1, 8, 8])], [vi("Y", None)], [conv_w]),
         "auto_pad", "Conv with an auto_pad that does not exist")
    pool = helper.make_node("MaxPool", ["X"], ["Y"], name="pool", kernel_shape=[9, 9])
    case("maxpool_window_too_big.onnx",
         model_bytes([pool], [vi("X", [1, 1, 8, 8])], [vi("Y", None)]),
         "does not fit", "a 9x9 pooling window on an 8x8 image")
    pool = helper.make_node("MaxPool", ["X"], ["Y"], name="pool")
    case("maxpool_no_kernel.onnx",
         model_bytes([pool], [vi("X", [1, 1, 8, 8])], [vi("Y", None)]),
         "kernel_shape", "MaxPool without kernel_shape")
    gemm = helper.make_node("Gemm", ["A", "B"], ["Y"], name="gemm")
    case("gemm_k_mismatch.onnx",
         model_bytes([gemm], [vi("A", [2, 3])], [vi("Y", None)], [f32("B", [4, 5])]),
         "has 4 rows, expected 3", "Gemm whose B has 4 rows for an A of 3 columns")
    mm = helper.make_node("MatMul", ["A", "B"], ["Y"], name="mm")
    case("matmul_k_mismatch.onnx",
         model_bytes([mm], [vi("A", [2, 3])], [vi("Y", None)], [f32("B", [4, 5])]),
         "4 rows", "MatMul with mismatched inner dims")
    shape = numpy_helper.from_array(np.array([4, 2], dtype=np.int64), "shape")
    rs = helper.make_node("Reshape", ["X", "shape"], ["Y"], name="reshape")
    case("reshape_count.onnx",
         model_bytes([rs], [vi("X", [2, 3])], [vi("Y", None)], [shape]),
         "cannot reshape 6 elements", "Reshape of 6 elements into 4x2")
    shape = numpy_helper.from_array(np.array([-1, -1], dtype=np.int64), "shape")
    case("reshape_two_minus_one.onnx",
         model_bytes([rs], [vi("X", [2, 3])], [vi("Y", None)], [shape]),
         "-1", "Reshape with two -1 dims")
    tr = helper.make_node("Transpose", ["X"], ["Y"], name="tr", perm=[0, 0])
    case("transpose_perm.onnx", model_bytes([tr], [vi("X", [2, 3])], [vi("Y", None)]),
         "perm", "Transpose with a perm that repeats an axis")
    cat = helper.make_node("Concat", ["A", "B"], ["Y"], name="cat", axis=0)
    case("concat_mismatch.onnx",
         model_bytes([cat], [vi("A", [2, 3]), vi("B", [2, 4])], [vi("Y", None)]),
         "expected 3", "Concat of 2x3 and 2x4 on axis 0")
    sm = helper.make_node("Softmax", ["X"], ["Y"], name="sm", axis=5)
    case("softmax_axis.onnx", model_bytes([sm], [vi("X", [2, 3])], [vi("Y", None)]),
         "axis 5", "Softmax over an axis the input does not have")
    sm = helper.make_node("Softmax", ["X"], ["Y"], name="sm", axis="1")
    case("softmax_axis_string.onnx", model_bytes([sm], [vi("X", [2, 3])], [vi("Y", None)]),
         "attribute 'axis' is a string, expected an int",
         "Softmax whose axis is a string (it silently became -1)")
    lrelu = helper.make_node("LeakyRelu", ["X"], ["Y"], name="lrelu", alpha=[0.5, 0.5])
    case("leakyrelu_alpha_floats.onnx",
         model_bytes([lrelu], [vi("X", [2, 3])], [vi("Y", None)]),
         "attribute 'alpha' is a list of floats, expected a float",
         "LeakyRelu whose alpha is a list (it silently became 0.01)")
    conv = helper.make_node("Conv", ["X", "W"], ["Y"], name="conv", strides=[2.0, 2.0])
    case("conv_strides_floats.onnx",
         model_bytes([conv], [vi("X", [1, 1, 4, 4])], [vi("Y", None)], [f32("W", [1, 1, 2, 2])]),
         "node 'conv' (Conv): attribute 'strides' is a list of floats, expected a list of ints",
         "Conv whose strides are floats (they silently became 1)")
    sm = helper.make_node("Softmax", ["X"], ["Y"], name="sm", axiss=0)
    case("softmax_axiss.onnx", model_bytes([sm], [vi("X", [2, 3])], [vi("Y", None)]),
         "node 'sm' (Softmax): unrecognized attribute 'axiss': Softmax takes axis",
         "Softmax with a misspelt axis (it silently kept the default -1)")
    conv = helper.make_node("Conv", ["X", "W"], ["Y"], name="conv", kernel_shap=[3, 3])
    case("conv_kernel_shap.onnx",
         model_bytes([conv], [vi("X", [1, 1, 4, 4])], [vi("Y", None)], [f32("W", [1, 1, 3, 3])]),
         "unrecognized attribute 'kernel_shap': Conv takes auto_pad, dilations, group, "
         "kernel_shape, pads, strides", "Conv with a misspelt kernel_shape")
    sln = helper.make_node("SkipLayerNorm", ["X", "X", "S"], ["Y"], name="sln", domain="kiln",
                           epsilom=1e-5)
    case("kiln_attr_unknown.onnx",
         model_bytes([sln], [vi("X", [2, 4])], [vi("Y", None)], [f32("S", [4])],
                     domains=["kiln"]),
         "unrecognized attribute 'epsilom': SkipLayerNorm takes axis, epsilon",
         "kiln.SkipLayerNorm with a misspelt epsilon")
    bn_params = [f32(n, [3], seed=i) for i, n in enumerate(["s", "b", "m", "v"])]
    bn = helper.make_node("BatchNormalization", ["X", "s", "b", "m", "v"], ["Y"], name="bn",
                          training_mode=2)
    case("batchnorm_training.onnx",
         model_bytes([bn], [vi("X", [1, 3, 4])], [vi("Y", None)], bn_params, opset=15),
         "training_mode=2: expected 0 or 1", "BatchNormalization whose training_mode is no mode")
    idx = numpy_helper.from_array(np.array([5], dtype=np.int64), "idx")
    ga = helper.make_node("Gather", ["X", "idx"], ["Y"], name="gather", axis=0)
    case("gather_index_range.onnx",
         model_bytes([ga], [vi("X", [3, 2])], [vi("Y", None)], [idx]),
         "indices", "Gather of index 5 from a dim of 3")
    add = helper.make_node("Add", ["A", "B"], ["Y"], name="add")
    case("add_broadcast.onnx",
         model_bytes([add], [vi("A", [2, 3]), vi("B", [4])], [vi("Y", None)]),
         "broadcast", "Add of shapes that do not broadcast")
    case("add_dtypes.onnx",
         model_bytes([add], [vi("A", [2]), vi("B", [2], TensorProto.INT64)], [vi("Y", None)]),
         "int64", "Add of float32 and int64")
    # kiln's LayerNormGrad read from a file, its axis past the rank: the normalized dims
    # were copied from the axis left unset by the failed range check (SIGSEGV)
    lng = helper.make_node("LayerNormGrad", ["D", "X", "S"], ["dX", "dS", "dB"], name="lng",
                           domain="kiln", axis=3)
    case("layernormgrad_axis_past_rank.onnx",
         model_bytes([lng], [vi("D", [2, 3, 4]), vi("X", [2, 3, 4])],
                     [vi("dX", None), vi("dS", None), vi("dB", None)], [f32("S", [4])],
                     domains=["kiln"]),
         "axis 3 is out of range for rank 3", "kiln.LayerNormGrad with axis 3 on a rank-3 "
         "input (SIGSEGV)")

    # QLinearMatMul's and QLinearConv's y_zero_point was never checked: three values or
    # none ran with whatever lay at its first element (probe round 8)
    def q8(name, v, dtype=np.uint8):
        return numpy_helper.from_array(np.array(v, dtype), name)

    def scale(name, v):
        return numpy_helper.from_array(np.array(v, np.float32), name)

    qmm = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"],
                           name="qmm")
    case("qlinearmatmul_y_zero_point_three.onnx",
         model_bytes([qmm], [vi("a", [3, 8], TensorProto.UINT8)],
                     [vi("y", None, TensorProto.UINT8)],
                     [scale("as", 0.05), q8("az", 1), q8("b", np.ones([8, 5])), scale("bs", 0.02),
                      q8("bz", 2), scale("ys", 0.1), q8("yz", [3, 4, 5])]),
         "input 7 (zero point) uint8[3] must have the shape of input 6 (scale) float32[]",
         "QLinearMatMul whose y_zero_point holds three values (the first was used, silently)")
    qcv = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                           name="qconv")
    case("qlinearconv_y_zero_point_empty.onnx",
         model_bytes([qcv], [vi("x", [1, 2, 5, 5], TensorProto.UINT8)],
                     [vi("y", None, TensorProto.UINT8)],
                     [scale("xs", 0.05), q8("xz", 1), q8("w", np.ones([4, 2, 3, 3]), np.int8),
                      scale("ws", 0.02), q8("wz", 0, np.int8), scale("ys", 0.1),
                      q8("yz", np.zeros([0]))]),
         "input 7 (zero point) uint8[0] must have the shape of input 6 (scale) float32[]",
         "QLinearConv whose y_zero_point holds no value (read past its end, silently)")


# ---- external data ----

def external_init(location, offset=None, length=None):
    t = tensor_proto("w", [4])
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location)]
    if offset is not None:
        entries.append(("offset", str(offset)))
    if length is not None:
        entries.append(("length", str(length)))
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def external_cases():
    write("ext_short.bin", b"\0" * 8)
    case("ext_parent_dir.onnx", add_model(external_init("../x"), [4]), "../x",
         "external data in the folder above the model's")
    case("ext_absolute.onnx", add_model(external_init("/etc/passwd"), [4]), "/etc/passwd",
         "external data at an absolute path")
    case("ext_past_end.onnx", add_model(external_init("ext_short.bin"), [4]), "past the end",
         "16 bytes of external data from a file of 8")
    case("ext_offset_past_end.onnx", add_model(external_init("ext_short.bin", offset=100), [4]),
         "past the end", "external data at an offset beyond its file")
    case("ext_offset_overflow.onnx",
         add_model(external_init("ext_short.bin", offset=(1 << 64) - 4), [4]),
         "past the end", "an external data offset that overflows when the size is added")
    case("ext_nul_location.onnx",
         add_model(external_init("ext_short.bin\x00../../etc/passwd"), [4]), "NUL byte",
         "an external data location with a NUL byte (it would be read as 'ext_short.bin')")
    case("ext_missing_file.onnx", add_model(external_init("no_such_file.bin"), [4]),
         "no_such_file.bin", "external data in a file that does not exist")
    case("ext_length_mismatch.onnx", add_model(external_init("ext_short.bin", length=4), [4]),
         "length", "external data whose length disagrees with the dims")
    case("ext_bad_offset.onnx", add_model(external_init("ext_short.bin", offset="-1"), [4]),
         "offset", "an external data offset that is not a number")


# ---- valid models, bad inputs at run time ----

def runtime_cases():
    relu = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    write("valid_relu.onnx", model_bytes(relu, [vi("x", [2, 3])], [vi("y", [2, 3])],
                                         check=True))
    write("relu_wrong_shape.npy", npy(np.ones((3, 3), np.float32)))
    case("valid_relu.onnx", None, "expected shape float32[2,3], got [3,3]",
         "an input of the wrong shape", "x=relu_wrong_shape.npy")
    write("relu_wrong_dtype.npy", npy(np.ones((2, 3), np.int64)))
    case("valid_relu.onnx", None, "expected float32, got int64", "an input of the wrong dtype",
         "x=relu_wrong_dtype.npy")
    write("relu_wrong_rank.pb",
          numpy_helper.from_array(np.ones(6, np.float32), "x").SerializeToString())
    case("valid_relu.onnx", None, "got [6]", "an input of the wrong rank (.pb)",
         "x=relu_wrong_rank.pb")
    # Attention (opset 24) with nonpad_kv_seqlen out of [0, keys]: -5 masked every key
    # (NaN) and 1000 was taken as "all", both silently
    att = [helper.make_node("Attention", ["q", "k", "v", "", "", "", "nonpad"], ["o"],
                            name="att")]
    qkv = [vi(n, [1, 2, 4, 8]) for n in ("q", "k", "v")]
    write("attention_nonpad.onnx",
          model_bytes(att, qkv + [vi("nonpad", [1], TensorProto.INT64)],
                      [vi("o", [1, 2, 4, 8])], opset=24, ir=10, check=True))
    ones = npy(np.full((1, 2, 4, 8), 0.25, np.float32))
    write("attention_qkv.npy", ones)
    for bad in (-5, 1000):
        write(f"attention_nonpad_{bad}.npy", npy(np.array([bad], np.int64)))
        case("attention_nonpad.onnx", None,
             f"node 'att' (Attention): nonpad_kv_seqlen[0] is {bad}; expected 0 to 4",
             f"Attention with nonpad_kv_seqlen {bad} for 4 keys",
             f"q=attention_qkv.npy;k=attention_qkv.npy;v=attention_qkv.npy;"
             f"nonpad=attention_nonpad_{bad}.npy")
    # DynamicQuantizeLinear of a NaN or infinity: no range to make (the zero point was a
    # NaN cast to uint8)
    dq = [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"], name="dq")]
    write("dynamic_quantize.onnx",
          model_bytes(dq, [vi("x", [4])], [vi("y", [4], TensorProto.UINT8), vi("s", []),
                                           vi("z", [], TensorProto.UINT8)], check=True))
    for label, bad in (("inf", np.inf), ("nan", np.nan)):
        write(f"dq_{label}.npy", npy(np.array([1.0, -2.0, bad, 0.5], np.float32)))
        case("dynamic_quantize.onnx", None,
             f"node 'dq' (DynamicQuantizeLinear): x holds {label} at element 2",
             f"DynamicQuantizeLinear of an input holding {label}", f"x=dq_{label}.npy")
    # work bounds (option max_work, default 2^40 steps): an Einsum of six letters of
    # 1000 each (10^18 steps; folding it at load hung `kiln inspect`), and the square of
    # a generated 12288 x 12288 matrix (1.9e12 steps) from a file of 131 bytes
    letters = [numpy_helper.from_array(np.full([1000], 0.001, np.float32), c)
               for c in "abcdef"]
    es = helper.make_node("Einsum", list("abcdef"), ["y"], name="es", equation="a,b,c,d,e,f->")
    case("einsum_1e18.onnx", model_bytes([es], [], [vi("y", [])], letters, check=True),
         "node 'es' (Einsum): about 1e+18 steps for these shapes, over max_work",
         "an Einsum of 10^18 steps from 24 KB")
    sq = [helper.make_node("ConstantOfShape", ["shape"], ["m"],
                           value=numpy_helper.from_array(np.array([1.0], np.float32))),
          helper.make_node("MatMul", ["m", "m"], ["y"], name="sq")]
    shape = numpy_helper.from_array(np.array([12288, 12288], np.int64), "shape")
    case("square_12288.onnx", model_bytes(sq, [], [vi("y", [12288, 12288])], [shape], check=True),
         "node 'sq' (MatMul): about 1.86e+12 steps", "the square of a generated 12288^2 matrix")
    # a step counts what it costs on its kernel (src/ir/work_weight.c; the reference
    # Einsum 8192): an Einsum of four letters of 300 is 8.1e9 steps of kiln's generic
    # Einsum loop, under 2^40 counted as one, and ran 150 s (18 ns a step)
    v = numpy_helper.from_array(np.full([300], 0.001, np.float32), "v")
    es = helper.make_node("Einsum", ["v"] * 4, ["y"], name="es", equation="a,b,c,d->")
    case("einsum_ref_8e9.onnx", model_bytes([es], [], [vi("y", [])], [v], check=True),
         "node 'es' (Einsum): about 8.1e+09 steps for these shapes, over max_work "
         "549755813888: kiln's reference kernel runs it, a scalar loop, whose steps count "
         "8192 times",
         "an Einsum of 8.1e9 steps of the reference kernel (minutes) from 1.3 KB")
    # ops whose loops multiply attributes or shapes and that the estimate left at their
    # elements (so max_work let them through): a pooling window as large as the image,
    # TopK keeping half of 2e6 elements (its list shifted for each), Col2Im gathering a
    # block of 1100^2 for each pixel, NonMaxSuppression of 600,000 boxes (its selection,
    # made by shape inference before the bound was checked)
    def generated(shape, name="x"):
        return (helper.make_node("ConstantOfShape", [name + "_shape"], [name],
                                 value=numpy_helper.from_array(np.array([1.0], np.float32))),
                numpy_helper.from_array(np.array(shape, np.int64), name + "_shape"))

    gen, gen_shape = generated([1, 1, 1000, 1000])
    for op in ("MaxPool", "LpPool"):
        pool = helper.make_node(op, ["x"], ["y"], name="pool", kernel_shape=[1000, 1000],
                                pads=[999] * 4)
        case(f"{op.lower()}_window_4e12.onnx",
             model_bytes([gen, pool], [], [vi("y", [1, 1, 1999, 1999])], [gen_shape], check=True),
             f"node 'pool' ({op}): about 4e+12 steps", f"{op} of a 1000^2 window over 1999^2 outputs")
    gen, gen_shape = generated([1, 1000, 1000, 1])
    pool = helper.make_node("NhwcMaxPool", ["x"], ["y"], name="pool", domain="kiln",
                            kernel_shape=[1000, 1000], pads=[999] * 4)
    case("nhwc_maxpool_window_4e12.onnx",
         model_bytes([gen, pool], [], [vi("y", [1, 1999, 1999, 1])], [gen_shape], domains=["kiln"]),
         "node 'pool' (NhwcMaxPool): about 4e+12 steps", "kiln.NhwcMaxPool of a 1000^2 window")
    topk = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
            helper.make_node("TopK", ["r", "k"], ["v", "i"], name="topk")]
    consts = [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("start", 0), ("limit", 2e6), ("delta", 1))]
    consts.append(numpy_helper.from_array(np.array([1000000], np.int64), "k"))
    case("topk_2e12.onnx",
         model_bytes(topk, [], [vi("v", [1000000]), vi("i", [1000000], TensorProto.INT64)],
                     consts, check=True),
         "node 'topk' (TopK): about 2e+12 steps", "TopK of the 10^6 largest of 2*10^6 elements")
    gen, gen_shape = generated([1, 1100 * 1100, 1])
    col = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name="col")
    sizes = [numpy_helper.from_array(np.array([1100, 1100], np.int64), n) for n in ("image", "block")]
    case("col2im_block_1e12.onnx",
         model_bytes([gen, col], [], [vi("y", [1, 1, 1100, 1100])], [gen_shape] + sizes, opset=18, check=True),
         "node 'col' (Col2Im): about 1.46e+12 steps", "Col2Im of one 1100^2 block over a 1100^2 image")
    boxes, boxes_shape = generated([1, 600000, 4], "boxes")
    scores, scores_shape = generated([1, 1, 600000], "scores")
    nms = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max"], ["y"], name="nms")
    most = numpy_helper.from_array(np.array([600000], np.int64), "max")
    case("nms_600000_boxes.onnx",
         model_bytes([boxes, scores, nms], [], [vi("y", [None, 3], TensorProto.INT64)],
                     [boxes_shape, scores_shape, most], check=True),
         "node 'nms' (NonMaxSuppression): about 7.2e+11 steps",
         "NonMaxSuppression of 600,000 boxes that never suppress each other")
    # an LSTM of 10^6 steps with hidden size 1024: 4.2e12 steps from generated weights
    x, x_shape = generated([1000000, 1, 1])
    w, w_shape = generated([1, 4096, 1], "w")
    r, r_shape = generated([1, 4096, 1024], "r")
    lstm = helper.make_node("LSTM", ["x", "w", "r"], ["", "h", ""], name="lstm", hidden_size=1024)
    case("lstm_1e6_steps.onnx",
         model_bytes([x, w, r, lstm], [], [vi("h", [1, 1, 1024])], [x_shape, w_shape, r_shape],
                     check=True),
         "node 'lstm' (LSTM): about 4.21e+12 steps", "an LSTM of 10^6 steps of hidden size 1024")
    # re-probe of 2026-11-27: QLinearAveragePool's window was left out of the estimate
    # (it counted its elements alone); Unique counted nothing for 2^40 empty slices, which
    # it sorts (inference sorted them even at load: `kiln inspect` too)
    gen_u8 = helper.make_node("ConstantOfShape", ["x_shape"], ["x"],
                              value=numpy_helper.from_array(np.array([1], np.uint8)))
    gen_u8_shape = numpy_helper.from_array(np.array([1, 1, 3000, 3000], np.int64), "x_shape")
    qpool = helper.make_node("QLinearAveragePool", ["x", "s", "z", "s", "z"], ["y"], name="pool",
                             domain="com.microsoft", kernel_shape=[3000, 3000], pads=[2999] * 4)
    qconsts = [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
               numpy_helper.from_array(np.array(0, np.uint8), "z")]
    case("qlinear_avgpool_window_3e14.onnx",
         model_bytes([gen_u8, qpool], [], [vi("y", [1, 1, 5999, 5999], TensorProto.UINT8)],
                     [gen_u8_shape] + qconsts, domains=["com.microsoft"]),
         "node 'pool' (AveragePool): about 3.24e+14 steps",
         "QLinearAveragePool of a 3000^2 window over 5999^2 outputs, from 300 bytes (it "
         "ran for minutes; O2 turns it into an AveragePool between Q/DQ)")
    x, x_shape = generated([1 << 40, 0])
    uniq = helper.make_node("Unique", ["x"], ["y"], name="uniq", axis=0)
    case("unique_2p40_empty_slices.onnx",
         model_bytes([x, uniq], [], [vi("y", [None, 0])], [x_shape], opset=11, check=True),
         "node 'uniq' (Unique): about 4.4e+13 steps",
         "Unique along an axis of 2^40 empty slices (it allocated 48 TiB to sort them)")
    # round 4 (2026-11-28): an RNN over X of input size 0 counted no steps (X has no
    # elements) and ran 2^27 steps of its state, minutes from 300 bytes
    x, x_shape = generated([1 << 27, 1, 0])
    rnn = helper.make_node("GRU", ["x", "w", "r"], ["", "h"], name="gru", hidden_size=1)
    case("gru_input_size_0_2p27_steps.onnx",
         model_bytes([x, rnn], [], [vi("h", [1, 1, 1])],
                     [x_shape, numpy_helper.from_array(np.zeros([1, 3, 0], np.float32), "w"),
                      numpy_helper.from_array(np.zeros([1, 3, 1], np.float32), "r")], check=True),
         "node 'gru' (GRU): about 1.1e+12 steps",
         "a GRU over X [2^27, 1, 0]: input size 0, 2^27 steps (it counted none and ran minutes)")
    # a MatMulInteger of two uint8 matrices (kiln's kernel, not oneDNN's) was weighed as
    # oneDNN's AMX one
    gen_q = helper.make_node("ConstantOfShape", ["q_shape"], ["q"],
                             value=numpy_helper.from_array(np.array([3], np.uint8)))
    q_shape = numpy_helper.from_array(np.array([8192, 8192], np.int64), "q_shape")
    mmi = helper.make_node("MatMulInteger", ["q", "q"], ["y"], name="mmi")
    case("matmulinteger_u8u8_8192.onnx",
         model_bytes([gen_q, mmi], [], [vi("y", [8192, 8192], TensorProto.INT32)], [q_shape],
                     check=True),
         "node 'mmi' (MatMulInteger): about 5.5e+11 steps",
         "MatMulInteger of two generated uint8 8192^2 matrices (kiln's kernel; weighed as "
         "oneDNN's AMX one it ran 40 s)")
    # an INT attribute holding only a float (f) was read as 0: Softmax over axis 0
    sm = helper.make_node("Softmax", ["x"], ["y"], name="sm")
    sm.attribute.append(onnx.AttributeProto(name="axis", type=onnx.AttributeProto.INT, f=1.0))
    case("softmax_axis_in_f.onnx", model_bytes([sm], [vi("x", [2, 3])], [vi("y", [2, 3])]),
         "node 'sm' (Softmax): attribute 'axis' is of type INT but holds a float (f)",
         "Softmax whose INT axis holds only a float value (it silently became 0)")
    good = npy(np.ones((2, 3), np.float32))
    write("relu_truncated.npy", good[:-5])
    case("valid_relu.onnx", None, "relu_truncated.npy", "a .npy file cut short",
         "x=relu_truncated.npy")
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    write("relu_huge_header.npy", b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") +
          header)
    case("valid_relu.onnx", None, "relu_huge_header.npy", "a .npy header with a huge shape",
         "x=relu_huge_header.npy")
    write("relu_garbage.pb", bytes(random.Random(7).getrandbits(8) | 0x80 for _ in range(50)))
    case("valid_relu.onnx", None, "relu_garbage.pb", "an input file that is not a tensor",
         "x=relu_garbage.pb")
    case("valid_relu.onnx", None, "nope", "--input for an input the model does not have",
         "nope=relu_wrong_shape.npy")
    case("valid_relu.onnx", None, "no_such_input.npy", "--input naming a missing file",
         "x=no_such_input.npy")

    rs = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    write("reshape_dynamic.onnx", model_bytes(
        rs, [vi("x", [6]), vi("shape", [2], TensorProto.INT64)], [vi("y", ["r0", "r1"])],
        check=True))
    write("x6.npy", npy(np.arange(6, dtype=np.float32)))
    write("shape_4x2.npy", npy(np.array([4, 2], np.int64)))
    case("reshape_dynamic.onnx", None, "cannot reshape 6 elements",
         "Reshape to a shape given at run time that does not fit",
         "x=x6.npy;shape=shape_4x2.npy")

    gemm = [helper.make_node("Gemm", ["a", "b"], ["y"], name="gemm")]
    write("gemm_dynamic_k.onnx", model_bytes(
        gemm, [vi("a", [2, "k"])], [vi("y", [2, 4])], [f32("b", [3, 4])], check=True))
    write("a_2x5.npy", npy(np.ones((2, 5), np.float32)))
    case("gemm_dynamic_k.onnx", None, "expected 5", "Gemm whose K only shows at run time",
         "a=a_2x5.npy")

    relu3 = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    write("relu_rank3_dynamic.onnx", model_bytes(
        relu3, [vi("x", ["a", "b", "c"])], [vi("y", ["a", "b", "c"])], check=True))
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    write("empty_huge.npy", b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)
    case("relu_rank3_dynamic.onnx", None, "too large",
         "an empty input whose other dims overflow its strides ([0, 2^62, 4])",
         "x=empty_huge.npy")

    roi = [helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], name="roi",
                            output_height=2, output_width=2)]
    idx = numpy_helper.from_array(np.zeros(1, np.int64), "idx")
    write("roialign_dynamic.onnx", model_bytes(
        roi, [vi("x", [1, 1, "h", "w"])], [vi("y", [1, 1, 2, 2])], [f32("rois", [1, 4]), idx],
        check=True))
    write("image_1x1x0x4.npy", npy(np.ones((1, 1, 0, 4), np.float32)))
    case("roialign_dynamic.onnx", None, "height 0",
         "RoiAlign over an image with no rows, given at run time (it read before the "
         "buffer)", "x=image_1x1x0x4.npy")

    add = [helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    write("symbol_shared.onnx", model_bytes(
        add, [vi("a", ["n"]), vi("b", ["n"])], [vi("y", ["n"])], check=True))
    write("vec3.npy", npy(np.ones(3, np.float32)))
    write("vec4.npy", npy(np.ones(4, np.float32)))
    case("symbol_shared.onnx", None, "'n'", "two inputs giving a shared symbol two sizes",
         "a=vec3.npy;b=vec4.npy")


# ---- TorchScript archives (kiln picks the reader by the .pt suffix) ----

def control_cases():
    """If, Loop and Scan whose bodies disagree with their node, or loop forever."""
    B = TensorProto.BOOL
    I64 = TensorProto.INT64

    def graph(nodes, inputs, outputs, inits=()):
        return helper.make_graph(nodes, "body", inputs, outputs, list(inits))

    # no trip count and no cond: only max_work ends it (each iteration counts 2^22 steps)
    body = graph([helper.make_node("Add", ["v", "one"], ["v_out"]),
                  helper.make_node("Identity", ["c"], ["c_out"])],
                 [vi("i", [], I64), vi("c", [], B), vi("v", [1])],
                 [vi("c_out", [], B), vi("v_out", [1])],
                 [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    loop = helper.make_node("Loop", ["", "", "x"], ["y"], name="forever", body=body)
    case("loop_forever.onnx", model_bytes([loop], [vi("x", [1])], [vi("y", [1])]),
         "node 'forever' (Loop): in the body's iteration", "a Loop with no trip count and no "
         "cond, stopped by max_work", "x=control_x1.npy")
    write("control_x1.npy", npy(np.zeros(1, np.float32)))
    # round 4: a body that inserts into the sequence it carries copies it every trip;
    # the sequence ops counted no work, and 300,000 trips from 400 bytes ran for hours.
    # Not a case of the manifest: refused under the default max_work only after about
    # 9,000 trips (4 s, over 10 s under ASan), so test_control.c runs this file of 3,000
    # trips under a max_work of 2^34, which its count reaches at about 1,400 (uncounted,
    # the trips alone stayed under it: 3,000 x 2^22)
    body = graph([helper.make_node("Identity", ["c"], ["c_out"]),
                  helper.make_node("SequenceInsert", ["s", "one"], ["s_out"])],
                 [vi("i", [], I64), vi("c", [], B),
                  helper.make_tensor_sequence_value_info("s", FLOAT, None)],
                 [vi("c_out", [], B), helper.make_tensor_sequence_value_info("s_out", FLOAT, None)],
                 [numpy_helper.from_array(np.ones(64, np.float32), "one")])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=FLOAT),
             helper.make_node("Loop", ["m", "", "s0"], ["s"], name="grow", body=body),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    m = numpy_helper.from_array(np.array(3000, np.int64), "m")
    write("loop_sequence_grows.onnx", model_bytes(nodes, [], [vi("n", [], I64)], [m], opset=13))
    # issue 20, round 5: an If whose branches read nothing of the model (each its own
    # initializer) has no captures, so its bodies have no inputs: their input list was
    # NULL and memcpy'd from (UBSan); test_control's test_if_without_captures loads it
    branch = [graph([helper.make_node("Identity", ["w"], ["o"])], [], [vi("o", [2])],
                    [numpy_helper.from_array(np.full([2], v, np.float32), "w")]) for v in (1, 2)]
    c = numpy_helper.from_array(np.array(False), "c")
    write("if_no_captures.onnx", model_bytes(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch[0], else_branch=branch[1])],
        [], [vi("y", [2])], [c], opset=13))
    # the body turns the loop-carried float into int64
    body = graph([helper.make_node("Cast", ["v"], ["v_out"], to=I64),
                  helper.make_node("Identity", ["c"], ["c_out"])],
                 [vi("i", [], I64), vi("c", [], B), vi("v", [1])],
                 [vi("c_out", [], B), vi("v_out", [1], I64)])
    loop = helper.make_node("Loop", ["m", "", "x"], ["y"], name="cast", body=body)
    m = numpy_helper.from_array(np.array(3, np.int64), "m")
    case("loop_carried_dtype.onnx", model_bytes([loop], [vi("x", [1])], [vi("y", [1])], [m]),
         "loop-carried value 0 is float32 in one case and int64 in the other",
         "a Loop body that changes a carried value's dtype")
    # If on a float cond, and an If without else_branch
    branch = graph([helper.make_node("Identity", ["x"], ["t"])], [], [vi("t", [2])])
    iff = helper.make_node("If", ["x"], ["y"], name="iff", then_branch=branch,
                           else_branch=branch)
    case("if_float_cond.onnx", model_bytes([iff], [vi("x", [2])], [vi("y", [2])]),
         "cond must be bool, found float32", "an If whose cond is a float tensor")
    cond = numpy_helper.from_array(np.array(True), "c")
    iff = helper.make_node("If", ["c"], ["y"], name="iff", then_branch=branch)
    case("if_no_else.onnx", model_bytes([iff], [vi("x", [2])], [vi("y", [2])], [cond]),
         "needs a graph attribute 'else_branch'", "an If without else_branch")
    # a body output count that does not match the node
    two = graph([helper.make_node("Identity", ["x"], ["t"]),
                 helper.make_node("Identity", ["x"], ["u"])], [], [vi("t", [2]), vi("u", [2])])
    iff = helper.make_node("If", ["c"], ["y"], name="iff", then_branch=two, else_branch=branch)
    case("if_output_count.onnx", model_bytes([iff], [vi("x", [2])], [vi("y", [2])], [cond]),
         "then_branch has 2 and else_branch 1", "If branches with different output counts")
    # a body reading a name no graph defines
    ghost = graph([helper.make_node("Identity", ["nowhere"], ["t"])], [], [vi("t", [2])])
    iff = helper.make_node("If", ["c"], ["y"], name="iff", then_branch=ghost,
                           else_branch=branch)
    case("if_unknown_name.onnx", model_bytes([iff], [vi("x", [2])], [vi("y", [2])], [cond]),
         "input 0 'nowhere' is not a graph input", "an If branch reading an undefined name")
    # Scan over inputs of different lengths
    body = graph([helper.make_node("Add", ["s", "a"], ["s1"]),
                  helper.make_node("Add", ["s1", "b"], ["s_out"])],
                 [vi("s", [2]), vi("a", [2]), vi("b", [2])], [vi("s_out", [2])])
    scan = helper.make_node("Scan", ["s0", "A", "Bx"], ["y"], name="scan", body=body,
                            num_scan_inputs=2)
    case("scan_lengths.onnx",
         model_bytes([scan], [vi("s0", [2]), vi("A", [3, 2]), vi("Bx", [4, 2])],
                     [vi("y", [2])], opset=13),
         "scanned inputs have different lengths", "a Scan of inputs of 3 and 4 slices")
    # a Loop scan output whose shape changes from one iteration to the next
    body = graph([helper.make_node("Concat", ["v", "v"], ["v_out"], axis=0),
                  helper.make_node("Identity", ["c"], ["c_out"]),
                  helper.make_node("Identity", ["v_out"], ["s_out"])],
                 [vi("i", [], I64), vi("c", [], B), vi("v", None)],
                 [vi("c_out", [], B), vi("v_out", None), vi("s_out", None)])
    loop = helper.make_node("Loop", ["m", "", "x"], ["y", "ys"], name="grow", body=body)
    case("loop_scan_shape.onnx",
         model_bytes([loop], [vi("x", [1])], [vi("y", None), vi("ys", None)], [m]),
         "node 'grow' (Loop): in the body's iteration 1: scan output 0 is float32 [2] in "
         "iteration 0 and float32 [4]", "a Loop scan output that grows", "x=control_x1.npy")
    # issue 20, round 8: a node of a body that fails at run time was named under the file
    # "<memory>" (the bodies were imported before the model's graph was given its file);
    # named as at load now, under its If and Loop, after the file. test_control's
    # test_body_message_names_the_file checks the whole message.
    then_b = graph([helper.make_node("Reshape", ["x", "s"], ["t"], name="reshape")], [],
                   [vi("t", None)])
    else_b = graph([helper.make_node("Identity", ["x"], ["e"], name="id")], [], [vi("e", None)])
    body = graph([helper.make_node("If", ["c"], ["r"], name="iff", then_branch=then_b,
                                   else_branch=else_b),
                  helper.make_node("Identity", ["c"], ["c_out"])],
                 [vi("i", [], I64), vi("c", [], B)], [vi("c_out", [], B), vi("r", None)])
    loop = helper.make_node("Loop", ["m", "go"], ["y"], name="loop", body=body)
    m1 = numpy_helper.from_array(np.array(1, np.int64), "m")
    go = numpy_helper.from_array(np.array(True), "go")
    write("control_x6.npy", npy(np.arange(6, dtype=np.float32)))
    write("shape_3x1.npy", npy(np.array([3, 1], np.int64)))
    case("loop_body_reshape.onnx",
         model_bytes([loop], [vi("x", [6]), vi("s", [2], I64)], [vi("y", None)], [m1, go]),
         "loop_body_reshape.onnx: node 'loop' (Loop): in the body's iteration 0: node 'iff' "
         "(If): in then_branch: node 'reshape' (Reshape): cannot reshape 6 elements into a "
         "shape of 3 elements", "a node of an If in a Loop's body failing at run time: "
         "named under its If and Loop, after the file", "x=control_x6.npy;s=shape_3x1.npy")


def zip_bytes(entries):
    """A ZIP archive with fixed timestamps, so that the bytes are reproducible."""
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def torchscript_cases():
    case("empty.pt", b"", "empty.pt", "an empty TorchScript file")
    case("not_a_zip.pt", bytes(random.Random(5).getrandbits(8) for _ in range(300)), "ZIP",
         "a .pt file that is not a ZIP archive")
    archive = zip_bytes([("m/version", b"3\n"), ("m/data.pkl", b"\x80\x02}q\x00.")])
    case("zip_truncated.pt", archive[:len(archive) // 2], "ZIP",
         "a TorchScript archive cut in half (no central directory)")
    case("zip_no_data_pkl.pt", zip_bytes([("m/readme.txt", b"hello")]), "data.pkl",
         "a ZIP archive without the data.pkl of a TorchScript module")
    case("zip_bad_pickle.pt", zip_bytes([("m/version", b"3\n"),
                                         ("m/data.pkl", b"\x80\x02\xff\xff\xff")]),
         "zip_bad_pickle.pt", "a TorchScript archive whose data.pkl is not a pickle")
    import warnings
    with warnings.catch_warnings():  # zipfile warns of the duplicate name, as it should
        warnings.simplefilter("ignore")
        twins = zip_bytes([("m/version", b"3\n"), ("m/byteorder", b"little"),
                           ("m/byteorder", b"big"), ("m/data.pkl", b"\x80\x02}q\x00.")])
    # a buffer [0, 2^62, 4] (0 elements, strides past int64), as torch.jit.save writes
    # zeros(1).as_strided([0, 2**62, 4], [1, 0, 0]): it reached the verifier, which
    # reported a kiln bug (KILN_ERR_INTERNAL)
    pkl = (b"\x80\x02c__torch__.M\nM\nq\x00)\x81}(X\x01\x00\x00\x00bq\x01ctorch._utils\n"
           b"_rebuild_tensor_v2\nq\x02((X\x07\x00\x00\x00storageq\x03ctorch\nFloatStorage\n"
           b"q\x04X\x01\x00\x00\x000q\x05X\x03\x00\x00\x00cpuq\x06K\x01tQq\x07K\x00(K\x00"
           b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00@K\x04t(K\x01K\x00K\x00t\x89ccollections\n"
           b"OrderedDict\nq\x08)RtRq\tX\x08\x00\x00\x00trainingq\n\x88ubq\x0c.")
    code = (b"class M(Module):\n  __parameters__ = []\n  __buffers__ = [\"b\", ]\n"
            b"  b : Tensor\n  training : bool\n"
            b"  def forward(self: __torch__.M,\n    x: Tensor) -> Tensor:\n"
            b"    b = self.b\n    return torch.add(x, torch.sum(b))\n")
    case("ts_empty_huge_buffer.pt",
         zip_bytes([("m/version", b"3\n"), ("m/byteorder", b"little"), ("m/data.pkl", pkl),
                    ("m/code/__torch__/M.py", code), ("m/constants.pkl", b"\x80\x02)."),
                    ("m/data/0", bytes(4))]),
         "tensor 'b' has a negative size or sizes too large",
         "a TorchScript buffer [0, 2^62, 4] (it reached the verifier as a kiln bug)")
    case("zip_two_byteorders.pt", twins, "the archive has two entries named 'm/byteorder'",
         "a TorchScript archive with two byteorder entries (the first silently won)")
    # an entry whose central-directory offset points elsewhere than its local header:
    # libzip read whatever lay there as the entry (a storage's data from the central
    # directory's bytes, exit 0) until the archive was opened with ZIP_CHECKCONS
    import struct
    base = zip_bytes([("m/version", b"3\n"), ("m/data.pkl", b"\x80\x02}q\x00.")])
    eocd = base.rfind(b"PK\x05\x06")
    cd = struct.unpack_from("<I", base, eocd + 16)[0]
    second = cd + 46 + struct.unpack_from("<HHH", base, cd + 28)[0]  # m/data.pkl's entry
    moved = bytearray(base)
    struct.pack_into("<I", moved, second + 42, cd)
    case("zip_entry_offset_into_cd.pt", bytes(moved), "not a readable ZIP archive",
         "a TorchScript archive whose data.pkl entry points at the central directory "
         "(read as the entry, silently)")
    shorter = bytearray(base)
    struct.pack_into("<I", shorter, base.index(b"PK\x03\x04", 1) + 18, 3)
    case("zip_local_size_differs.pt", bytes(shorter), "not a readable ZIP archive",
         "a TorchScript archive whose local header gives data.pkl another size than the "
         "central directory does")
    # one byte of data.pkl changed after its CRC-32 was written: libzip compares the CRC
    # only at an entry's end of file, which a read of exactly the entry's size never
    # reached, so a damaged storage was read as weights (exit 0)
    damaged = bytearray(base)
    damaged[base.index(b"\x80\x02}q\x00.") + 2] = ord("]")
    case("zip_crc_mismatch.pt", bytes(damaged), "entry 'm/data.pkl' is damaged or truncated "
         "(CRC error)", "a TorchScript archive whose data.pkl does not match its CRC-32 (read "
         "as it was)")


def fuzz_found_cases():
    """Cases the fuzzers found, remade here so that the corpus is this script's output."""
    y = onnx.ValueInfoProto()
    y.name = "y"
    y.type.optional_type.SetInParent()  # an optional of nothing said
    shape = [helper.make_node("Shape", ["x"], ["y"])]
    case("shape_output_declared_optional.onnx", model_bytes(shape, [vi("x", [3, 4, 5])], [y],
                                                            opset=OPSET),
         "Shape makes tensors; output 0 'y' is declared an optional",
         "a tensor op whose output the graph declares optional (fuzz_onnx: an internal error)")


def npy(a):
    import io
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    file_cases()
    version_cases()
    tensor_cases()
    graph_cases()
    op_cases()
    external_cases()
    runtime_cases()
    control_cases()
    torchscript_cases()
    fuzz_found_cases()
    with open(os.path.join(OUT, "MANIFEST.tsv"), "w") as f:
        f.write("# file\tinputs (NAME=FILE;... or -)\texit code\tstderr must contain\t"
                "what the case tests\n")
        for c in cases:
            f.write("\t".join(str(x) for x in c) + "\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print("%d cases, %d files, %d bytes in %s" % (len(cases), len(os.listdir(OUT)), total,
                                                  os.path.relpath(OUT, ROOT)))
    if total >= 1 << 20:
        sys.exit("the corpus is over 1 MB")


if __name__ == "__main__":
    main()
