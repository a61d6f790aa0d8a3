#!/usr/bin/env python3
"""Issue 20, round 6: FRESH hostile cases of kinds rounds 1 to 5 did not use: the
quantization ops (QuantizeLinear / DequantizeLinear block_size, axis and zero points,
QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger, DynamicQuantizeLinear),
Conv / ConvTranspose group, dilation, output_padding and auto_pad edges, BatchNormalization
in training mode, RNN / GRU / LSTM direction and activation lists, Attention (opset 23),
RotaryEmbedding, LayerNormalization, RMSNormalization, kiln's SkipLayerNorm and
MultiHeadAttention, Softmax axes in the opset-11 form, Cast (saturate, strings, odd
types), strings fed to ops that take none, integer arithmetic at its edges (INT64_MIN / -1,
division by zero, BitShift by 64), Where / Expand over empty-but-huge shapes, Reduce*
with noop_with_empty_axes and empty axes, hostile TorchScript ZIP archives (duplicate
entries, lying headers, zip64 fields, pickle opcodes of protocols 4 and 5), and the
CLI's other commands (quantize's calibration folders, optimize's and inspect's output
paths, train's .npz at the ZIP layer). Same output as make_probe.py (a scratch folder
and its probe.tsv), run by the same runner:

    .venv/bin/python tests/corpus/make_probe_r6.py OUTDIR
    tests/corpus/run_probe.sh KILN OUTDIR [CAP_KB] > RESULTS
    .venv/bin/python tests/corpus/probe_refcmp.py OUTDIR KILN RESULTS   # the cmp:ref oracle

The `cmp:ref` cases (r6v_) are valid models whose outputs probe_refcmp.py compares with
onnx.reference. Not part of the test suite: docs/fuzzing.md ("Round 6") has the results.
"""
import io
import os
import struct
import sys
import zipfile

import numpy as np
import onnx
from onnx import TensorProto as TP, helper

from make_probe import init, vi
from probe_lib import lin_module, Probe, fill_attr, model, npy_header_only

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
F, I64, I32, U8, I8, BOOL, S = TP.FLOAT, TP.INT64, TP.INT32, TP.UINT8, TP.INT8, TP.BOOL, TP.STRING
IMAX, IMIN = 2**63 - 1, -2**63
P = Probe(OUT)
rows = P.rows
case, gen_case, one = P.case, P.gen_case, P.one
N = helper.make_node
y = [vi("y", None)]
yi = [vi("y", None, I64)]
f32 = lambda n, *s: init(n, (np.arange(int(np.prod(s)), dtype=np.float32) - 3).reshape(s) / 4)
i64 = lambda n, v: init(n, np.array(v, np.int64))
sc = lambda n, v: init(n, np.array(v, np.float32))
zp8 = lambda n, v, t=np.uint8: init(n, np.array(v, t))
rng = np.random.default_rng(6)


def K(op_type, ins, outs, **kw):
    return N(op_type, ins, outs, domain="kiln", **kw)


def bad_attr(node, name, **fields):
    """node with attribute name set to fields (any type, whatever the op reads)."""
    node.attribute.append(fill_attr(onnx.AttributeProto(name=name), **fields))
    return node


def v(name, cls, nodes, ins, outs, inits=(), opset=21, inputs=None, args="", domains=()):
    """A valid case whose outputs probe_refcmp.py checks against onnx.reference."""
    case(name, cls, model(nodes, ins, outs, inits, opset, domains), "cmp:ref", args, inputs)


# ---- quantization ops: block_size, axis, zero points, scales (classes 2, 3, 6) ----
x46 = f32("x", 4, 6)
for bs, exp in ((0, "any"), (-2, "err"), (4, "err"), (7, "err"), (IMAX, "err"), (2**32, "err"), (IMIN, "err")):
    one(f"r6q_dq_block_{bs}", 3, N("DequantizeLinear", ["q", "s"], ["y"], axis=1, block_size=bs), [], y,
        [zp8("q", rng.integers(0, 255, [4, 6])), sc("s", np.ones([4, 3]) * 0.5)], expect=exp)
    one(f"r6q_q_block_{bs}", 3, N("QuantizeLinear", ["x", "s"], ["y"], axis=1, block_size=bs), [],
        [vi("y", None, U8)], [x46, sc("s", np.ones([4, 3]) * 0.5)], expect=exp)
for ax in (2, -3, IMAX, IMIN):
    one(f"r6q_dq_axis_{ax}", 3, N("DequantizeLinear", ["q", "s"], ["y"], axis=ax), [], y,
        [zp8("q", np.ones([4, 6])), sc("s", np.ones([6]))])
    one(f"r6q_q_axis_{ax}", 3, N("QuantizeLinear", ["x", "s"], ["y"], axis=ax), [], [vi("y", None, U8)],
        [x46, sc("s", np.ones([6]))])
one("r6q_dq_block_scale_rank1", 3, N("DequantizeLinear", ["q", "s"], ["y"], axis=1, block_size=2), [], y,
    [zp8("q", np.ones([4, 6])), sc("s", np.ones([3]))])
one("r6q_dq_block_scale_short", 3, N("DequantizeLinear", ["q", "s"], ["y"], axis=1, block_size=2), [], y,
    [zp8("q", np.ones([4, 6])), sc("s", np.ones([4, 2]))])
one("r6q_dq_block_scale_long", 3, N("DequantizeLinear", ["q", "s"], ["y"], axis=1, block_size=2), [], y,
    [zp8("q", np.ones([4, 6])), sc("s", np.ones([4, 9]))])
one("r6q_dq_block_zp_shape", 3, N("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1, block_size=2), [], y,
    [zp8("q", np.ones([4, 6])), sc("s", np.ones([4, 3])), zp8("z", np.ones([4, 2]))])
one("r6q_dq_block_empty_huge", 2, N("DequantizeLinear", ["q", "s"], ["y"], axis=1, block_size=2**40), [vi("q", [0, 2**41], U8)], y,
    [sc("s", np.ones([0, 2]))], inputs={"q": ("hdr", [0, 2**41], "|u1")}, expect="any")
one("r6q_dq_zp_dtype_mismatch", 3, N("DequantizeLinear", ["q", "s", "z"], ["y"]), [], y,
    [zp8("q", np.ones([4])), sc("s", 1.0), zp8("z", 0, np.int8)])
one("r6q_dq_zp_len_wrong", 3, N("DequantizeLinear", ["q", "s", "z"], ["y"], axis=0), [], y,
    [zp8("q", np.ones([4, 2])), sc("s", np.ones([4])), zp8("z", np.zeros([3]))])
one("r6q_dq_scale_rank2_no_block", 3, N("DequantizeLinear", ["q", "s"], ["y"]), [], y,
    [zp8("q", np.ones([4, 6])), sc("s", np.ones([4, 6]))])
one("r6q_dq_int32_zp_nonzero", 6, N("DequantizeLinear", ["q", "s", "z"], ["y"]), [], y,
    [init("q", np.array([5, 6], np.int32)), sc("s", 1.0), init("z", np.array(3, np.int32))], expect="any")
one("r6q_dq_scale_int", 3, N("DequantizeLinear", ["q", "s"], ["y"]), [], y,
    [zp8("q", np.ones([4])), i64("s", 1)])
one("r6q_dq_float_input", 3, N("DequantizeLinear", ["q", "s"], ["y"]), [], y,
    [sc("q", np.ones([4])), sc("s", 1.0)])
for nm, s in (("zero", 0.0), ("neg", -1.0), ("nan", np.nan), ("inf", np.inf), ("denorm", 1e-45)):
    one(f"r6q_q_scale_{nm}", 6, N("QuantizeLinear", ["x", "s"], ["y"]), [], [vi("y", None, U8)],
        [x46, sc("s", s)], expect="any")
for od in (0, 1, 8, 99, -1, TP.FLOAT8E4M3FN, TP.INT4, TP.STRING):
    one(f"r6q_q_output_dtype_{od}", 3, N("QuantizeLinear", ["x", "s"], ["y"], output_dtype=od), [], [vi("y", None, U8)],
        [x46, sc("s", 0.5)], expect="any" if od in (TP.FLOAT8E4M3FN, TP.INT4) else "err")
one("r6q_q_output_dtype_vs_zp", 3, N("QuantizeLinear", ["x", "s", "z"], ["y"], output_dtype=TP.INT8), [], [vi("y", None, U8)],
    [x46, sc("s", 0.5), zp8("z", 1)])
for sat in (0, 2, -1):
    one(f"r6q_q_saturate_{sat}_u8", 6, N("QuantizeLinear", ["x", "s"], ["y"], saturate=sat), [], [vi("y", None, U8)],
        [x46, sc("s", 1e-3)], expect="any")
one("r6q_dynq_nan", 6, N("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), [], [vi("y", None, U8), vi("s", None), vi("z", None, U8)],
    [sc("x", [np.nan, 1, 2])], expect="any")
one("r6q_dynq_inf", 6, N("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), [], [vi("y", None, U8), vi("s", None), vi("z", None, U8)],
    [sc("x", [np.inf, -np.inf, 2])], expect="any")
one("r6q_dynq_empty", 6, N("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), [], [vi("y", None, U8), vi("s", None), vi("z", None, U8)],
    [sc("x", np.zeros([0, 3]))], expect="any")
one("r6q_dynq_empty_huge", 2, N("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), [vi("x", [0, 2**62])],
    [vi("y", None, U8), vi("s", None), vi("z", None, U8)], inputs={"x": ("hdr", [0, 2**62])}, expect="any")
one("r6q_dynq_3e38", 6, N("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), [], [vi("y", None, U8), vi("s", None), vi("z", None, U8)],
    [sc("x", [3e38, -3e38])], expect="any")
one("r6q_dynq_int", 3, N("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), [], [vi("y", None, U8), vi("s", None), vi("z", None, U8)],
    [i64("x", [1, 2])])
# MatMulInteger / ConvInteger / QLinearMatMul / QLinearConv zero points
a8, b8 = zp8("a", rng.integers(0, 255, [3, 4])), zp8("b", rng.integers(0, 255, [4, 5]))
for nm, az, bz, exp in (("a_zp_rowwise", [1, 2, 3], None, "any"), ("a_zp_len2", [1, 2], None, "err"),
                        ("b_zp_colwise", None, [1, 2, 3, 4, 5], "any"), ("b_zp_len4", None, [1, 2, 3, 4], "err"),
                        ("a_zp_rank2", [[1, 2, 3]], None, "err"), ("b_zp_rank3", None, [[[1]]], "err"),
                        ("zp_int8_vs_u8", np.int8(1), None, "err")):
    ins, its = ["a", "b"], [a8, b8]
    if az is not None or bz is not None:
        ins += ["az"]
        its += [zp8("az", az if az is not None else 0, np.int8 if nm == "zp_int8_vs_u8" else np.uint8)]
    if bz is not None:
        ins += ["bz"]
        its += [zp8("bz", bz)]
    one(f"r6q_matmulinteger_{nm}", 3, N("MatMulInteger", ins, ["y"]), [], [vi("y", None, I32)], its, expect=exp)
xq = zp8("x", rng.integers(0, 255, [1, 2, 5, 5]))
wq = zp8("w", rng.integers(0, 255, [4, 2, 3, 3]))
for nm, xz, wz, exp in (("w_zp_per_channel", 0, [1, 2, 3, 4], "any"), ("w_zp_len3", 0, [1, 2, 3], "err"),
                        ("x_zp_per_channel", [1, 2], 0, "err"), ("w_zp_rank2", 0, [[1], [2], [3], [4]], "err")):
    one(f"r6q_convinteger_{nm}", 3, N("ConvInteger", ["x", "w", "xz", "wz"], ["y"]), [], [vi("y", None, I32)],
        [xq, wq, zp8("xz", xz), zp8("wz", wz)], expect=exp)
for nm, ws, wz, exp in (("w_scale_len3", [1, 1, 1], 0, "err"), ("w_zp_len3", 1.0, [0, 0, 0], "err"),
                        ("w_scale_rank2", [[1.0]] * 4, 0, "err"), ("w_scale_zero", 0.0, 0, "any"),
                        ("w_scale_nan", np.nan, 0, "any"), ("per_channel_ok", [1, 2, 3, 4], [0, 1, 2, 3], "any")):
    one(f"r6q_qlinearconv_{nm}", 3, N("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"]), [], [vi("y", None, U8)],
        [xq, sc("xs", 0.1), zp8("xz", 128), wq, sc("ws", ws), zp8("wz", wz), sc("ys", 0.5), zp8("yz", 3)], expect=exp)
one("r6q_qlinearconv_bias_int8", 3, N("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"]), [], [vi("y", None, U8)],
    [xq, sc("xs", 0.1), zp8("xz", 128), wq, sc("ws", 1.0), zp8("wz", 0), sc("ys", 0.5), zp8("yz", 3), zp8("b", [1, 2, 3, 4], np.int8)])
one("r6q_qlinearconv_bias_len3", 3, N("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"]), [], [vi("y", None, U8)],
    [xq, sc("xs", 0.1), zp8("xz", 128), wq, sc("ws", 1.0), zp8("wz", 0), sc("ys", 0.5), zp8("yz", 3), init("b", np.array([1, 2, 3], np.int32))])
one("r6q_qlinearconv_yz_int8", 3, N("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"]), [], [vi("y", None, U8)],
    [xq, sc("xs", 0.1), zp8("xz", 128), wq, sc("ws", 1.0), zp8("wz", 0), sc("ys", 0.5), zp8("yz", 3, np.int8)])
for nm, asc, bsc, exp in (("a_scale_vec", [1, 1, 1], 1.0, "any"), ("a_scale_len2", [1, 1], 1.0, "err"),
                          ("b_scale_len4", 1.0, [1, 1, 1, 1], "err"), ("scales_inf", np.inf, 1.0, "any")):
    one(f"r6q_qlinearmatmul_{nm}", 3, N("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"]), [], [vi("y", None, U8)],
        [a8, sc("as", asc), zp8("az", 1), b8, sc("bs", bsc), zp8("bz", 2), sc("ys", 0.5), zp8("yz", 3)], expect=exp)
# valid, against the reference
v("r6v_dq_block_axis1", 6, [N("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1, block_size=2)], [], y,
  [zp8("q", rng.integers(0, 255, [4, 6])), sc("s", rng.random([4, 3]) + 0.1), zp8("z", rng.integers(0, 255, [4, 3]))])
v("r6v_dq_block_axis0_ragged", 6, [N("DequantizeLinear", ["q", "s"], ["y"], axis=0, block_size=3)], [], y,
  [zp8("q", rng.integers(0, 255, [5, 2]), np.int8), sc("s", rng.random([2, 2]) + 0.1)])
v("r6v_q_block_axis1", 6, [N("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=4)], [], [vi("y", None, I8)],
  [f32("x", 3, 8), sc("s", rng.random([3, 2]) + 0.1), zp8("z", rng.integers(-5, 5, [3, 2]), np.int8)])
v("r6v_q_axis_neg", 6, [N("QuantizeLinear", ["x", "s", "z"], ["y"], axis=-2)], [], [vi("y", None, U8)],
  [f32("x", 2, 4, 3), sc("s", [0.1, 0.2, 0.3, 0.4]), zp8("z", [0, 10, 128, 255])])
v("r6v_q_round_half_even", 6, [N("QuantizeLinear", ["x", "s", "z"], ["y"])], [], [vi("y", None, U8)],
  [sc("x", [0.5, 1.5, 2.5, -0.5, -1.5, 254.5, 255.5, 300, -7]), sc("s", 1.0), zp8("z", 0)])
v("r6v_q_int8_round", 6, [N("QuantizeLinear", ["x", "s", "z"], ["y"])], [], [vi("y", None, I8)],
  [sc("x", [0.5, 1.5, -0.5, -1.5, -128.5, 127.5, 1e9, -1e9]), sc("s", 1.0), zp8("z", 0, np.int8)])
v("r6v_q_int4", 6, [N("QuantizeLinear", ["x", "s"], ["y"], output_dtype=TP.INT4)], [], [vi("y", None, TP.INT4)],
  [sc("x", [-9, -8.5, -1, 0, 3.5, 7, 7.5, 100]), sc("s", 1.0)])
v("r6v_q_uint4", 6, [N("QuantizeLinear", ["x", "s"], ["y"], output_dtype=TP.UINT4)], [], [vi("y", None, TP.UINT4)],
  [sc("x", [-1, 0, 3.5, 15, 15.5, 100]), sc("s", 1.0)])
v("r6v_dynq_allneg", 6, [N("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], [], [vi("y", None, U8), vi("s", None), vi("z", None, U8)],
  [sc("x", [-3.0, -1.0, -0.5])])
v("r6v_dynq_allzero", 6, [N("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], [], [vi("y", None, U8), vi("s", None), vi("z", None, U8)],
  [sc("x", [0.0, 0.0])])
v("r6v_matmulinteger_rowzp", 6, [N("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], [], [vi("y", None, I32)],
  [a8, b8, zp8("az", [1, 2, 3]), zp8("bz", [5, 4, 3, 2, 1])])
v("r6v_matmulinteger_i8u8", 6, [N("MatMulInteger", ["a", "b"], ["y"])], [], [vi("y", None, I32)],
  [zp8("a", rng.integers(-128, 127, [2, 3, 4]), np.int8), b8])
v("r6v_convinteger_wzp_pc", 6, [N("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])], [], [vi("y", None, I32)],
  [xq, wq, zp8("xz", 7), zp8("wz", [1, 2, 3, 4])])
v("r6v_qlinearconv_pc", 6, [N("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], strides=[2, 2])], [],
  [vi("y", None, U8)], [xq, sc("xs", 0.01), zp8("xz", 128), wq, sc("ws", [0.01, 0.02, 0.03, 0.04]),
                        zp8("wz", [0, 1, 2, 3]), sc("ys", 0.5), zp8("yz", 3), init("b", np.array([1, -2, 300, -4000], np.int32))])
v("r6v_qlinearmatmul_i8", 6, [N("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])], [], [vi("y", None, I8)],
  [zp8("a", rng.integers(-128, 127, [3, 4]), np.int8), sc("as", 0.05), zp8("az", -3, np.int8),
   zp8("b", rng.integers(-128, 127, [4, 5]), np.int8), sc("bs", 0.02), zp8("bz", 4, np.int8), sc("ys", 0.1), zp8("yz", -1, np.int8)])
v("r6v_q_fp8_saturate0", 6, [N("QuantizeLinear", ["x", "s"], ["y"], saturate=0, output_dtype=TP.FLOAT8E4M3FN)], [],
  [vi("y", None, TP.FLOAT8E4M3FN)], [sc("x", [1000, -1000, 1.1, 0.3, np.nan]), sc("s", 1.0)])

# ---- Conv / ConvTranspose: group, dilations, output_padding, auto_pad (classes 2, 3, 6) ----
xc = f32("x", 1, 4, 6, 6)
wc = lambda n, o, i, k=3: init(n, (rng.random([o, i, k, k]) - 0.5).astype(np.float32))
for g, exp in ((0, "err"), (-1, "err"), (3, "err"), (8, "err"), (IMAX, "err"), (2**32 + 2, "err")):
    one(f"r6c_conv_group_{g}", 3, N("Conv", ["x", "w"], ["y"], group=g), [], y, [xc, wc("w", 4, 2)], expect=exp)
    one(f"r6c_convt_group_{g}", 3, N("ConvTranspose", ["x", "w"], ["y"], group=g), [], y, [xc, wc("w", 4, 2)], expect=exp)
for d in (0, -1, IMAX, 2**31):
    one(f"r6c_conv_dilation_{d}", 3, N("Conv", ["x", "w"], ["y"], dilations=[d, 1]), [], y, [xc, wc("w", 2, 4)])
    one(f"r6c_convt_dilation_{d}", 3, N("ConvTranspose", ["x", "w"], ["y"], dilations=[d, 1]), [], y, [xc, wc("w", 4, 2)])
for op_, op in ((2, [2, 0]), (3, [3, 0]), (-1, [-1, 0]), (IMAX, [IMAX, 0])):
    one(f"r6c_convt_output_padding_{op_}", 3, N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_padding=op), [], y,
        [xc, wc("w", 4, 2)])
one("r6c_convt_output_padding_len3", 3, N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_padding=[1, 1, 1]), [], y,
    [xc, wc("w", 4, 2)])
for osh, exp in (([1, 1], "err"), ([2**40, 13], "err"), ([-5, 13], "err"), ([14, 14], "any"), ([13], "err")):
    one(f"r6c_convt_output_shape_{'_'.join(map(str, osh))}", 3,
        N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=osh), [], y, [xc, wc("w", 4, 2)], expect=exp)
for ap in ("SAME_MIDDLE", "same_upper", "", "NOTSET "):
    one(f"r6c_conv_auto_pad_{ap.strip().lower() or 'empty'}{'_sp' if ap.endswith(' ') else ''}", 3,
        N("Conv", ["x", "w"], ["y"], auto_pad=ap), [], y, [xc, wc("w", 2, 4)])
one("r6c_conv_auto_pad_and_pads", 3, N("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", pads=[1, 1, 1, 1]), [], y, [xc, wc("w", 2, 4)])
one("r6c_conv_same_stride_huge", 2, N("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2**62, 2**62]), [], y,
    [xc, wc("w", 2, 4)], expect="any")
one("r6c_convt_same_stride_huge", 2, N("ConvTranspose", ["x", "w"], ["y"], auto_pad="SAME_LOWER", strides=[2**40, 2**40]), [], y,
    [xc, wc("w", 4, 2)])
one("r6c_conv_kernel_shape_lies", 3, N("Conv", ["x", "w"], ["y"], kernel_shape=[5, 5]), [], y, [xc, wc("w", 2, 4)])
one("r6c_conv_w_rank3", 3, N("Conv", ["x", "w"], ["y"]), [], y, [xc, init("w", np.ones([2, 4, 3], np.float32))])
one("r6c_conv_bias_len", 3, N("Conv", ["x", "w", "b"], ["y"]), [], y, [xc, wc("w", 2, 4), sc("b", [1, 2, 3])])
one("r6c_conv_group_bias", 3, N("Conv", ["x", "w", "b"], ["y"], group=2), [], y, [xc, wc("w", 4, 2), sc("b", [1, 2])])
one("r6c_convt_bias_len", 3, N("ConvTranspose", ["x", "w", "b"], ["y"], group=2), [], y, [xc, wc("w", 4, 2), sc("b", [1, 2, 3])])
one("r6c_conv_dilated_past_input", 3, N("Conv", ["x", "w"], ["y"], dilations=[4, 4]), [], y, [xc, wc("w", 2, 4)])
one("r6c_conv_pads_neg", 3, N("Conv", ["x", "w"], ["y"], pads=[-1, 0, 0, 0]), [], y, [xc, wc("w", 2, 4)], expect="any")
one("r6c_convt_pads_past_output", 3, N("ConvTranspose", ["x", "w"], ["y"], pads=[5, 5, 5, 5]), [], y, [xc, wc("w", 4, 2)])
one("r6c_convt_empty_huge_channels", 2, N("ConvTranspose", ["x", "w"], ["y"]), [vi("x", [0, 4, 2**30, 2**30])], y,
    [wc("w", 4, 2)], inputs={"x": ("hdr", [0, 4, 2**30, 2**30])})
one("r6c_conv_group_empty_huge", 2, N("Conv", ["x", "w"], ["y"], group=2), [vi("x", [2**40, 4, 0, 6])], y,
    [wc("w", 4, 2, 1)], inputs={"x": ("hdr", [2**40, 4, 0, 6])}, expect="any")
v("r6v_conv_group_dilate_stride", 6, [N("Conv", ["x", "w", "b"], ["y"], group=2, dilations=[2, 1], strides=[1, 2], pads=[2, 1, 0, 1])],
  [], y, [xc, wc("w", 6, 2), sc("b", rng.random(6))])
v("r6v_conv_same_lower_stride3", 6, [N("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER", strides=[3, 2])], [], y, [xc, wc("w", 2, 4, 4)])
v("r6v_conv_depthwise_dilated", 6, [N("Conv", ["x", "w"], ["y"], group=4, dilations=[2, 2], pads=[2, 2, 2, 2])], [], y,
  [xc, wc("w", 8, 1)])
v("r6v_convt_output_padding", 6, [N("ConvTranspose", ["x", "w"], ["y"], strides=[3, 2], output_padding=[2, 1])], [], y,
  [xc, wc("w", 4, 3)])
v("r6v_convt_group_dilation", 6, [N("ConvTranspose", ["x", "w", "b"], ["y"], group=2, dilations=[2, 3], strides=[2, 1], pads=[1, 0, 2, 1])],
  [], y, [xc, wc("w", 4, 3), sc("b", rng.random(6))])
v("r6v_convt_same_upper", 6, [N("ConvTranspose", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])], [], y, [xc, wc("w", 4, 2)])
v("r6v_convt_same_lower_odd", 6, [N("ConvTranspose", ["x", "w"], ["y"], auto_pad="SAME_LOWER", strides=[3, 3], kernel_shape=[2, 2])],
  [], y, [xc, wc("w", 4, 2, 2)])
v("r6v_convt_output_shape", 6, [N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=[14, 13])], [], y,
  [xc, wc("w", 4, 2)])
v("r6v_conv_1d_dilated", 6, [N("Conv", ["x", "w"], ["y"], dilations=[3], strides=[2], pads=[4, 1])], [], y,
  [f32("x", 2, 3, 17), init("w", (rng.random([5, 3, 3]) - 0.5).astype(np.float32))])
v("r6v_conv_3d_group", 6, [N("Conv", ["x", "w"], ["y"], group=2, pads=[1, 0, 1, 0, 1, 0])], [], y,
  [f32("x", 1, 4, 3, 4, 5), init("w", (rng.random([2, 2, 2, 2, 2]) - 0.5).astype(np.float32))])

# ---- BatchNormalization (training_mode), Layer / RMS / Skip norms (classes 2, 3, 6) ----
bn_in = [f32("x", 2, 3, 4), sc("sc", [1, 2, 3]), sc("b", [0, 1, 2]), sc("m", [0, 0, 0]), sc("vr", [1, 1, 1])]
v("r6v_bn_training", 6, [N("BatchNormalization", ["x", "sc", "b", "m", "vr"], ["y", "rm", "rv"], training_mode=1, momentum=0.7)],
  [], [vi("y", None), vi("rm", None), vi("rv", None)], bn_in)
v("r6v_bn_training_y_only", 6, [N("BatchNormalization", ["x", "sc", "b", "m", "vr"], ["y"], training_mode=1)], [], y, bn_in)
for tm, exp in ((2, "err"), (-1, "err")):
    one(f"r6n_bn_training_mode_{tm}", 3, N("BatchNormalization", ["x", "sc", "b", "m", "vr"], ["y"], training_mode=tm), [], y, bn_in, expect=exp)
one("r6n_bn_outputs_3_inference", 3, N("BatchNormalization", ["x", "sc", "b", "m", "vr"], ["y", "rm", "rv"]), [],
    [vi("y", None), vi("rm", None), vi("rv", None)], bn_in, expect="any")
one("r6n_bn_momentum_nan", 6, N("BatchNormalization", ["x", "sc", "b", "m", "vr"], ["y", "rm", "rv"], training_mode=1, momentum=float("nan")),
    [], [vi("y", None), vi("rm", None), vi("rv", None)], bn_in, expect="any")
one("r6n_bn_epsilon_neg", 6, N("BatchNormalization", ["x", "sc", "b", "m", "vr"], ["y"], epsilon=-2.0), [], y, bn_in, expect="any")
one("r6n_bn_mean_len", 3, N("BatchNormalization", ["x", "sc", "b", "m", "vr"], ["y"]), [], y, bn_in[:3] + [sc("m", [0, 0]), bn_in[4]])
one("r6n_bn_rank1", 3, N("BatchNormalization", ["x", "sc", "b", "m", "vr"], ["y"]), [], y, [sc("x", [1, 2, 3])] + bn_in[1:], expect="any")
one("r6n_bn_training_batch0", 2, N("BatchNormalization", ["x", "sc", "b", "m", "vr"], ["y", "rm", "rv"], training_mode=1), [],
    [vi("y", None), vi("rm", None), vi("rv", None)], [init("x", np.zeros([0, 3, 4], np.float32))] + bn_in[1:], expect="any")
one("r6n_bn_training_empty_huge", 2, N("BatchNormalization", ["x", "sc", "b", "m", "vr"], ["y", "rm", "rv"], training_mode=1),
    [vi("x", [2**40, 3, 0])], [vi("y", None), vi("rm", None), vi("rv", None)], bn_in[1:],
    inputs={"x": ("hdr", [2**40, 3, 0])}, expect="any")
ln_in = [f32("x", 2, 3, 4), sc("s", np.ones([3, 4])), sc("b", np.zeros([3, 4]))]
for ax in (3, -4, IMAX, IMIN):
    one(f"r6n_layernorm_axis_{ax}", 3, N("LayerNormalization", ["x", "s", "b"], ["y"], axis=ax), [], y, ln_in)
    one(f"r6n_rmsnorm_axis_{ax}", 3, N("RMSNormalization", ["x", "s"], ["y"], axis=ax), [], y, ln_in[:2], opset=23)
for st in (0, 99, TP.DOUBLE, TP.FLOAT16):
    one(f"r6n_layernorm_stash_{st}", 3, N("LayerNormalization", ["x", "s", "b"], ["y"], axis=1, stash_type=st), [], y, ln_in,
        expect="any" if st in (TP.DOUBLE,) else "err")
one("r6n_layernorm_scale_shape", 3, N("LayerNormalization", ["x", "s"], ["y"], axis=1), [], y, [ln_in[0], sc("s", np.ones([4, 3]))])
one("r6n_layernorm_mean_out_int", 3, N("LayerNormalization", ["x", "s"], ["y", "m", "r"], axis=-1), [], [vi("y", None), vi("m", None, I64), vi("r", None)],
    ln_in[:1] + [sc("s", np.ones([4]))], expect="any")
one("r6n_layernorm_eps_neg_zero_var", 6, N("LayerNormalization", ["x", "s"], ["y"], axis=-1, epsilon=-1.0), [], y,
    [sc("x", np.ones([2, 4])), sc("s", np.ones([4]))], expect="any")
v("r6v_layernorm_axis0_stats", 6, [N("LayerNormalization", ["x", "s", "b"], ["y", "m", "r"], axis=0)], [],
  [vi("y", None), vi("m", None), vi("r", None)], [f32("x", 2, 3), sc("s", rng.random([2, 3])), sc("b", rng.random([2, 3]))])
v("r6v_layernorm_bcast_scale", 6, [N("LayerNormalization", ["x", "s", "b"], ["y"], axis=1)], [], y,
  [f32("x", 2, 3, 4), sc("s", rng.random([1, 4])), sc("b", rng.random([4]))], opset=17)
v("r6v_rmsnorm_axis1", 6, [N("RMSNormalization", ["x", "s"], ["y"], axis=1, epsilon=1e-3)], [], y,
  [f32("x", 2, 3, 4), sc("s", rng.random([3, 4]))], opset=23)
# kiln's fused norms and attention read from a file
for nm, ins, its in (("bias_len", ["x", "k", "s", "b"], [f32("x", 2, 4), f32("k", 2, 4), sc("s", np.ones(4)), sc("b", [1, 2])]),
                     ("skip_shape", ["x", "k", "s"], [f32("x", 2, 4), f32("k", 3, 4), sc("s", np.ones(4))]),
                     ("scale_rank2", ["x", "k", "s"], [f32("x", 2, 4), f32("k", 2, 4), sc("s", np.ones([2, 4]))]),
                     ("scalar_x", ["x", "k", "s"], [sc("x", 1.0), sc("k", 1.0), sc("s", [1.0])])):
    one(f"r6n_kiln_skiplayernorm_{nm}", 3, K("SkipLayerNorm", ins, ["y"]), [], y, its, domains=["kiln"])
for ax in (0, 5, IMIN):
    one(f"r6n_kiln_skiplayernorm_axis_{ax}", 3, K("SkipLayerNorm", ["x", "k", "s"], ["y"], axis=ax), [], y,
        [f32("x", 2, 4), f32("k", 2, 4), sc("s", np.ones(4))], domains=["kiln"], expect="any" if ax == 0 else "err")
one("r6n_kiln_skiplayernorm_empty_huge", 2, K("SkipLayerNorm", ["x", "x", "s"], ["y"]), [vi("x", [2**40, 0, 4])], y,
    [sc("s", np.ones(4))], inputs={"x": ("hdr", [2**40, 0, 4])}, domains=["kiln"])
for nh, exp in ((0, "err"), (-2, "err"), (3, "err"), (2**40, "err"), (IMAX, "err")):
    one(f"r6a_kiln_mha_heads_{nh}", 3, K("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=nh), [], y,
        [f32("q", 1, 3, 8), f32("k", 1, 5, 8), f32("v", 1, 5, 8)], domains=["kiln"], expect=exp)
one("r6a_kiln_mha_kv_width", 3, K("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=2), [], y,
    [f32("q", 1, 3, 8), f32("k", 1, 5, 6), f32("v", 1, 5, 8)], domains=["kiln"])
one("r6a_kiln_mha_mask_shape", 3, K("MultiHeadAttention", ["q", "k", "v", "m"], ["y"], num_heads=2), [], y,
    [f32("q", 1, 3, 8), f32("k", 1, 5, 8), f32("v", 1, 5, 8), sc("m", np.zeros([1, 7]))], domains=["kiln"])
one("r6a_kiln_mha_scale_nan", 6, K("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=2, scale=float("nan")), [], y,
    [f32("q", 1, 3, 8), f32("k", 1, 5, 8), f32("v", 1, 5, 8)], domains=["kiln"], expect="any")
one("r6a_kiln_attention_kt_shape", 3, K("Attention", ["q", "k", "v"], ["y"]), [], y,
    [f32("q", 1, 3, 8), f32("k", 1, 5, 8), f32("v", 1, 5, 8)], domains=["kiln"])
# ONNX Attention (opset 23)
q3, k3, v3 = f32("q", 1, 3, 8), f32("k", 1, 5, 8), f32("v", 1, 5, 8)
for qh, kh, exp in ((2, 0, "err"), (0, 2, "err"), (2, 3, "err"), (4, 8, "err"), (3, 3, "err"), (-2, -2, "err"),
                    (2**40, 2**40, "err"), (4, 2, "ok")):
    one(f"r6a_attn_heads_{qh}_{kh}", 3, N("Attention", ["q", "k", "v"], ["y"], q_num_heads=qh, kv_num_heads=kh), [], y,
        [q3, k3, v3], opset=23, expect=exp)
one("r6a_attn_3d_no_heads", 3, N("Attention", ["q", "k", "v"], ["y"]), [], y, [q3, k3, v3], opset=23)
for nm, kw, exp in (("softcap_neg", dict(softcap=-1.0), "any"), ("softcap_nan", dict(softcap=float("nan")), "any"),
                    ("scale_zero", dict(scale=0.0), "any"), ("scale_inf", dict(scale=float("inf")), "any"),
                    ("qk_mode_7", dict(qk_matmul_output_mode=7), "err"), ("qk_mode_neg", dict(qk_matmul_output_mode=-1), "err"),
                    ("softmax_precision_99", dict(softmax_precision=99), "err"), ("is_causal_2", dict(is_causal=2), "any")):
    one(f"r6a_attn_{nm}", 3, N("Attention", ["q", "k", "v"], ["y"], q_num_heads=2, kv_num_heads=2, **kw), [], y,
        [q3, k3, v3], opset=23, expect=exp)
one("r6a_attn_qk_out_mode3", 6, N("Attention", ["q", "k", "v"], ["y", "pk", "pv", "qk"], q_num_heads=2, kv_num_heads=2, qk_matmul_output_mode=3),
    [], [vi("y", None), vi("pk", None), vi("pv", None), vi("qk", None)], [q3, k3, v3], opset=23, expect="any")
one("r6a_attn_mask_bool_shape", 3, N("Attention", ["q", "k", "v", "m"], ["y"], q_num_heads=2, kv_num_heads=2), [], y,
    [q3, k3, v3, init("m", np.ones([3, 4], np.bool_))], opset=23)
one("r6a_attn_mask_int", 3, N("Attention", ["q", "k", "v", "m"], ["y"], q_num_heads=2, kv_num_heads=2), [], y,
    [q3, k3, v3, i64("m", np.zeros([3, 5]))], opset=23)
one("r6a_attn_past_no_present", 6, N("Attention", ["q", "k", "v", "", "pk", "pv"], ["y"], q_num_heads=2, kv_num_heads=2), [], y,
    [q3, k3, v3, f32("pk", 1, 2, 4, 4), f32("pv", 1, 2, 4, 4)], opset=23, expect="any")
one("r6a_attn_past_heads_mismatch", 3, N("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "ok", "ov"], q_num_heads=2, kv_num_heads=2),
    [], [vi("y", None), vi("ok", None), vi("ov", None)], [q3, k3, v3, f32("pk", 1, 3, 4, 4), f32("pv", 1, 3, 4, 4)], opset=23)
one("r6a_attn_4d_v_head_differs", 6, N("Attention", ["q", "k", "v"], ["y"]), [], y,
    [f32("q", 1, 2, 3, 4), f32("k", 1, 2, 5, 4), f32("v", 1, 2, 5, 6)], opset=23, expect="any")
one("r6a_attn_empty_huge_seq", 2, N("Attention", ["q", "k", "v"], ["y"]), [vi("q", [2**40, 2, 0, 4])], y,
    [f32("k", 1, 2, 5, 4), f32("v", 1, 2, 5, 4)], opset=23, inputs={"q": ("hdr", [2**40, 2, 0, 4])})
v("r6v_attn_gqa_causal", 6, [N("Attention", ["q", "k", "v"], ["y"], q_num_heads=4, kv_num_heads=2, is_causal=1)], [], y,
  [f32("q", 1, 3, 8), f32("k", 1, 5, 4), f32("v", 1, 5, 4)], opset=23)
v("r6v_attn_softcap_scale", 6, [N("Attention", ["q", "k", "v", "m"], ["y"], softcap=2.0, scale=0.3)], [], y,
  [f32("q", 2, 2, 3, 4), f32("k", 2, 2, 5, 4), f32("v", 2, 2, 5, 6), sc("m", rng.random([3, 5]))], opset=23)
v("r6v_attn_bool_mask_past", 6, [N("Attention", ["q", "k", "v", "m", "pk", "pv"], ["y", "ok", "ov"])], [],
  [vi("y", None), vi("ok", None), vi("ov", None)],
  [f32("q", 1, 2, 3, 4), f32("k", 1, 2, 2, 4), f32("v", 1, 2, 2, 4), init("m", rng.random([3, 5]) > 0.3),
   f32("pk", 1, 2, 3, 4), f32("pv", 1, 2, 3, 4)], opset=23)
# RotaryEmbedding (opset 23)
xr = f32("x", 1, 2, 3, 8)
cs = lambda n, s, w: sc(n, rng.random([s, w]))
for nm, kw, its, exp in (
        ("dim_odd", dict(rotary_embedding_dim=3), [cs("c", 4, 1), cs("s", 4, 1)], "err"),
        ("dim_past_head", dict(rotary_embedding_dim=16), [cs("c", 4, 8), cs("s", 4, 8)], "err"),
        ("dim_neg", dict(rotary_embedding_dim=-2), [cs("c", 4, 4), cs("s", 4, 4)], "err"),
        ("cache_width_wrong", {}, [cs("c", 4, 3), cs("s", 4, 3)], "err"),
        ("cache_short_pos", {}, [cs("c", 2, 4), cs("s", 2, 4)], "err"),
        ("interleaved_2", dict(interleaved=2), [cs("c", 4, 4), cs("s", 4, 4)], "any"),
        ("num_heads_on_4d", dict(num_heads=3), [cs("c", 4, 4), cs("s", 4, 4)], "any")):
    one(f"r6a_rope_{nm}", 3, N("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], **kw), [], y,
        [xr] + its + [i64("p", [[0, 1, 3]])], opset=23, expect=exp)
for nm, p in (("pos_past", [[0, 1, 4]]), ("pos_neg", [[0, -1, 2]]), ("pos_min", [[0, IMIN, 2]])):
    one(f"r6a_rope_{nm}", 3, N("RotaryEmbedding", ["x", "c", "s", "p"], ["y"]), [], y,
        [xr, cs("c", 4, 4), cs("s", 4, 4), i64("p", p)], opset=23)
for nh in (0, 3, -1, IMAX):
    one(f"r6a_rope_3d_heads_{nh}", 3, N("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], num_heads=nh), [], y,
        [f32("x", 1, 3, 8), cs("c", 4, 2), cs("s", 4, 2), i64("p", [[0, 1, 2]])], opset=23)
v("r6v_rope_interleaved_partial", 6, [N("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], interleaved=1, rotary_embedding_dim=4)], [], y,
  [xr, cs("c", 6, 2), cs("s", 6, 2), i64("p", [[5, 0, 2]])], opset=23)
v("r6v_rope_3d_heads", 6, [N("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], num_heads=2)], [], y,
  [f32("x", 2, 3, 8), cs("c", 4, 2), cs("s", 4, 2), i64("p", [[0, 1, 2], [3, 2, 1]])], opset=23)
v("r6v_rope_no_pos", 6, [N("RotaryEmbedding", ["x", "c", "s"], ["y"])], [], y,
  [xr, sc("c", rng.random([1, 3, 4])), sc("s", rng.random([1, 3, 4]))], opset=23)

# ---- RNN / GRU / LSTM attribute edges (classes 3, 6) ----
X = f32("x", 3, 2, 4)


def rnn(op, g, H=5, dirs=1, **kw):
    return ([N(op, ["x", "w", "r"], ["y", "yh"], hidden_size=H, **kw)],
            [X, sc("w", rng.random([dirs, g * H, 4]) - 0.5), sc("r", rng.random([dirs, g * H, H]) - 0.5)])


for op, g, acts in (("RNN", 1, 1), ("GRU", 3, 2), ("LSTM", 4, 3)):
    outs = [vi("y", None), vi("yh", None)]
    for d in ("sideways", "", "Forward", "bidirectional "):
        nd, its = rnn(op, g, direction=d)
        case(f"r6r_{op.lower()}_direction_{d.strip().lower() or 'empty'}{'_sp' if d.endswith(' ') else ''}", 3,
             model(nd, [], outs, its))
    nd, its = rnn(op, g, direction="bidirectional")
    case(f"r6r_{op.lower()}_bidir_w_one_dir", 3, model(nd, [], outs, its))
    for nm, al in (("too_few", ["Tanh"] * (acts - 1) or []), ("too_many", ["Tanh"] * (acts + 2)),
                   ("unknown", ["Gelu"] * acts), ("lowercase", ["tanh"] * acts), ("empty_name", [""] * acts)):
        if not al and nm == "too_few":
            continue
        nd, its = rnn(op, g, activations=al)
        case(f"r6r_{op.lower()}_activations_{nm}", 3, model(nd, [], outs, its),
             expect="any" if nm == "lowercase" else "err")
    nd, its = rnn(op, g, activations=["Affine"] * acts, activation_alpha=[1.0])
    case(f"r6r_{op.lower()}_alpha_short", 3, model(nd, [], outs, its), expect="any")
    nd, its = rnn(op, g, activations=["LeakyRelu"] * acts, activation_alpha=[0.1] * acts, activation_beta=[1.0] * 9)
    case(f"r6r_{op.lower()}_beta_long", 3, model(nd, [], outs, its), expect="any")
    for cl in (-1.0, 0.0, float("nan"), float("inf")):
        nd, its = rnn(op, g, clip=cl)
        case(f"r6r_{op.lower()}_clip_{cl}", 6, model(nd, [], outs, its), expect="any")
    for H, exp in ((0, "err"), (-5, "err"), (4, "err"), (IMAX, "err")):
        nd, its = rnn(op, g)
        nd[0].attribute[0].i = H
        case(f"r6r_{op.lower()}_hidden_{H}_vs_w", 3, model(nd, [], outs, its), expect=exp)
    for L in (2, -1):
        nd, its = rnn(op, g, layout=L)
        case(f"r6r_{op.lower()}_layout_{L}", 3, model(nd, [], outs, its))
    # the valid combination, against the reference
    al = {"RNN": ["Relu", "Tanh"], "GRU": ["HardSigmoid", "Softsign", "Relu", "Elu"],
          "LSTM": ["Sigmoid", "Tanh", "Softplus", "HardSigmoid", "LeakyRelu", "ThresholdedRelu"]}[op]
    alpha = {"RNN": [], "GRU": [0.3, 0.7], "LSTM": [0.4, 0.15, 0.2]}[op]
    beta = {"RNN": [], "GRU": [0.4], "LSTM": [0.6]}[op]
    kw = dict(direction="bidirectional", activations=al)
    if alpha:
        kw.update(activation_alpha=alpha, activation_beta=beta)
    nd, its = rnn(op, g, dirs=2, **kw)
    case(f"r6v_{op.lower()}_bidir_activations", 6, model(nd, [], outs, its, opset=14), expect="cmp:ref")
nd, its = rnn("LSTM", 4, input_forget=1, clip=0.5)
case("r6v_lstm_input_forget_clip", 6, model(nd, [], [vi("y", None), vi("yh", None)], its, opset=14), expect="cmp:ref")
nd, its = rnn("GRU", 3, linear_before_reset=1, direction="reverse")
case("r6v_gru_lbr_reverse", 6, model(nd, [], [vi("y", None), vi("yh", None)], its, opset=14), expect="cmp:ref")
nd, its = rnn("GRU", 3, linear_before_reset=2)
case("r6r_gru_linear_before_reset_2", 3, model(nd, [], [vi("y", None), vi("yh", None)], its), expect="any")
nd, its = rnn("LSTM", 4, input_forget=5)
case("r6r_lstm_input_forget_5", 3, model(nd, [], [vi("y", None), vi("yh", None)], its), expect="any")

# ---- Softmax family: axes and the opset-11 form (classes 3, 6) ----
for op in ("Softmax", "LogSoftmax", "Hardmax"):
    one(f"r6s_{op.lower()}_scalar", 3, N(op, ["x"], ["y"]), [], y, [sc("x", 2.0)], expect="any")
    one(f"r6s_{op.lower()}_scalar_axis0", 3, N(op, ["x"], ["y"], axis=0), [], y, [sc("x", 2.0)], expect="any")
    one(f"r6s_{op.lower()}_axis_2_rank2_op11", 3, N(op, ["x"], ["y"], axis=2), [], y, [f32("x", 3, 4)], opset=11, expect="any")
    one(f"r6s_{op.lower()}_empty_huge", 2, N(op, ["x"], ["y"], axis=0), [vi("x", [0, 2**62])], y,
        inputs={"x": ("hdr", [0, 2**62])}, expect="any")
    for ax in (1, 0, -1, -3):
        v(f"r6v_{op.lower()}_op11_axis_{ax}", 6, [N(op, ["x"], ["y"], axis=ax)], [], y, [f32("x", 2, 3, 4)], opset=11)
    v(f"r6v_{op.lower()}_op11_default", 6, [N(op, ["x"], ["y"])], [], y, [f32("x", 2, 3, 4)], opset=11)
    v(f"r6v_{op.lower()}_op13_axis0", 6, [N(op, ["x"], ["y"], axis=0)], [], y, [f32("x", 2, 3, 4)], opset=13)
v("r6v_softmax_inf_row", 6, [N("Softmax", ["x"], ["y"])], [], y, [sc("x", [[np.inf, 1.0], [-np.inf, -np.inf], [np.nan, 0]])])
v("r6v_logsoftmax_big", 6, [N("LogSoftmax", ["x"], ["y"])], [], y, [sc("x", [[3e38, -3e38, 0], [1e-30, 0, -1e30]])])
v("r6v_hardmax_ties", 6, [N("Hardmax", ["x"], ["y"], axis=1)], [], y, [sc("x", [[1, 3, 3, 2], [5, 5, 5, 5]])])

# ---- Cast, CastLike, strings where an op takes none (classes 3, 6) ----
strs = init("x", np.array(["1.5", "abc", "", " 2", "1e999", "nan", "-inf", "0x10", "1_000", "３"], dtype=object))
for to in (F, I64, I32, U8, BOOL, TP.FLOAT16, TP.DOUBLE, TP.BFLOAT16, TP.FLOAT8E4M3FN):
    one(f"r6t_cast_string_to_{to}", 6, N("Cast", ["x"], ["y"], to=to), [], [vi("y", None, to)], [strs], expect="any")
for to, exp in ((0, "err"), (99, "err"), (-1, "err"), (TP.COMPLEX64, "err"), (TP.INT4, "any"), (TP.FLOAT4E2M1, "any"),
                (TP.UINT64, "any"), (IMAX, "err")):
    one(f"r6t_cast_to_{to}", 3, N("Cast", ["x"], ["y"], to=to), [], [vi("y", None)], [f32("x", 2, 3)], expect=exp)
for to in (U8, I8, TP.FLOAT8E5M2):
    one(f"r6t_cast_saturate0_to_{to}", 6, N("Cast", ["x"], ["y"], to=to, saturate=0), [], [vi("y", None, to)],
        [sc("x", [1e9, -1e9, np.nan, np.inf, 300.7])], expect="any")
one("r6t_cast_to_string_attr_string", 3, bad_attr(N("Cast", ["x"], ["y"]), "to", type=onnx.AttributeProto.STRING, s=b"float"),
    [], y, [f32("x", 2)])
one("r6t_castlike_string_target", 6, N("CastLike", ["x", "t"], ["y"]), [], [vi("y", None, S)],
    [sc("x", [1.5, -0.0, np.nan, 1e30, 1e-7]), init("t", np.array(["a"], dtype=object))], expect="any")
one("r6t_castlike_target_empty_huge", 2, N("CastLike", ["x", "t"], ["y"]), [vi("t", [0, 2**62], I64)], yi, [f32("x", 2, 3)],
    inputs={"t": ("hdr", [0, 2**62], "<i8")}, expect="any")
for op, n_in, exp in (("Add", 2, "err"), ("Relu", 1, "err"), ("MatMul", 2, "err"), ("Sum", 2, "err"), ("ReduceMax", 1, "err"),
                      ("Abs", 1, "err"), ("Softmax", 1, "err"), ("Equal", 2, "any"), ("Concat", 2, "any"), ("Where", 3, "any"),
                      ("Gather", 2, "any"), ("Transpose", 1, "any"), ("Expand", 2, "any"), ("Reshape", 2, "any"),
                      ("TopK", 2, "err"), ("ArgMax", 1, "err"), ("Sqrt", 1, "err"), ("Less", 2, "err"), ("Unique", 1, "any"),
                      ("Pad", 2, "any"), ("Tile", 2, "any"), ("Max", 2, "err"), ("CumSum", 2, "err"), ("Resize", 1, "err")):
    sx = init("x", np.array([["a", "bb"], ["", "d"]], dtype=object))
    extra = {"Concat": dict(axis=0), "Gather": {}, "Expand": {}}.get(op, {})
    second = {"Where": [init("c", np.array([True, False])), sx, init("z", np.array(["q", "r"], dtype=object))],
              "Gather": [sx, i64("i", [1, 0])], "Expand": [sx, i64("i", [2, 2, 2])], "Reshape": [sx, i64("i", [4])],
              "TopK": [sx, i64("i", [1])], "Pad": [sx, i64("i", [1, 0, 0, 1])], "Tile": [sx, i64("i", [2, 1])],
              "CumSum": [sx, i64("i", 0)], "Resize": [sx]}.get(op, [sx, sx] if n_in == 2 else [sx])
    ins = {"Where": ["c", "x", "z"]}.get(op, [t.name for t in second])
    yt = BOOL if op in ("Equal", "Less") else I64 if op == "ArgMax" else S
    one(f"r6t_string_{op.lower()}", 6, N(op, ins, ["y"] + (["i"] if op == "TopK" else []), **extra), [],
        [vi("y", None, yt)] + ([vi("i", None, I64)] if op == "TopK" else []), second, expect=exp)
one("r6t_string_input_npy_to_add", 6, N("Add", ["x", "x"], ["y"]), [vi("x", [2], F)], y, inputs={"x": np.array(["a", "b"])})
t = onnx.TensorProto(name="x", data_type=S, dims=[2**40], string_data=[b"a"])
one("r6t_string_init_huge_count", 2, N("Identity", ["x"], ["y"]), [], [vi("y", None, S)], [t])
t = helper.make_tensor("x", S, [3], [b"a", b"b", b"c"]); t.string_data[1] = b"\xff\xfe"
one("r6t_string_init_bad_utf8", 6, N("Identity", ["x"], ["y"]), [], [vi("y", None, S)], [t], expect="any")
v("r6v_cast_float_to_string", 6, [N("Cast", ["x"], ["y"], to=S)], [], [vi("y", None, S)],
  [sc("x", [1.5, -0.0, np.inf, 1e-7, 123456789])])
v("r6v_cast_string_to_float_ok", 6, [N("Cast", ["x"], ["y"], to=F)], [], y,
  [init("x", np.array(["1.5", "-2", "1e3", "INF", "-inf", "NaN"], dtype=object))])
v("r6v_cast_f_to_fp8_sat", 6, [N("Cast", ["x"], ["y"], to=TP.FLOAT8E4M3FN, saturate=1), N("Cast", ["y"], ["z"], to=F)], [], [vi("z", None)],
  [sc("x", [1000, -1000, 0.1, 448, 449, 1e-9])])
v("r6v_cast_f_to_fp8e5m2_nosat", 6, [N("Cast", ["x"], ["y"], to=TP.FLOAT8E5M2, saturate=0), N("Cast", ["y"], ["z"], to=F)], [], [vi("z", None)],
  [sc("x", [1e6, -1e6, 0.1, 57344, 61440])])
v("r6v_cast_f_to_int4", 6, [N("Cast", ["x"], ["y"], to=TP.INT4), N("Cast", ["y"], ["z"], to=F)], [], [vi("z", None)],
  [sc("x", [-9, -8, 7, 8, 2.5, -2.5])])
v("r6v_cast_f_to_bool", 6, [N("Cast", ["x"], ["y"], to=BOOL)], [], [vi("y", None, BOOL)], [sc("x", [0.0, -0.0, np.nan, 1e-45, -3])])
v("r6v_cast_f_to_u8", 6, [N("Cast", ["x"], ["y"], to=U8)], [], [vi("y", None, U8)], [sc("x", [0.0, 1.9, 255.0, 7.5])])

# ---- integer arithmetic at its edges (classes 2, 6) ----
for dt, npt in ((I64, np.int64), (I32, np.int32), (I8, np.int8)):
    mn = np.iinfo(npt).min
    nm = {I64: "i64", I32: "i32", I8: "i8"}[dt]
    ti = lambda n, v_: init(n, np.array(v_, npt))
    for op, a, b in (("Div", [mn, 7, -7], [-1, 0, 2]), ("Mod", [mn, 7, -7], [-1, 0, 2]), ("Add", [np.iinfo(npt).max], [1]),
                     ("Sub", [mn], [1]), ("Mul", [mn, np.iinfo(npt).max], [-1, 2]), ("Pow", [2, -2, 3], [70, 63, -1])):
        one(f"r6i_{op.lower()}_{nm}_edges", 2, N(op, ["a", "b"], ["y"]), [], [vi("y", None, dt)], [ti("a", a), ti("b", b)], expect="any")
        one(f"r6i_{op.lower()}_{nm}_edges_runtime", 2, N(op, ["a", "b"], ["y"]), [vi("a", [len(a)], dt), vi("b", [len(b)], dt)],
            [vi("y", None, dt)], inputs={"a": np.array(a, npt), "b": np.array(b, npt)}, expect="any")
    for op in ("Neg", "Abs"):
        one(f"r6i_{op.lower()}_{nm}_min", 2, N(op, ["a"], ["y"]), [vi("a", [2], dt)], [vi("y", None, dt)],
            inputs={"a": np.array([mn, 1], npt)}, expect="any")
    for op in ("ReduceSum", "ReduceProd", "ReduceL1", "ReduceSumSquare", "ReduceMean"):
        one(f"r6i_{op.lower()}_{nm}_overflow", 2, N(op, ["a"], ["y"], keepdims=0), [vi("a", [3], dt)], [vi("y", None, dt)],
            inputs={"a": np.array([np.iinfo(npt).max, np.iinfo(npt).max, mn], npt)}, expect="any")
    one(f"r6i_cumsum_{nm}_overflow", 2, N("CumSum", ["a", "ax"], ["y"]), [vi("a", [3], dt)], [vi("y", None, dt)], [i64("ax", 0)],
        inputs={"a": np.array([np.iinfo(npt).max, 1, mn], npt)}, expect="any")
    one(f"r6i_cumprod_{nm}_overflow", 2, N("CumProd", ["a", "ax"], ["y"]), [vi("a", [3], dt)], [vi("y", None, dt)], [i64("ax", 0)],
        inputs={"a": np.array([np.iinfo(npt).max, 3, mn], npt)}, expect="any", opset=26)
    one(f"r6i_sum_mean_{nm}_overflow", 2, N("Mean", ["a", "a", "a"], ["y"]), [vi("a", [2], dt)], [vi("y", None, dt)],
        inputs={"a": np.array([np.iinfo(npt).max, mn], npt)}, expect="any")
    one(f"r6i_matmul_{nm}_overflow", 2, N("MatMul", ["a", "a"], ["y"]), [vi("a", [2, 2], dt)], [vi("y", None, dt)],
        inputs={"a": np.full([2, 2], np.iinfo(npt).max, npt)}, expect="any")
    one(f"r6i_clip_{nm}_min_gt_max", 6, N("Clip", ["a", "lo", "hi"], ["y"]), [vi("a", [3], dt)], [vi("y", None, dt)],
        [ti("lo", 5), ti("hi", -5)], inputs={"a": np.array([mn, 0, 9], npt)}, expect="any")
for nm, dt, a, b in (("u8_by_8", np.uint8, [255, 1], [8, 9]), ("u64_by_64", np.uint64, [1, 2**63], [64, 200]),
                     ("u32_by_huge", np.uint32, [7], [2**32 - 1]), ("u16_by_16", np.uint16, [1], [16])):
    for d in ("LEFT", "RIGHT"):
        one(f"r6i_bitshift_{nm}_{d.lower()}", 2, N("BitShift", ["a", "b"], ["y"], direction=d), [], [vi("y", None)],
            [init("a", np.array(a, dt)), init("b", np.array(b, dt))], expect="any")
for d in ("UP", "", "left"):
    one(f"r6i_bitshift_direction_{d or 'empty'}", 3, N("BitShift", ["a", "b"], ["y"], direction=d), [], [vi("y", None)],
        [init("a", np.array([1], np.uint8)), init("b", np.array([1], np.uint8))])
one("r6i_bitshift_int32", 3, N("BitShift", ["a", "b"], ["y"], direction="LEFT"), [], [vi("y", None)],
    [init("a", np.array([1], np.int32)), init("b", np.array([1], np.int32))])
for fm, exp in ((0, "err"), (2, "err")):
    one(f"r6i_mod_float_fmod_{fm}", 3, N("Mod", ["a", "b"], ["y"], fmod=fm), [], y, [sc("a", [5.5]), sc("b", [2.0])], expect=exp)
v("r6v_mod_int_signs", 6, [N("Mod", ["a", "b"], ["y"])], [], [vi("y", None, I32)],
  [init("a", np.array([7, -7, 7, -7, 0, 5], np.int32)), init("b", np.array([3, 3, -3, -3, 4, 5], np.int32))])
v("r6v_mod_int_fmod", 6, [N("Mod", ["a", "b"], ["y"], fmod=1)], [], [vi("y", None, I64)],
  [i64("a", [7, -7, 7, -7, IMIN + 1]), i64("b", [3, 3, -3, -3, 2])])
v("r6v_mod_float_fmod_signs", 6, [N("Mod", ["a", "b"], ["y"], fmod=1)], [], y,
  [sc("a", [5.5, -5.5, 5.5, -0.0, np.inf, 1.0]), sc("b", [2.0, 2.0, -2.0, 3.0, 2.0, np.inf])])
v("r6v_mod_u8_bcast", 6, [N("Mod", ["a", "b"], ["y"])], [], [vi("y", None, U8)],
  [init("a", np.arange(12, dtype=np.uint8).reshape(3, 4) * 20), init("b", np.array([7, 9, 250, 1], np.uint8))])
v("r6v_bitshift_u8", 6, [N("BitShift", ["a", "b"], ["y"], direction="LEFT")], [], [vi("y", None, U8)],
  [init("a", np.array([1, 3, 255, 128], np.uint8)), init("b", np.array([1, 7, 1, 0], np.uint8))])
v("r6v_bitshift_u32_right", 6, [N("BitShift", ["a", "b"], ["y"], direction="RIGHT")], [], [vi("y", None, TP.UINT32)],
  [init("a", np.array([2**32 - 1, 12, 1], np.uint32)), init("b", np.array([31, 2, 0], np.uint32))])
v("r6v_div_int_trunc", 6, [N("Div", ["a", "b"], ["y"])], [], [vi("y", None, I32)],
  [init("a", np.array([7, -7, 7, -7], np.int32)), init("b", np.array([2, 2, -2, -2], np.int32))])
v("r6v_pow_int", 6, [N("Pow", ["a", "b"], ["y"])], [], [vi("y", None, I64)], [i64("a", [2, -3, 0, 5]), i64("b", [10, 3, 0, 1])])
v("r6v_pow_float_int_exp", 6, [N("Pow", ["a", "b"], ["y"])], [], y, [sc("a", [-2.0, 0.0, -0.0, 2.0]), i64("b", [3, -1, -1, 0])])

# ---- Where / Expand over empty-but-huge shapes (classes 1, 2) ----
for nm, shp_c, shp_x, exp in (("c_0_x_2p62", [0, 1], [1, 2**62], "any"), ("x_2p40_0", [2**40, 1], [1, 0], "any"),
                              ("mismatch", [3, 0], [2, 2**40], "err"), ("3way", [2**20, 1, 1], [1, 2**20, 0], "any")):
    one(f"r6e_where_{nm}", 2, N("Where", ["c", "x", "x"], ["y"]), [vi("c", shp_c, BOOL), vi("x", shp_x)], y,
        inputs={"c": ("hdr", shp_c, "|b1"), "x": ("hdr", shp_x)}, expect=exp)
for nm, shp, tgt, exp in (("0_to_2p62", [0, 1], [1, 2**62], "any"), ("1_to_2p62_x_0", [1, 1], [2**62, 0], "any"),
                          ("to_neg", [1], [-1], "err"), ("to_2p31x2p31", [1, 1], [2**31, 2**31], "err"),
                          ("rank_1000", [1], [1] * 999 + [2], "any"), ("zero_to_min", [0], [IMIN], "err")):
    one(f"r6e_expand_{nm}", 2, N("Expand", ["x", "s"], ["y"]), [vi("x", shp)], y, [i64("s", tgt)],
        inputs={"x": ("hdr", shp) if 0 in shp else np.ones(shp, np.float32)}, expect=exp)
one("r6e_expand_shape_runtime_2p62", 2, N("Expand", ["x", "s"], ["y"]), [vi("x", [0, 1]), vi("s", [2], I64)], y,
    inputs={"x": np.zeros([0, 1], np.float32), "s": np.array([1, 2**62], np.int64)}, expect="any")
one("r6e_where_cond_uint8", 3, N("Where", ["c", "x", "x"], ["y"]), [], y, [init("c", np.array([1, 0], np.uint8)), sc("x", [1, 2])])

# ---- Reduce*: noop_with_empty_axes, empty axes, empty inputs (classes 3, 6) ----
xr3 = f32("x", 2, 3, 4)
for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceLogSum",
           "ReduceLogSumExp", "ReduceSumSquare"):
    lo = op.lower()
    v(f"r6v_{lo}_noop_empty_axes", 6, [N(op, ["x", "a"], ["y"], noop_with_empty_axes=1)], [], y, [xr3, i64("a", np.zeros([0]))])
    v(f"r6v_{lo}_noop_no_axes", 6, [N(op, ["x"], ["y"], noop_with_empty_axes=1)], [], y, [xr3])
    v(f"r6v_{lo}_empty_dim_keep", 6, [N(op, ["x", "a"], ["y"], keepdims=1)], [], y, [init("x", np.zeros([2, 0, 3], np.float32)), i64("a", [1])])
    one(f"r6d_{lo}_axes_dup", 3, N(op, ["x", "a"], ["y"]), [], y, [xr3, i64("a", [1, 1])])
    one(f"r6d_{lo}_axes_dup_neg", 3, N(op, ["x", "a"], ["y"]), [], y, [xr3, i64("a", [1, -2])])
    one(f"r6d_{lo}_keepdims_2", 3, N(op, ["x", "a"], ["y"], keepdims=2), [], y, [xr3, i64("a", [1])], expect="any")
    one(f"r6d_{lo}_noop_3", 3, N(op, ["x"], ["y"], noop_with_empty_axes=3), [], y, [xr3], expect="any")
    one(f"r6d_{lo}_axes_rank2", 3, N(op, ["x", "a"], ["y"]), [], y, [xr3, i64("a", [[1]])], expect="any")
    one(f"r6d_{lo}_axes_float", 3, N(op, ["x", "a"], ["y"]), [], y, [xr3, sc("a", [1.0])])
    one(f"r6d_{lo}_empty_huge_all", 2, N(op, ["x"], ["y"], keepdims=0), [vi("x", [2**40, 0, 2**20])], y,
        inputs={"x": ("hdr", [2**40, 0, 2**20])}, expect="any")
one("r6d_reducesum_axes_runtime_empty_noop", 6, N("ReduceSum", ["x", "a"], ["y"], noop_with_empty_axes=1), [vi("a", [None], I64)], y,
    [xr3], inputs={"a": np.zeros([0], np.int64)}, expect="ok")
one("r6d_reducesum_axes_runtime_dup", 3, N("ReduceSum", ["x", "a"], ["y"]), [vi("a", [None], I64)], y,
    [xr3], inputs={"a": np.array([2, -1], np.int64)})
one("r6d_reducemax_axes_attr_op13", 3, N("ReduceMax", ["x"], ["y"], axes=[0, 0]), [], y, [xr3], opset=13)
v("r6v_argmax_select_last", 6, [N("ArgMax", ["x"], ["y"], axis=1, select_last_index=1, keepdims=0)], [], yi,
  [sc("x", [[1, 3, 3], [np.nan, 2, np.nan]])])

# ---- TorchScript archives at the ZIP and pickle layers (classes 1, 2, 5, 8) ----
import warnings  # noqa: E402

import torch  # noqa: E402

warnings.filterwarnings("ignore")

_b = io.BytesIO()
torch.jit.save(torch.jit.trace(lin_module(), torch.ones(2, 3)), _b)
PT = _b.getvalue()
PT_ENTRIES = [(i, zipfile.ZipFile(io.BytesIO(PT)).read(i.filename)) for i in zipfile.ZipFile(io.BytesIO(PT)).infolist()]


def pt_write(name, data, cls, expect="err", args="--shape x=2x3"):
    with open(os.path.join(OUT, name + ".pt"), "wb") as f:
        f.write(data)
    rows.append((name, cls, expect, f"run {name}.pt {args}".strip()))


def pt_rezip(edit=None, extra=(), method=zipfile.ZIP_STORED):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as w:
        for info, body in PT_ENTRIES:
            r = edit(info.filename, body) if edit else body
            if r is None:
                continue
            for nm, b in (r if isinstance(r, list) else [(info.filename, r)]):
                zi = zipfile.ZipInfo(nm, info.date_time)
                zi.compress_type = method
                w.writestr(zi, b)
        for nm, b in extra:
            w.writestr(nm, b)
    return out.getvalue()


pkl_name = next(i.filename for i, _ in PT_ENTRIES if i.filename.endswith("/data.pkl"))
prefix = pkl_name.split("/")[0]
pt_write("r6z_control", pt_rezip(), 7, "ok")
pt_write("r6z_dup_data_pkl", pt_rezip(extra=[(pkl_name, b"\x80\x02N.")]), 6, "any")
pt_write("r6z_dup_storage", pt_rezip(extra=[(f"{prefix}/data/0", np.full(6, 9, np.float32).tobytes())]), 6, "any")
pt_write("r6z_storage_deflated_short", pt_rezip(lambda n, b: b[:8] if n.endswith("/data/0") else b, method=zipfile.ZIP_DEFLATED), 4)
pt_write("r6z_storage_long", pt_rezip(lambda n, b: b + bytes(4096) if n.endswith("/data/0") else b), 4, "any")
pt_write("r6z_no_data_pkl", pt_rezip(lambda n, b: None if n.endswith("/data.pkl") else b), 8)
pt_write("r6z_no_code", pt_rezip(lambda n, b: None if "/code/" in n else b), 8)
pt_write("r6z_no_storage", pt_rezip(lambda n, b: None if n.endswith("/data/0") else b), 8)
pt_write("r6z_two_prefixes", pt_rezip(extra=[("other/data.pkl", b"\x80\x02N."), ("other/version", b"3\n")]), 6, "any")
pt_write("r6z_version_huge", pt_rezip(lambda n, b: b"99999999999999999999\n" if n.endswith("/version") else b), 3)
pt_write("r6z_version_neg", pt_rezip(lambda n, b: b"-1\n" if n.endswith("/version") else b), 3)
pt_write("r6z_name_dotdot", pt_rezip(lambda n, b: [("../" + n, b)] if n.endswith("/data.pkl") else b), 5)
pt_write("r6z_name_abs", pt_rezip(lambda n, b: [("/" + n, b)] if n.endswith("/data.pkl") else b), 5)
pt_write("r6z_name_nul", pt_rezip(lambda n, b: [(n + "\0x", b)] if n.endswith("/data/0") else b), 5, "any")
pt_write("r6z_name_backslash", pt_rezip(lambda n, b: [(n.replace("/", "\\"), b)] if n.endswith("/data/0") else b), 5)
pt_write("r6z_empty_zip", pt_rezip(lambda n, b: None), 8)
pt_write("r6z_bzip2", pt_rezip(method=zipfile.ZIP_BZIP2), 8)
pt_write("r6z_lzma", pt_rezip(method=zipfile.ZIP_LZMA), 8)


def mutate(data, fn):
    b = bytearray(data)
    fn(b)
    return bytes(b)


def eocd(b):
    return b.rfind(b"PK\x05\x06")


def cd_entries(b):
    off = struct.unpack_from("<I", b, eocd(b) + 16)[0]
    out = []
    while b[off:off + 4] == b"PK\x01\x02":
        nl, el, cl = struct.unpack_from("<HHH", b, off + 28)
        out.append(off)
        off += 46 + nl + el + cl
    return out


base = pt_rezip()
stor = next(o for o in cd_entries(base) if bytes(base[o + 46:o + 46 + struct.unpack_from("<H", base, o + 28)[0]]).endswith(b"/data/0"))
lho = struct.unpack_from("<I", base, stor + 42)[0]


def setf(fmt, off, val):
    return lambda b: struct.pack_into(fmt, b, off, val)


pt_write("r6z_cd_size_huge", mutate(base, setf("<I", stor + 20, 0xFFFFFFF0)), 4)
pt_write("r6z_cd_usize_huge", mutate(base, setf("<I", stor + 24, 0xFFFFFFF0)), 4)
pt_write("r6z_cd_size_ffffffff_no_zip64", mutate(base, lambda b: (struct.pack_into("<I", b, stor + 20, 0xFFFFFFFF),
                                                                 struct.pack_into("<I", b, stor + 24, 0xFFFFFFFF))), 4)
pt_write("r6z_cd_offset_past", mutate(base, setf("<I", stor + 42, 0x7FFFFFFF)), 8)
pt_write("r6z_cd_offset_ffffffff", mutate(base, setf("<I", stor + 42, 0xFFFFFFFF)), 8)
pt_write("r6z_cd_offset_to_cd", mutate(base, setf("<I", stor + 42, struct.unpack_from("<I", base, eocd(base) + 16)[0])), 8)
pt_write("r6z_cd_method_99", mutate(base, setf("<H", stor + 10, 99)), 8)
pt_write("r6z_cd_encrypted", mutate(base, setf("<H", stor + 8, 1)), 8, "any")
pt_write("r6z_lh_name_len_huge", mutate(base, setf("<H", lho + 26, 0xFFFF)), 8)
pt_write("r6z_lh_extra_len_huge", mutate(base, setf("<H", lho + 28, 0xFFFF)), 8)
pt_write("r6z_lh_method_differs", mutate(base, setf("<H", lho + 8, 8)), 8, "any")
pt_write("r6z_lh_size_differs", mutate(base, setf("<I", lho + 18, 3)), 8, "any")
pt_write("r6z_crc_wrong", mutate(base, setf("<I", stor + 16, 0xDEADBEEF)), 8, "any")
e = eocd(base)
pt_write("r6z_eocd_count_ffff", mutate(base, lambda b: (struct.pack_into("<H", b, e + 8, 0xFFFF), struct.pack_into("<H", b, e + 10, 0xFFFF))), 8)
pt_write("r6z_eocd_count_0", mutate(base, lambda b: (struct.pack_into("<H", b, e + 8, 0), struct.pack_into("<H", b, e + 10, 0))), 8)
pt_write("r6z_eocd_cd_size_huge", mutate(base, setf("<I", e + 12, 0x7FFFFFFF)), 8)
pt_write("r6z_eocd_cd_offset_ffffffff", mutate(base, setf("<I", e + 16, 0xFFFFFFFF)), 8)
pt_write("r6z_eocd_disk_1", mutate(base, setf("<H", e + 4, 1)), 8, "any")
pt_write("r6z_eocd_comment_past", mutate(base, setf("<H", e + 20, 0xFFFF)), 8, "any")
pt_write("r6z_prefix_garbage", b"\x00" * 1000 + base, 8, "any")
pt_write("r6z_two_eocd", base + base[e:], 8, "any")
pt_write("r6z_eocd_only", base[e:], 8)
# a zip64 end record that lies: count 2^62, offset past the file
z64 = (b"PK\x06\x06" + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, 2**62, 2**62, 2**40, 2**62) +
       b"PK\x06\x07" + struct.pack("<IQI", 0, len(base) - (len(base) - e), 1))
pt_write("r6z_zip64_eocd_lies", base[:e] + z64 + mutate(base[e:], lambda b: (struct.pack_into("<H", b, 8, 0xFFFF),
                                                                            struct.pack_into("<H", b, 10, 0xFFFF),
                                                                            struct.pack_into("<I", b, 16, 0xFFFFFFFF))), 8)
z64b = (b"PK\x06\x07" + struct.pack("<IQI", 0, 2**63 - 1, 1))
pt_write("r6z_zip64_locator_offset_max", base[:e] + z64b + mutate(base[e:], setf("<I", 16, 0xFFFFFFFF)), 8)
# a zip64 extra field in the storage's central entry with a size of 2^62
ex = struct.pack("<HHQQ", 1, 16, 2**62, 2**62)


def add_extra(b):
    nl, el = struct.unpack_from("<HH", b, stor + 28)
    return bytes(b[:stor + 46 + nl]) + ex + bytes(b[stor + 46 + nl:])


z = bytearray(add_extra(bytearray(base)))
struct.pack_into("<H", z, stor + 30, struct.unpack_from("<H", z, stor + 30)[0] + len(ex))
struct.pack_into("<II", z, stor + 20, 0xFFFFFFFF, 0xFFFFFFFF)
struct.pack_into("<I", z, eocd(z) + 12, struct.unpack_from("<I", z, eocd(z) + 12)[0] + len(ex))
pt_write("r6z_zip64_extra_size_2p62", bytes(z), 4)
# pickle opcodes of protocols 4 and 5, and others no round used
PK = lambda body: pt_rezip(lambda n, b: body if n.endswith("/data.pkl") else b)
for nm, body, cls in (
        ("frame_len_huge", b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7fN.", 4),
        ("frame_len_short", b"\x80\x04\x95\x01\x00\x00\x00\x00\x00\x00\x00N)\x86.", 8),
        ("binunicode8_huge", b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7fab.", 4),
        ("binbytes8_huge", b"\x80\x04\x8e\x00\x00\x00\x00\x00\x00\x00\x80ab.", 4),
        ("bytearray8", b"\x80\x05\x96\x03\x00\x00\x00\x00\x00\x00\x00abc.", 8),
        ("next_buffer", b"\x80\x05\x97.", 8),
        ("readonly_buffer_empty", b"\x80\x05\x98.", 8),
        ("short_binunicode_bad_utf8", b"\x80\x04\x8c\x02\xff\xfe.", 8),
        ("stack_global_non_str", b"\x80\x04K\x01K\x02\x93.", 8),
        ("stack_global_os_system", b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R.", 5),
        ("global_builtins_eval", b"\x80\x02c__builtin__\neval\nX\x01\x00\x00\x001\x85R.", 5),
        ("global_no_newline", b"\x80\x02ctorch", 8),
        ("inst_opcode", b"\x80\x02(i__main__\nX\n.", 8),
        ("obj_opcode", b"\x80\x02(c__main__\nX\no.", 8),
        ("ext1", b"\x80\x02\x82\x01.", 8),
        ("ext4", b"\x80\x02\x84\xff\xff\xff\xff.", 8),
        ("newobj_ex_empty", b"\x80\x04\x92.", 8),
        ("persid_text", b"\x80\x02P0\n.", 8),
        ("binpersid_empty_stack", b"\x80\x02Q.", 8),
        ("binpersid_int", b"\x80\x02K\x05Q.", 8),
        ("pop_mark_no_mark", b"\x80\x021.", 8),
        ("dup_empty", b"\x80\x022.", 8),
        ("stop_empty", b"\x80\x02.", 8),
        ("no_stop", b"\x80\x02N", 8),
        ("memoize_empty", b"\x80\x04\x94.", 8),
        ("long_binget_max", b"\x80\x02N\x94j\xff\xff\xff\xff.", 8),
        ("get_text_junk", b"\x80\x02Ng1x\n.", 8),
        ("put_text_huge", b"\x80\x02Np99999999999999999999999\n.", 4),
        ("long1_len_255", b"\x80\x02\x8a\xff" + b"\x7f" * 255 + b".", 4),
        ("int_text_huge", b"\x80\x02I" + b"9" * 5000 + b"\n.", 4),
        ("float_text_nan", b"\x80\x02Fnan\n.", 6),
        ("binfloat_nan", b"\x80\x02G\x7f\xf8\x00\x00\x00\x00\x00\x00.", 6),
        ("proto_99", b"\x80\x63N.", 8),
        ("tuple3_short_stack", b"\x80\x02N\x87.", 8),
        ("setitems_odd", b"\x80\x02}(NNNu.", 8),
        ("appends_to_dict", b"\x80\x02}(Ne.", 8),
        ("setitem_on_list", b"\x80\x02]NNs.", 8),
        ("build_on_int", b"\x80\x02K\x01}b.", 8),
        ("reduce_on_int", b"\x80\x02K\x01)R.", 8),
        ("frozenset", b"\x80\x04\x91.", 8),
        ("empty_set_additems", b"\x80\x04\x8f(K\x01\x90.", 8),
        ("mark_at_stop", b"\x80\x02(.", 8)):
    pt_write(f"r6k_pickle_{nm}", PK(body), cls, "err" if cls != 6 else "any")
# pickles whose tensor rebuild is wrong in new ways
REB = b"ctorch._utils\n_rebuild_tensor_v2\n"
for nm, body in (
        ("rebuild_args_short", b"\x80\x02" + REB + b"N\x85R."),
        ("rebuild_args_not_tuple", b"\x80\x02" + REB + b"NR."),
        ("rebuild_storage_not_persid", b"\x80\x02" + REB + b"(K\x00K\x00)Kt\x89NtR."),
        ("persid_tuple_short", b"\x80\x02" + REB + b"((X\x07\x00\x00\x00storageQK\x00(K\x06t(K\x01t\x89NtR."),
        ("persid_device_cuda", b"\x80\x02" + REB + b"((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x06\x00\x00\x00cuda:9K\x06tQK\x00(K\x06t(K\x01t\x89NtR."),
        ("persid_key_int", b"\x80\x02" + REB + b"((X\x07\x00\x00\x00storagectorch\nFloatStorage\nK\x00X\x03\x00\x00\x00cpuK\x06tQK\x00(K\x06t(K\x01t\x89NtR."),
        ("persid_numel_float", b"\x80\x02" + REB + b"((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuG@\x18\x00\x00\x00\x00\x00\x00tQK\x00(K\x06t(K\x01t\x89NtR."),
        ("persid_kind_module", b"\x80\x02" + REB + b"((X\x06\x00\x00\x00moduleK\x00tQK\x00(K\x06t(K\x01t\x89NtR."),
        ("sizes_dict", b"\x80\x02" + REB + b"((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x06tQK\x00}(K\x01t\x89NtR.")):
    pt_write(f"r6k_{nm}", PK(body), 8)

# ---- the CLI's other commands: quantize, optimize, inspect, bench, train (classes 1, 5, 6, 11) ----
lin = model([N("MatMul", ["x", "w"], ["y"])], [vi("x", [2, 4])], y, [sc("w", rng.random([4, 3]))])
with open(os.path.join(OUT, "r6_lin.onnx"), "wb") as f:
    f.write(lin.SerializeToString())


def tpb(path, arr, name="x"):
    with open(os.path.join(OUT, path), "wb") as f:
        f.write(onnx.numpy_helper.from_array(arr, name).SerializeToString())


def mk(path):
    os.makedirs(os.path.join(OUT, path), exist_ok=True)
    return os.path.join(OUT, path)


def link(target, path):
    p = os.path.join(OUT, path)
    if os.path.lexists(p):
        os.remove(p)
    os.symlink(target, p)


def fifo(path):
    p = os.path.join(OUT, path)
    if os.path.lexists(p):
        os.remove(p)
    os.mkfifo(p)


Q = "quantize r6_lin.onnx -o r6_q.onnx --calibrate"
good = np.ones([2, 4], np.float32)
mk("r6_cal_out/test_data_set_0")
tpb("r6_cal_out/test_data_set_0/input_0.pb", good)
# calibration folders: links and FIFOs, many sets, odd files
d = mk("r6_cal_link_file"); link("../r6_cal_out/test_data_set_0/input_0.pb", "r6_cal_link_file/input_0.pb")
d = mk("r6_cal_link_set"); link("../r6_cal_out/test_data_set_0", "r6_cal_link_set/test_data_set_0")
d = mk("r6_cal_link_abs"); link("/etc/hostname", "r6_cal_link_abs/input_0.pb")
d = mk("r6_cal_link_proc"); link("/proc/self", "r6_cal_link_proc/test_data_set_0")
d = mk("r6_cal_fifo_file"); fifo("r6_cal_fifo_file/input_0.pb")
d = mk("r6_cal_fifo_set1/test_data_set_0"); tpb("r6_cal_fifo_set1/test_data_set_0/input_0.pb", good)
mk("r6_cal_fifo_set1/test_data_set_1"); fifo("r6_cal_fifo_set1/test_data_set_1/input_0.pb")
d = mk("r6_cal_dir_as_file/input_0.pb")
d = mk("r6_cal_loop"); link("test_data_set_0", "r6_cal_loop/test_data_set_0")
d = mk("r6_cal_second_input_link"); tpb("r6_cal_second_input_link/input_0.pb", good)
link("/dev/zero", "r6_cal_second_input_link/input_1.pb")
d = mk("r6_cal_wrong_shape"); tpb("r6_cal_wrong_shape/input_0.pb", np.ones([2, 5], np.float32))
d = mk("r6_cal_named_other"); tpb("r6_cal_named_other/input_0.pb", good, "nosuch")
d = mk("r6_cal_empty_huge")
t = onnx.TensorProto(); t.name = "x"; t.data_type = F; t.dims.extend([0, 2**62]); open(os.path.join(d, "input_0.pb"), "wb").write(t.SerializeToString())
d = mk("r6_cal_many_sets")
for i in range(3000):
    os.makedirs(os.path.join(d, f"test_data_set_{i}"), exist_ok=True)
    if i == 0:
        tpb(f"r6_cal_many_sets/test_data_set_{i}/input_0.pb", good)
    else:
        os.link(os.path.join(d, "test_data_set_0", "input_0.pb"), os.path.join(d, f"test_data_set_{i}", "input_0.pb")) \
            if not os.path.exists(os.path.join(d, f"test_data_set_{i}", "input_0.pb")) else None
for nm, cls, exp in (("cal_out", 7, "ok"), ("cal_link_file", 5, "any"), ("cal_link_set", 5, "any"), ("cal_link_abs", 5, "err"),
                     ("cal_link_proc", 5, "err"), ("cal_fifo_file", 1, "err"), ("cal_fifo_set1", 1, "err"),
                     ("cal_dir_as_file", 8, "err"), ("cal_loop", 8, "err"), ("cal_second_input_link", 5, "any"),
                     ("cal_wrong_shape", 3, "err"), ("cal_named_other", 6, "any"), ("cal_empty_huge", 2, "err"),
                     ("cal_many_sets", 1, "any")):
    rows.append((f"r6l_quantize_{nm}", cls, exp, f"{Q} r6_{nm}"))
fifo("r6_cal_fifo.npz")
rows.append(("r6l_quantize_fifo_npz", 1, "err", f"{Q} r6_cal_fifo.npz"))
link("/proc/self/environ", "r6_cal_proc.npz")
rows.append(("r6l_quantize_proc_npz", 5, "err", f"{Q} r6_cal_proc.npz"))
rows.append(("r6l_quantize_dev_zero", 1, "err", f"{Q} /dev/zero"))
rows.append(("r6l_quantize_calibrate_65", 11, "usage", "quantize r6_lin.onnx -o r6_q.onnx" + " --calibrate r6_cal_out" * 65))
# output paths: a folder, a link to the model, a FIFO, a file in a missing folder, a dangling link
mk("r6_outdir.onnx")
# a device of the probe's own (as /dev/full: writes fail with ENOSPC), so that a kiln that
# renames over a device (round 6's finding, as root) replaces this one, not /dev/full
DEV = "r6_dev_full"
try:
    if os.path.lexists(os.path.join(OUT, DEV)):
        os.remove(os.path.join(OUT, DEV))
    os.mknod(os.path.join(OUT, DEV), 0o666 | __import__("stat").S_IFCHR, os.makedev(1, 7))
except PermissionError:
    DEV = "/dev/full"  # not root: a rename over it fails anyway
link("r6_lin.onnx", "r6_out_link_model.onnx")
fifo("r6_out_fifo.onnx")
link("/nonexistent/dir/x.onnx", "r6_out_dangling.onnx")
for cmd, o in (("optimize r6_lin.onnx -o", ""), (f"{Q} r6_cal_out -o", "")):
    base_ = cmd.split()[0]
    rows.append((f"r6o_{base_}_out_dir", 5, "err", f"{cmd} r6_outdir.onnx"))
    rows.append((f"r6o_{base_}_out_link_to_model", 5, "any", f"{cmd} r6_out_link_model.onnx"))
    rows.append((f"r6o_{base_}_out_fifo", 1, "any", f"{cmd} r6_out_fifo.onnx"))
    rows.append((f"r6o_{base_}_out_dangling", 5, "any", f"{cmd} r6_out_dangling.onnx"))
    rows.append((f"r6o_{base_}_out_proc", 5, "err", f"{cmd} /proc/self/mem"))
    rows.append((f"r6o_{base_}_out_empty", 11, "usage", f"{cmd} ''"))
    rows.append((f"r6o_{base_}_out_dev_full", 5, "err", f"{cmd} {DEV}"))
rows.append(("r6o_optimize_onto_itself", 5, "any", "optimize r6_lin.onnx -o r6_lin.onnx"))
rows.append(("r6o_inspect_dot_dir", 5, "err", "inspect r6_lin.onnx --dot r6_outdir.onnx"))
rows.append(("r6o_inspect_dot_missing_dir", 5, "err", "inspect r6_lin.onnx --dot /nonexistent/x.dot"))
rows.append(("r6o_inspect_dot_dev_full", 5, "err", f"inspect r6_lin.onnx --dot {DEV}"))
rows.append(("r6o_inspect_dot_fifo", 1, "any", "inspect r6_lin.onnx --dot r6_out_fifo.onnx"))
rows.append(("r6o_inspect_dot_onto_model", 5, "any", "inspect r6_out_link_model.onnx --dot r6_out_link_model.onnx"))
rows.append(("r6o_quantize_report_csv_dev_full", 5, "err", f"{Q} r6_cal_out --report-csv {DEV}"))
rows.append(("r6o_quantize_report_csv_dir", 5, "err", f"{Q} r6_cal_out --report-csv r6_outdir.onnx"))
# model paths that are not files
fifo("r6_model_fifo.onnx")
for cmd in ("inspect", "optimize", "bench", "check"):
    tail = {"optimize": " -o r6_x.onnx", "bench": " --time 0.1", "check": ""}.get(cmd, "")
    rows.append((f"r6m_{cmd}_model_fifo", 1, "err", f"{cmd} r6_model_fifo.onnx{tail}"))
    rows.append((f"r6m_{cmd}_model_dir", 8, "err", f"{cmd} r6_outdir.onnx{tail}"))
    rows.append((f"r6m_{cmd}_model_proc", 5, "err", f"{cmd} /proc/self/cmdline{tail}"))
    rows.append((f"r6m_{cmd}_model_dev_zero", 1, "err", f"{cmd} /dev/zero{tail}"))
# bench with hostile options
for i, a in enumerate(("--time -1", "--time nan", "--warmup -1", "--warmup 9223372036854775807 --time 0.1",
                       "--iterations 0", "--iterations -5", "--batch 0", "--batch 9223372036854775807",
                       f"--json {DEV}", "--trace r6_outdir.onnx", "--trace /nonexistent/t.json",
                       "--threads 0", "--time 1e-300", "--shape x=0x4 --time 0.1", "--shape x=9223372036854775807x4")):
    rows.append((f"r6b_bench_{i:02d}", 11, "usage" if i not in (12, 13) else "any", f"bench r6_lin.onnx {a}"))
# train: .npz data hostile at the ZIP layer
trn = model([N("MatMul", ["x", "w"], ["y"])], [vi("x", ["b", 4])], [vi("y", ["b", 3])], [sc("w", rng.random([4, 3]))])
with open(os.path.join(OUT, "r6_train.onnx"), "wb") as f:
    f.write(trn.SerializeToString())


def npz_bytes(arrays, method=zipfile.ZIP_STORED, names=None):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as z:
        for i, (k, a) in enumerate(arrays.items()):
            b = io.BytesIO()
            np.save(b, a)
            z.writestr((names or {}).get(k, k + ".npy"), b.getvalue())
    return out.getvalue()


X16, Y16 = np.ones([16, 4], np.float32), np.zeros([16, 3], np.float32)
good_npz = npz_bytes({"x": X16, "target": Y16})
T = "train r6_train.onnx --epochs 1 --loss mse --data"


def tcase(nm, data, cls, exp="err", more=""):
    with open(os.path.join(OUT, f"r6_{nm}.npz"), "wb") as f:
        f.write(data)
    rows.append((f"r6n_train_{nm}", cls, exp, f"{T} r6_{nm}.npz {more}".strip()))


tcase("npz_control", good_npz, 7, "ok")
ge = eocd(good_npz)
gcd = cd_entries(good_npz)
tcase("npz_cd_offset_past", mutate(good_npz, setf("<I", gcd[0] + 42, 0x7FFFFFFF)), 8)
tcase("npz_cd_size_huge", mutate(good_npz, setf("<I", gcd[0] + 20, 0xFFFFFFF0)), 4)
tcase("npz_cd_method_99", mutate(good_npz, setf("<H", gcd[0] + 10, 99)), 8)
tcase("npz_eocd_count_lies", mutate(good_npz, lambda b: (struct.pack_into("<H", b, ge + 8, 9), struct.pack_into("<H", b, ge + 10, 9))), 8)
tcase("npz_eocd_cd_offset_past", mutate(good_npz, setf("<I", ge + 16, 0x7FFFFFFF)), 8)
tcase("npz_bzip2", npz_bytes({"x": X16, "target": Y16}, zipfile.ZIP_BZIP2), 8)
tcase("npz_x_twice", npz_bytes({"x": X16, "target": Y16, "z": X16}, names={"z": "x.npy"}), 6, "any")
tcase("npz_name_no_npy", npz_bytes({"x": X16, "target": Y16}, names={"x": "x"}), 8, "any")
tcase("npz_name_dotdot", npz_bytes({"x": X16, "target": Y16}, names={"x": "../x.npy"}), 5, "any")
_o = io.BytesIO()
with zipfile.ZipFile(_o, "w") as _z:
    _z.writestr("x.npy", good_npz)
tcase("npz_nested_zip", _o.getvalue(), 8)
tcase("npz_rows_differ", npz_bytes({"x": X16, "target": np.zeros([15, 3], np.float32)}), 3)
tcase("npz_y_int", npz_bytes({"x": X16, "target": np.zeros([16, 3], np.int64)}), 3, "any")
tcase("npz_x_nan", npz_bytes({"x": np.full([16, 4], np.nan, np.float32), "target": Y16}), 6, "any")
tcase("npz_x_rank0", npz_bytes({"x": np.float32(1), "target": Y16}), 3)
tcase("npz_x_fortran", npz_bytes({"x": np.asfortranarray(np.arange(64, dtype=np.float32).reshape(16, 4)), "target": Y16}), 6, "any")
tcase("npz_truncated_at_cd", good_npz[:gcd[0] + 10], 8)
tcase("npz_empty_file", b"", 8)

with open(os.path.join(OUT, "probe.tsv"), "w") as f:
    for r in rows:
        f.write("\t".join(str(c) for c in r) + "\n")
print(len(rows), "cases")
