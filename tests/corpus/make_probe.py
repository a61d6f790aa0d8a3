#!/usr/bin/env python3
"""Fresh hostile cases for issue 20's classes, written to a scratch folder with a
list of how to run each one (probe.tsv: name, class, expectation, kiln arguments).

    .venv/bin/python tests/corpus/make_probe.py OUTDIR
    tests/corpus/run_probe.sh KILN OUTDIR

Not part of the test suite: the cases that found defects went into tests/corpus/bad.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP, helper, numpy_helper

OUT = None  # the output folder: main() sets it
F, I64, I32 = TP.FLOAT, TP.INT64, TP.INT32
BIG = 2**62
IMAX, IMIN = 2**63 - 1, -2**63
rows = []


def model(nodes, inputs, outputs, inits=(), opset=18, domains=()):
    g = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 8
    return m


def vi(name, dims, t=F):
    return helper.make_tensor_value_info(name, t, dims)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def case(name, cls, m, expect="err", args="", inputs=None, cmd="run"):
    path = os.path.join(OUT, name + ".onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString() if hasattr(m, "SerializeToString") else m)
    extra = ""
    for k, v in (inputs or {}).items():
        np.save(os.path.join(OUT, f"{name}.{k}.npy"), v)
        extra += f" --input {k}={name}.{k}.npy"
    rows.append((name, cls, expect, f"{cmd} {name}.onnx{extra} {args}".strip()))


def gen(shape, name="x", value=1.0, dtype=np.float32):
    """ConstantOfShape: a big tensor from a tiny file."""
    return [init(name + "_shape", np.array(shape, np.int64))], [
        helper.make_node("ConstantOfShape", [name + "_shape"], [name],
                         value=numpy_helper.from_array(np.array([value], dtype)))]


def unary(name, cls, op, x_shape, attrs, expect="err", x_t=F, y_t=F, args="",
          extra_inits=(), extra_in=(), inputs=None, opset=18, domain=""):
    node = helper.make_node(op, ["x", *extra_in], ["y"], domain=domain, **attrs)
    m = model([node], [vi("x", x_shape, x_t)], [vi("y", None, y_t)], extra_inits, opset,
              domains=[domain] if domain else ())
    case(name, cls, m, expect, args, inputs)


def gen_case(name, cls, shape, nodes_after, outputs, extra_inits=(), expect="err", args="",
             opset=18, value=1.0, dtype=np.float32, domains=()):
    inits, nodes = gen(shape, "x", value, dtype)
    m = model(nodes + nodes_after, [], outputs, inits + list(extra_inits), opset, domains)
    case(name, cls, m, expect, args)


def main():
    """Writes every case and probe.tsv to the folder named by the first argument."""
    global OUT
    OUT = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)

    # ---- class 1: unbounded work from tiny files (ops whose loops come from attributes) ----
    for op in ("MaxPool", "AveragePool", "LpPool"):
        for lvl in ("", "-O0"):
            gen_case(f"c1_{op.lower()}_bigwindow{lvl}", 1, [1, 1, 1000, 1000],
                     [helper.make_node(op, ["x"], ["y"], kernel_shape=[1000, 1000],
                                       pads=[999] * 4)], [vi("y", None)], args=lvl)
    gen_case("c1_maxpool_dilated", 1, [1, 1, 1000, 1000],
             [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[500, 500], dilations=[1, 1],
                               pads=[499] * 4)], [vi("y", None)], args="--max-work 1000000")
    gen_case("c1_nhwcmaxpool", 1, [1, 1000, 1000, 1],
             [helper.make_node("NhwcMaxPool", ["x"], ["y"], domain="kiln", kernel_shape=[1000, 1000],
                               pads=[999] * 4)], [vi("y", None)], domains=["kiln"])

    def rnn_case(op, gates, H, seq):
        inits, nodes = gen([seq, 1, 1], "x")
        i2, n2 = gen([1, gates * H, 1], "w", 0.01)
        i3, n3 = gen([1, gates * H, H], "r", 0.01)
        outs = ["", "yh"] + ([""] if op == "LSTM" else [])
        nodes += n2 + n3 + [helper.make_node(op, ["x", "w", "r"], outs, hidden_size=H)]
        for lvl in ("", "-O0"):
            case(f"c1_{op.lower()}_long{lvl}", 1, model(nodes, [], [vi("yh", None)], inits + i2 + i3),
                 args=lvl)

    rnn_case("LSTM", 4, 512, 100000)
    rnn_case("GRU", 3, 512, 100000)
    rnn_case("RNN", 1, 1024, 100000)
    gen_case("c1_det_5000", 1, [5000, 5000], [helper.make_node("Det", ["x"], ["y"])], [vi("y", None)])
    gen_case("c1_det_5000_O0", 1, [5000, 5000], [helper.make_node("Det", ["x"], ["y"])],
             [vi("y", None)], args="-O0")
    for lvl in ("", "-O0"):
        m = model([helper.make_node("Range", ["a", "b", "c"], ["r"]),
                   helper.make_node("Unique", ["r"], ["y"], sorted=0)],
                  [], [vi("y", None)], [init("a", np.array(0, np.int64)),
                                        init("b", np.array(2000000, np.int64)),
                                        init("c", np.array(1, np.int64))])
        case(f"c1_unique_2e6{lvl}", 1, m, args=lvl)
        m = model([helper.make_node("Range", ["a", "b", "c"], ["r"]),
                   helper.make_node("TopK", ["r", "k"], ["v", "i"])],
                  [], [vi("v", None), vi("i", None, I64)],
                  [init("a", np.array(0, np.float32)), init("b", np.array(2000000, np.float32)),
                   init("c", np.array(1, np.float32)), init("k", np.array([1000000], np.int64))])
        case(f"c1_topk_1e6{lvl}", 1, m, args=lvl)
    # 10^12 steps of a reference kernel: under the default max_work (2^40) when a step
    # counted as one, refused since a step counts what it costs (src/ir/work_weight.c)
    gen_case("c1_einsum_1e12", 1, [1000, 1000],
             [helper.make_node("Einsum", ["x", "x"], ["y"], equation="ab,cd->")], [vi("y", None)])
    gen_case("c1_einsum_1e12_O0", 1, [1000, 1000],
             [helper.make_node("Einsum", ["x", "x"], ["y"], equation="ab,cd->")], [vi("y", None)],
             args="-O0")
    gen_case("c1_col2im", 1, [1, 1000000, 1],
             [helper.make_node("Col2Im", ["x", "is", "bs"], ["y"])], [vi("y", None)],
             [init("is", np.array([1000, 1000], np.int64)), init("bs", np.array([1000, 1000], np.int64))])
    gen_case("c1_cumsum_rows", 1, [1 << 40, 0],
             [helper.make_node("CumSum", ["x", "ax"], ["y"])], [vi("y", None)],
             [init("ax", np.array(1, np.int64))])
    gen_case("c1_reducemax_emptyrows", 1, [1 << 40, 0],
             [helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=0)], [vi("y", None)],
             [init("ax", np.array([0], np.int64))])
    gen_case("c1_gridsample_big", 1, [1, 1, 4, 4],
             [helper.make_node("GridSample", ["x", "g"], ["y"])], [vi("y", None)],
             [init("g", np.zeros([1, 2, 2, 2], np.float32))], expect="ok")
    gen_case("c1_mel_big", 1, [1],
             [helper.make_node("MelWeightMatrix", ["nm", "dl", "sr", "lo", "hi"], ["y"])],
             [vi("y", None)], [init("nm", np.array(100000, np.int64)), init("dl", np.array(100000, np.int64)),
                               init("sr", np.array(16000, np.int64)), init("lo", np.array(0, np.float32)),
                               init("hi", np.array(8000, np.float32))])
    gen_case("c1_nms_many", 1, [1, 100000, 4],
             [helper.make_node("NonMaxSuppression", ["x", "sc", "mo"], ["y"])], [vi("y", None, I64)],
             [init("sc", np.ones([1, 1, 100000], np.float32)), init("mo", np.array([100000], np.int64))],
             args="--max-work 100000000")
    gen_case("c1_resize_aa", 1, [1, 1, 1, 50000000],
             [helper.make_node("Resize", ["x", "", "sc"], ["y"], antialias=1, mode="cubic")],
             [vi("y", None)], [init("sc", np.array([1, 1, 1, 2e-8], np.float32))], opset=18)
    m = model([helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2])],
              [vi("x", [1, 1, 2, 2]), vi("i", [1, 1, 2, 2], I64)], [vi("y", None)])
    case("c8_maxunpool_index_oob", 8, m, inputs={"x": np.ones([1, 1, 2, 2], np.float32),
                                                  "i": np.array([0, 1, 2, 1 << 40]).reshape(1, 1, 2, 2)})
    case("c8_maxunpool_index_neg", 8, m, inputs={"x": np.ones([1, 1, 2, 2], np.float32),
                                                  "i": np.array([0, 1, 2, -3]).reshape(1, 1, 2, 2)})

    # ---- class 2: signed overflow, empty-but-huge, attribute arithmetic ----
    unary("c2_depthtospace_bs2_32", 2, "DepthToSpace", [1, 4, 1, 1], {"blocksize": 1 << 32})
    unary("c2_depthtospace_bs_sqrt", 2, "DepthToSpace", [1, 4, 1, 1], {"blocksize": 3037000500})
    unary("c2_spacetodepth_bs", 2, "SpaceToDepth", [1, 1, 0, 0], {"blocksize": 1 << 32})
    unary("c2_spacetodepth_empty_c", 2, "SpaceToDepth", [1, 0, 0, 0], {"blocksize": IMAX})
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], dilations=[BIG, 1])],
              [vi("x", [1, 1, 4, 4])], [vi("y", None)], [init("w", np.ones([1, 1, 3, 3], np.float32))])
    case("c2_conv_dilation", 2, m)
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[IMAX, 0, IMAX, 0])],
              [vi("x", [1, 1, 4, 4])], [vi("y", None)], [init("w", np.ones([1, 1, 3, 3], np.float32))])
    case("c2_conv_pads", 2, m)
    m = model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[BIG, 1])],
              [vi("x", [1, 1, 4, 4])], [vi("y", None)], [init("w", np.ones([1, 1, 3, 3], np.float32))])
    case("c2_convtranspose_stride", 2, m)
    m = model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_padding=[IMAX, 0],
                                strides=[2, 2])],
              [vi("x", [1, 1, 4, 4])], [vi("y", None)], [init("w", np.ones([1, 1, 3, 3], np.float32))])
    case("c2_convtranspose_outpad", 2, m)
    m = model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_shape=[IMAX, 4])],
              [vi("x", [1, 1, 4, 4])], [vi("y", None)], [init("w", np.ones([1, 1, 3, 3], np.float32))])
    case("c2_convtranspose_outshape", 2, m)
    unary("c2_maxpool_pads_max", 2, "MaxPool", [1, 1, 4, 4], {"kernel_shape": [2, 2], "pads": [IMAX, 0, 1, 0]})
    unary("c2_maxpool_stride_max", 2, "MaxPool", [1, 1, 4, 4], {"kernel_shape": [2, 2], "strides": [IMAX, 1]},
          expect="ok", inputs={"x": np.ones([1, 1, 4, 4], np.float32)})
    unary("c2_avgpool_dil", 2, "AveragePool", [1, 1, 4, 4], {"kernel_shape": [2, 2], "dilations": [BIG, 1]})
    m = model([helper.make_node("Pad", ["x", "p"], ["y"])], [vi("x", [2])], [vi("y", None)],
              [init("p", np.array([IMAX, 0], np.int64))])
    case("c2_pad_max", 2, m)
    m = model([helper.make_node("Pad", ["x", "p"], ["y"])], [vi("x", [2])], [vi("y", None)],
              [init("p", np.array([IMIN, IMIN], np.int64))])
    case("c2_pad_min", 2, m)
    for nm, st, en, sp in (("c2_slice_step_min", 0, 3, IMIN), ("c2_slice_start_min_neg", IMIN, IMAX, -1),
                           ("c2_slice_end_min_neg", IMAX, IMIN, -1), ("c2_slice_step_max", IMIN, IMAX, IMAX)):
        m = model([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], [vi("x", [5])],
                  [vi("y", None)], [init("s", np.array([st], np.int64)), init("e", np.array([en], np.int64)),
                                    init("a", np.array([0], np.int64)), init("t", np.array([sp], np.int64))])
        case(nm, 2, m, expect="any", inputs={"x": np.arange(5, dtype=np.float32)})
    for k in (IMIN, IMAX):
        for up in (0, 1):
            m = model([helper.make_node("Trilu", ["x", "k"], ["y"], upper=up)], [vi("x", [3, 3])],
                      [vi("y", None)], [init("k", np.array(k, np.int64))])
            case(f"c2_trilu_k{'min' if k < 0 else 'max'}_{up}", 2, m, expect="any",
                 inputs={"x": np.ones([3, 3], np.float32)})
    for k in (IMIN, IMAX):
        unary(f"c2_eyelike_k{'min' if k < 0 else 'max'}", 2, "EyeLike", [3, 3], {"k": k}, expect="any",
              inputs={"x": np.ones([3, 3], np.float32)})
    m = model([helper.make_node("Tile", ["x", "r"], ["y"])], [vi("x", [0, 4])], [vi("y", None)],
              [init("r", np.array([1, BIG], np.int64))])
    case("c2_tile_empty_huge", 2, m, inputs={"x": np.zeros([0, 4], np.float32)})
    m = model([helper.make_node("Tile", ["x", "r"], ["y"])], [vi("x", [2, 4])], [vi("y", None)],
              [init("r", np.array([0, BIG], np.int64))])
    case("c2_tile_zero_rep", 2, m, inputs={"x": np.zeros([2, 4], np.float32)})
    m = model([helper.make_node("Expand", ["x", "s"], ["y"])], [vi("x", [1])], [vi("y", None)],
              [init("s", np.array([BIG, 0, BIG], np.int64))])
    case("c2_expand_empty_huge", 2, m, inputs={"x": np.zeros([1], np.float32)})
    gen_case("c2_cos_empty_huge", 2, [BIG, BIG, 0], [helper.make_node("ConstantOfShape", ["x_shape"], ["y"])],
             [vi("y", None)])
    m = model([helper.make_node("Flatten", ["x"], ["y"], axis=2)], [vi("x", [BIG, BIG, 0])],
              [vi("y", None)])
    case("c2_flatten_empty_huge", 2, m)
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)], [vi("x", [0])], [vi("y", None)],
              [init("s", np.array([BIG, BIG, 0], np.int64))])
    case("c2_reshape_empty_huge", 2, m, inputs={"x": np.zeros([0], np.float32)})
    m = model([helper.make_node("Range", ["a", "b", "c"], ["y"])], [], [vi("y", None, I64)],
              [init("a", np.array(IMIN, np.int64)), init("b", np.array(IMAX, np.int64)),
               init("c", np.array(IMAX, np.int64))])
    case("c2_range_span", 2, m)
    m = model([helper.make_node("Range", ["a", "b", "c"], ["y"])], [], [vi("y", None)],
              [init("a", np.array(0, np.float32)), init("b", np.array(np.inf, np.float32)),
               init("c", np.array(1, np.float32))])
    case("c2_range_inf", 2, m)
    m = model([helper.make_node("Range", ["a", "b", "c"], ["y"])], [], [vi("y", None)],
              [init("a", np.array(0, np.float32)), init("b", np.array(4, np.float32)),
               init("c", np.array(np.nan, np.float32))])
    case("c2_range_nan", 2, m)
    m = model([helper.make_node("Split", ["x", "s"], ["a", "b"])], [vi("x", [4])], [vi("a", None), vi("b", None)],
              [init("s", np.array([-2, 6], np.int64))])
    case("c2_split_negative", 2, m, inputs={"x": np.arange(4, dtype=np.float32)})
    m = model([helper.make_node("OneHot", ["i", "d", "v"], ["y"])], [vi("i", [0], I64)], [vi("y", None)],
              [init("d", np.array(IMAX, np.int64)), init("v", np.array([0, 1], np.float32))])
    case("c2_onehot_depth_max", 2, m, expect="any", inputs={"i": np.zeros([0], np.int64)})
    m = model([helper.make_node("OneHot", ["i", "d", "v"], ["y"])], [vi("i", [2], I64)], [vi("y", None)],
              [init("d", np.array(4, np.int64)), init("v", np.array([0, 1], np.float32))])
    case("c2_onehot_index_min", 2, m, expect="any", inputs={"i": np.array([IMIN, 1], np.int64)})
    # integer arithmetic overflow, folded at load (initializers) and at run time (inputs)
    for op, a, b, dt in (("Add", IMAX, 1, np.int64), ("Sub", IMIN, 1, np.int64), ("Mul", IMAX, 2, np.int64),
                         ("Div", IMIN, -1, np.int64), ("Div", 5, 0, np.int64), ("Mod", 5, 0, np.int64),
                         ("Mod", IMIN, -1, np.int64), ("Div", -2**31, -1, np.int32), ("Pow", 3, 60, np.int64),
                         ("BitShift", 1, 64, np.uint64), ("Add", 2**31 - 1, 1, np.int32), ("Sum", IMAX, 1, np.int64)):
        for where in ("fold", "run"):
            attrs = {"direction": "LEFT"} if op == "BitShift" else {}
            node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
            tp = numpy_helper.from_array(np.array([a], dt)).data_type
            if where == "fold":
                m = model([node], [], [vi("y", None, tp)], [init("a", np.array([a], dt)), init("b", np.array([b], dt))])
                case(f"c2_{op.lower()}_{dt.__name__}_{a}_{b}_fold", 2, m, expect="any")
            else:
                m = model([node], [vi("a", [1], tp), vi("b", [1], tp)], [vi("y", None, tp)])
                case(f"c2_{op.lower()}_{dt.__name__}_{a}_{b}_run", 2, m, expect="any",
                     inputs={"a": np.array([a], dt), "b": np.array([b], dt)})
    for op in ("Neg", "Abs"):
        m = model([helper.make_node(op, ["a"], ["y"])], [vi("a", [1], I64)], [vi("y", None, I64)])
        case(f"c2_{op.lower()}_min", 2, m, expect="any", inputs={"a": np.array([IMIN], np.int64)})
    for op in ("ReduceSum", "ReduceProd", "CumSum"):
        ins = ["a", "ax"]
        m = model([helper.make_node(op, ins, ["y"])], [vi("a", [2], I64)], [vi("y", None, I64)],
                  [init("ax", np.array([0] if op != "CumSum" else 0, np.int64))])
        case(f"c2_{op.lower()}_overflow", 2, m, expect="any", inputs={"a": np.array([IMAX, IMAX], np.int64)})
    for v in (1e30, np.nan, -np.inf):
        for to in (I64, I32, TP.UINT8):
            m = model([helper.make_node("Cast", ["a"], ["y"], to=to)], [vi("a", [1])], [vi("y", None, to)])
            case(f"c2_cast_{v}_{to}", 2, m, expect="any", inputs={"a": np.array([v], np.float32)})
    for v in (np.nan, 1e30):
        m = model([helper.make_node("QuantizeLinear", ["a", "s", "z"], ["y"])], [vi("a", [1])], [vi("y", None, TP.UINT8)],
                  [init("s", np.array(1, np.float32)), init("z", np.array(0, np.uint8))])
        case(f"c2_quantize_{v}", 2, m, expect="any", inputs={"a": np.array([v], np.float32)})
        m = model([helper.make_node("GridSample", ["x", "g"], ["y"])], [vi("x", [1, 1, 2, 2]), vi("g", [1, 1, 1, 2])],
                  [vi("y", None)])
        case(f"c2_gridsample_{v}", 2, m, expect="any", inputs={"x": np.ones([1, 1, 2, 2], np.float32),
                                                                 "g": np.full([1, 1, 1, 2], v, np.float32)})
        m = model([helper.make_node("Resize", ["x", "", "sc"], ["y"])], [vi("x", [1, 1, 2, 2])], [vi("y", None)],
                  [init("sc", np.array([1, 1, v, 1], np.float32))])
        case(f"c2_resize_scale_{v}", 2, m, inputs={"x": np.ones([1, 1, 2, 2], np.float32)})
        m = model([helper.make_node("Resize", ["x", "roi", "sc"], ["y"], coordinate_transformation_mode="tf_crop_and_resize")],
                  [vi("x", [1, 1, 2, 2])], [vi("y", None)],
                  [init("sc", np.array([1, 1, 2, 2], np.float32)), init("roi", np.array([0, 0, v, 0, 1, 1, 1, 1], np.float32))])
        case(f"c2_resize_roi_{v}", 2, m, expect="any", inputs={"x": np.ones([1, 1, 2, 2], np.float32)})
    m = model([helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=1, time_axis=0)],
              [vi("x", [3, 2]), vi("l", [2], I64)], [vi("y", None)])
    case("c8_reversesequence_len", 8, m, inputs={"x": np.ones([3, 2], np.float32), "l": np.array([3, 1000], np.int64)})
    case("c8_reversesequence_neg", 8, m, inputs={"x": np.ones([3, 2], np.float32), "l": np.array([3, -1000], np.int64)})
    m = model([helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], num_heads=1)],
              [vi("x", [1, 1, 2, 4]), vi("p", [1, 2], I64)], [vi("y", None)],
              [init("c", np.ones([4, 2], np.float32)), init("s", np.ones([4, 2], np.float32))], opset=23)
    case("c8_rotary_pos_oob", 8, m, inputs={"x": np.ones([1, 1, 2, 4], np.float32), "p": np.array([[0, 100000]], np.int64)})
    case("c8_rotary_pos_neg", 8, m, inputs={"x": np.ones([1, 1, 2, 4], np.float32), "p": np.array([[0, -1]], np.int64)})
    m = model([helper.make_node("Compress", ["x", "c"], ["y"], axis=0)], [vi("x", [2]), vi("c", [5], TP.BOOL)], [vi("y", None)])
    case("c8_compress_long_cond", 8, m, expect="any", inputs={"x": np.ones([2], np.float32), "c": np.ones([5], bool)})
    m = model([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=IMAX)], [vi("x", [2, 2]), vi("i", [2, 1], I64)], [vi("y", None)])
    case("c2_gathernd_batchdims", 2, m, inputs={"x": np.ones([2, 2], np.float32), "i": np.zeros([2, 1], np.int64)})
    m = model([helper.make_node("CenterCropPad", ["x", "s"], ["y"])], [vi("x", [2, 2])], [vi("y", None)],
              [init("s", np.array([IMAX, -5], np.int64))])
    case("c2_centercroppad", 2, m)

    # ---- class 4: limits: scratch and generated tensors under --max-tensor-bytes / --max-work ----
    lim = "--max-tensor-bytes 100000"
    m = model([helper.make_node("Attention", ["q", "k", "v"], ["y"])], [vi("q", [1, 1, 20000, 8]),
              vi("k", [1, 1, 20000, 8]), vi("v", [1, 1, 20000, 8])], [vi("y", None)], opset=23)
    case("c4_attention_scores_scratch", 4, m, args="--max-tensor-bytes 1000000", expect="err")
    gen_case("c4_maxpool_work", 4, [1, 1, 100, 100],
             [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[100, 100], pads=[99] * 4)],
             [vi("y", None)], args="--max-work 1000000 -O0")
    gen_case("c4_lstm_work", 4, [1000, 1, 1],
             [helper.make_node("ConstantOfShape", ["r_s"], ["r"]),
              helper.make_node("ConstantOfShape", ["w_s"], ["w"]),
              helper.make_node("LSTM", ["x", "w", "r"], ["", "yh", ""], hidden_size=100)],
             [vi("yh", None)], [init("r_s", np.array([1, 400, 100], np.int64)),
                                init("w_s", np.array([1, 400, 1], np.int64))], args="--max-work 1000000 -O0")
    gen_case("c4_det_work", 4, [300, 300], [helper.make_node("Det", ["x"], ["y"])], [vi("y", None)],
             args="--max-work 1000000 -O0")
    m = model([helper.make_node("Range", ["a", "b", "c"], ["y"])], [], [vi("y", None)],
              [init("a", np.array(0, np.float32)), init("b", np.array(1e6, np.float32)), init("c", np.array(1, np.float32))])
    case("c4_range_bytes", 4, m, args=lim)
    m = model([helper.make_node("EyeLike", ["x"], ["y"])], [vi("x", [1000, 1000])], [vi("y", None)])
    case("c4_eyelike_bytes", 4, m, args=lim + " -O0", inputs=None)
    gen_case("c4_hann_bytes", 4, [1], [helper.make_node("HannWindow", ["n"], ["y"])], [vi("y", None)],
             [init("n", np.array(1000000, np.int64))], args=lim)
    gen_case("c4_onehot_bytes", 4, [1000], [helper.make_node("Cast", ["x"], ["xi"], to=I64),
                                            helper.make_node("OneHot", ["xi", "d", "v"], ["y"])], [vi("y", None)],
             [init("d", np.array(1000, np.int64)), init("v", np.array([0, 1], np.float32))], args=lim)
    gen_case("c4_stft_bytes", 4, [1, 100000, 1], [helper.make_node("STFT", ["x", "st", "", "fl"], ["y"])], [vi("y", None)],
             [init("st", np.array(1, np.int64)), init("fl", np.array(1000, np.int64))], args=lim)
    gen_case("c4_det_bytes_scratch", 4, [1, 2000, 2000], [helper.make_node("Det", ["x"], ["y"])], [vi("y", None)],
             args="--max-tensor-bytes 1000000 -O0")
    gen_case("c4_unique_bytes", 4, [100000], [helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"])],
             [vi("y", None), vi("i", None, I64), vi("inv", None, I64), vi("c", None, I64)], args=lim + " -O0")

    # ---- class 5: reads outside what the user named (external data through links, names) ----
    def ext_model(location, name):
        t = onnx.TensorProto()
        t.name = "w"; t.data_type = F; t.dims.extend([2])
        t.data_location = onnx.TensorProto.EXTERNAL
        e = t.external_data.add(); e.key = "location"; e.value = location
        m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [2])], [vi("y", None)], [t])
        case(name, 5, m)

    ext_model("link.bin", "c5_ext_symlink_out")            # link.bin -> /etc/passwd (made below)
    ext_model("sub/../../etc/passwd", "c5_ext_dotdot_mid")
    ext_model("./../x.bin", "c5_ext_dot_parent")
    ext_model("linkdir/x.bin", "c5_ext_dir_symlink")        # linkdir -> /etc
    ext_model("/proc/self/mem", "c5_ext_proc")
    ext_model("", "c5_ext_empty")
    ext_model(".", "c5_ext_dot")
    ext_model("dev_zero", "c5_ext_devzero")                 # dev_zero -> /dev/zero
    os.symlink("/etc/passwd", os.path.join(OUT, "link.bin"))
    os.symlink("/etc", os.path.join(OUT, "linkdir"))
    os.symlink("/dev/zero", os.path.join(OUT, "dev_zero"))

    # ---- class 6: wrong but silent ----
    def attr(name, **kw):
        a = onnx.AttributeProto(); a.name = name
        for k, v in kw.items():
            if k == "ints":
                a.ints.extend(v)
            else:
                setattr(a, k, v)
        return a

    def node_with(op, ins, outs, attrs):
        n = helper.make_node(op, ins, outs)
        n.attribute.extend(attrs)
        return n

    x234 = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10
    for nm, op, attrs in (
            ("c6_softmax_typo_axes", "Softmax", [attr("axes", type=onnx.AttributeProto.INTS, ints=[1])]),
            ("c6_relu_unknown_attr", "Relu", [attr("alpha", type=onnx.AttributeProto.FLOAT, f=0.5)]),
            ("c6_softmax_int_type_f_field", "Softmax", [attr("axis", type=onnx.AttributeProto.INT, f=1.0)]),
            ("c6_softmax_ref_attr", "Softmax", [attr("axis", type=onnx.AttributeProto.INT, ref_attr_name="ax")]),
            ("c6_leakyrelu_alpha_int", "LeakyRelu", [attr("alpha", type=onnx.AttributeProto.INT, i=2)]),
            ("c6_transpose_perm_int", "Transpose", [attr("perm", type=onnx.AttributeProto.INT, i=1)]),
            ("c6_cast_to_string", "Cast", [attr("to", type=onnx.AttributeProto.STRING, s=b"1")]),
            ("c6_concat_axis_float", "Concat", [attr("axis", type=onnx.AttributeProto.FLOAT, f=1.0)]),
            ("c6_gelu_approx_bad", "Gelu", [attr("approximate", type=onnx.AttributeProto.STRING, s=b"fast")]),
            ("c6_lpnorm_p3", "LpNormalization", [attr("p", type=onnx.AttributeProto.INT, i=3)]),
            ("c6_mod_fmod0_float", "Mod", [attr("fmod", type=onnx.AttributeProto.INT, i=0)]),
            ("c6_mod_fmod7", "Mod", [attr("fmod", type=onnx.AttributeProto.INT, i=7)]),
            ("c6_argmax_keepdims2", "ArgMax", [attr("keepdims", type=onnx.AttributeProto.INT, i=2)]),
            ("c6_cumsum_exclusive5", "CumSum", [attr("exclusive", type=onnx.AttributeProto.INT, i=5)]),
            ("c6_resize_mode_bad", "Resize", [attr("mode", type=onnx.AttributeProto.STRING, s=b"bicubic")]),
            ("c6_resize_nearest_bad", "Resize", [attr("nearest_mode", type=onnx.AttributeProto.STRING, s=b"nope")]),
            ("c6_pad_mode_bad", "Pad", [attr("mode", type=onnx.AttributeProto.STRING, s=b"mirror")]),
            ("c6_softmax_attr_twice_types", "Softmax", [attr("axis", type=onnx.AttributeProto.INT, i=1),
                                                         attr("axis", type=onnx.AttributeProto.FLOAT, f=2.0)]),
    ):
        ins = {"Mod": ["x", "x"], "CumSum": ["x", "ax"], "Resize": ["x", "", "sc"], "Pad": ["x", "p"]}.get(op, ["x"])
        inits = {"CumSum": [init("ax", np.array(1, np.int64))], "Resize": [init("sc", np.array([1, 1, 2], np.float32))],
                 "Pad": [init("p", np.array([0, 0, 1, 0, 0, 1], np.int64))]}.get(op, [])
        if op == "Concat":
            ins = ["x", "x"]
        outt = TP.INT64 if op == "ArgMax" else F
        m = model([node_with(op, ins, ["y"], attrs)], [vi("x", [2, 3, 4])], [vi("y", None, outt)], inits)
        case(nm, 6, m, expect="err", inputs={"x": x234})
    # opset-11 Softmax coerces to 2-D: correct result expected (checked by the runner against numpy)
    m = model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [vi("x", [2, 3, 4])], [vi("y", None)], opset=11)
    case("c6_softmax_opset11", 6, m, expect="cmp:softmax11", inputs={"x": x234}, args="--output-dir c6_softmax_opset11.out")
    m = model([helper.make_node("Clip", ["x"], ["y"], min=0.5, max=1.5)], [vi("x", [2, 3, 4])], [vi("y", None)], opset=6)
    case("c6_clip_opset6", 6, m, expect="cmp:clip6", inputs={"x": x234}, args="--output-dir c6_clip_opset6.out")
    m = model([helper.make_node("ReduceSum", ["x"], ["y"], axes=[1])], [vi("x", [2, 3, 4])], [vi("y", None)], opset=11)
    case("c6_reducesum_opset11", 6, m, expect="cmp:rsum11", inputs={"x": x234}, args="--output-dir c6_reducesum_opset11.out")
    m = model([helper.make_node("ReduceSum", ["x", "ax"], ["y"], noop_with_empty_axes=1)], [vi("x", [2, 3, 4])],
              [vi("y", None)], [init("ax", np.zeros([0], np.int64))], opset=13)
    case("c6_reducesum_noop", 6, m, expect="cmp:noop", inputs={"x": x234}, args="--output-dir c6_reducesum_noop.out")
    m = model([helper.make_node("Hardmax", ["x"], ["y"], axis=1)], [vi("x", [2, 3, 4])], [vi("y", None)], opset=11)
    case("c6_hardmax_opset11", 6, m, expect="cmp:hardmax11", inputs={"x": x234}, args="--output-dir c6_hardmax_opset11.out")
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2]), vi("x", [2])], [vi("y", None)])
    case("c6_dup_graph_input", 6, m, inputs={"x": np.ones([2], np.float32)})
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", None), vi("y", None)])
    case("c6_dup_graph_output", 6, m, expect="any", inputs={"x": np.ones([2], np.float32)})
    t = numpy_helper.from_array(np.array([1, 2], np.float32), "w"); t.float_data.extend([5, 6])
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [2])], [vi("y", None)], [t])
    case("c6_init_raw_and_float", 6, m, inputs={"x": np.ones([2], np.float32)})
    t = onnx.TensorProto(); t.name = "w"; t.data_type = TP.INT8; t.dims.extend([2]); t.int32_data.extend([1, 300])
    m = model([helper.make_node("Cast", ["w"], ["y"], to=F)], [], [vi("y", None)], [t])
    case("c6_init_int8_300", 6, m)
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", None)])
    case("c6_input_twice", 6, m, args="--input x=c6_input_twice.x.npy", inputs={"x": np.ones([2], np.float32)})
    case("c6_shape_unknown", 6, m, args="--shape nope=2")
    m = model([helper.make_node("Relu", ["x"], ["x"])], [vi("x", [2])], [vi("x", None)])
    case("c6_node_out_is_input", 6, m, inputs={"x": np.ones([2], np.float32)})

    # ---- class 11: CLI option parsing ----
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", None)])
    for i, a in enumerate(("--threads -1", "--threads 0", "--threads 1x", "--threads ''", "--max-work -5",
                           "--max-work 1e3", "--max-tensor-bytes 99999999999999999999", "--max-tensor-bytes -1",
                           "--memory-limit -1", "--memory-limit 0", "-O9", "-O", "-O-1", "--input x",
                           "--input =x.npy", "--input x=", "--shape x=-1", "--shape x=2,99999999999999999999",
                           "--shape x=", "--shape x=0", "--format xyz --output-dir d", "--output-dir ''",
                           "--threads", "--fold-limit -3", "--passes +nosuchpass", "--passes ''",
                           "--max-work 9223372036854775808", "--threads 2147483648", "--device nope",
                           "--precision fp7", "--input-types 'x:float99[2]'")):
        case(f"c11_cli_{i:02d}", 11, m, expect="usage", args=a)
    case("c11_optimize_no_o", 11, m, expect="any", cmd="optimize")
    case("c11_inspect_badopt", 11, m, expect="usage", args="--levels 9", cmd="inspect")

    # ---- class 3/8: data-dependent shapes given at run time (inference at run, not at load) ----
    def rt(name, op, x, second, attrs=None, x_t=F, s_t=I64, outs=1, third=None, expect="any"):
        ins = {"x": x, "s": second}
        ins_v = [vi("x", list(x.shape), x_t), vi("s", list(second.shape), s_t)]
        names = ["x", "s"]
        if third is not None:
            ins["t"] = third
            ins_v.append(vi("t", list(third.shape), I64))
            names.append("t")
        outn = [f"y{k}" for k in range(outs)]
        m = model([helper.make_node(op, names, outn, **(attrs or {}))], ins_v, [vi(o, None) for o in outn])
        case(name, 3, m, expect=expect, inputs=ins)

    f4 = np.ones([2, 4], np.float32)
    rt("c3_reshape_empty_minus1_zero", "Reshape", np.zeros([0, 4], np.float32), np.array([-1, 0]), {"allowzero": 1})
    rt("c3_reshape_empty_minus1", "Reshape", np.zeros([0, 4], np.float32), np.array([-1, 0]))
    rt("c3_reshape_rank9", "Reshape", f4, np.ones(9, np.int64) * 1)
    rt("c3_split_sum", "Split", np.ones([4], np.float32), np.array([1, 1]), outs=2)
    rt("c3_split_count", "Split", np.ones([4], np.float32), np.array([1, 1, 2]), outs=2)
    rt("c3_pad_neg", "Pad", np.ones([2], np.float32), np.array([-5, 0]))
    rt("c3_slice_dup_axes", "Slice", f4, np.array([0, 0]), third=np.array([2, 2]))
    rt("c3_squeeze_non1", "Squeeze", f4, np.array([1]))
    rt("c3_unsqueeze_dup", "Unsqueeze", f4, np.array([0, 0]))
    rt("c3_tile_neg", "Tile", f4, np.array([-1, 2]))
    rt("c3_expand_rank9", "Expand", f4, np.ones(9, np.int64))
    rt("c3_expand_mismatch", "Expand", f4, np.array([3, 4]))
    rt("c3_topk_neg", "TopK", f4, np.array([-1]), outs=2)
    rt("c3_topk_big", "TopK", f4, np.array([5]), outs=2)
    rt("c3_centercrop_len", "CenterCropPad", f4, np.array([2]))
    rt("c3_onehot_rank2_depth", "OneHot", np.array([0, 1], np.int64), np.array([[3]]), x_t=I64,
       third=np.array([0, 1], np.int64))
    rt("c3_dft_len_zero", "DFT", np.ones([1, 4, 1], np.float32), np.array(0))
    rt("c3_dft_len_neg", "DFT", np.ones([1, 4, 1], np.float32), np.array(-3))
    rt("c3_gathernd_oob", "GatherND", f4, np.array([[5]]))
    rt("c3_gather_elems_oob", "GatherElements", f4, np.array([[9, 0, 0, 0]]))
    rt("c3_compress_rank2", "Compress", f4, np.ones([2, 2], bool), s_t=TP.BOOL)
    m = model([helper.make_node("Range", ["a", "b", "c"], ["y"])],
              [vi("a", [], I32), vi("b", [], I32), vi("c", [], I32)], [vi("y", None, I32)])
    case("c3_range_i32_span", 3, m, expect="any", inputs={"a": np.array(2**31 - 1, np.int32),
         "b": np.array(-2**31, np.int32), "c": np.array(-2**31, np.int32)})
    m = model([helper.make_node("ConstantOfShape", ["s"], ["y"])], [vi("s", [3], I64)], [vi("y", None)])
    case("c3_cos_neg", 3, m, expect="any", inputs={"s": np.array([2, -1, 3])})
    case("c3_cos_huge_empty", 3, m, expect="any", inputs={"s": np.array([0, BIG, BIG])})
    m = model([helper.make_node("Resize", ["x", "", "", "sz"], ["y"])], [vi("x", [1, 1, 2, 2]), vi("sz", [2], I64)],
              [vi("y", None)])
    case("c3_resize_sizes_len", 3, m, expect="any", inputs={"x": np.ones([1, 1, 2, 2], np.float32), "sz": np.array([4, 4])})
    m = model([helper.make_node("HannWindow", ["n"], ["y"])], [vi("n", [], I64)], [vi("y", None)])
    case("c3_hann_neg", 3, m, expect="any", inputs={"n": np.array(-4, np.int64)})
    case("c3_hann_huge", 3, m, expect="any", inputs={"n": np.array(IMAX, np.int64)})
    m = model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"])], [vi("x", [2, 4]), vi("i", [1, 1], I64), vi("u", [1, 4])],
              [vi("y", None)])
    case("c8_scatternd_oob", 8, m, expect="any", inputs={"x": f4, "i": np.array([[7]]), "u": np.ones([1, 4], np.float32)})
    case("c8_scatternd_min", 8, m, expect="any", inputs={"x": f4, "i": np.array([[IMIN]]), "u": np.ones([1, 4], np.float32)})
    m = model([helper.make_node("Gather", ["x", "i"], ["y"])], [vi("x", [2, 4]), vi("i", [1], I64)], [vi("y", None)])
    case("c8_gather_min", 8, m, expect="any", inputs={"x": f4, "i": np.array([IMIN])})
    m = model([helper.make_node("TensorScatter", ["c", "u", "w"], ["y"], mode="circular")],
              [vi("c", [1, 4, 2]), vi("u", [1, 2, 2]), vi("w", [1], I64)], [vi("y", None)], opset=24)
    case("c8_tensorscatter_neg", 8, m, expect="any", inputs={"c": np.ones([1, 4, 2], np.float32),
         "u": np.ones([1, 2, 2], np.float32), "w": np.array([-3])})
    case("c8_tensorscatter_min", 8, m, expect="any", inputs={"c": np.ones([1, 4, 2], np.float32),
         "u": np.ones([1, 2, 2], np.float32), "w": np.array([IMIN])})

    with open(os.path.join(OUT, "probe.tsv"), "w") as f:
        for r in rows:
            f.write("\t".join(str(c) for c in r) + "\n")
    print(len(rows), "cases")


if __name__ == "__main__":
    main()
