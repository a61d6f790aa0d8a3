#!/usr/bin/env python3
"""Issue 20, re-probe (round 2): FRESH hostile cases of the issue's classes, built from
ops, attributes and paths that make_probe.py and the bad corpus do not use. Same output
as make_probe.py (a scratch folder and its probe.tsv), run by the same runner:

    .venv/bin/python tests/corpus/make_probe_r2.py OUTDIR
    tests/corpus/run_probe.sh KILN OUTDIR [CAP_KB]

Not part of the test suite: cases that found defects went into tests/corpus/bad.
"""
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP, helper, numpy_helper

# make_probe.py's helpers, the same here (its case() is not: this one also writes
# header-only .npy files)
from make_probe import gen, init, vi
from probe_lib import Probe, fill_attr, model, npy_header_only

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
F, I64, I32, U8 = TP.FLOAT, TP.INT64, TP.INT32, TP.UINT8
BIG = 2**62
IMAX, IMIN = 2**63 - 1, -2**63


# the case list and its helpers (probe_lib.py, shared with the other rounds)
P = Probe(OUT)
rows = P.rows
case, gen_case, one = P.case, P.gen_case, P.one


y = [vi("y", None)]
x4 = np.ones([1, 1, 4, 4], np.float32)

# ---- class 1: unbounded work from tiny files ----
# pooling / conv variants not in make_probe: ConvTranspose, DeformConv, GlobalLpPool-like,
# AveragePool with dilations, 1-D and 3-D windows, huge output from a huge stride-1 window
gen_case("r1_convtranspose_kernel", 1, [1, 1, 1000, 1000],
         [helper.make_node("ConvTranspose", ["x", "w"], ["y"])], y,
         [init("w", np.zeros([1, 1, 1, 1], np.float32))], expect="ok")
gen_case("r1_convtranspose_big_w", 1, [1, 1, 2000, 2000],
         [helper.make_node("ConvTranspose", ["x", "w"], ["y"])], y,
         [init("w_shape2", np.array([1], np.int64))] , expect="err")
gen_case("r1_avgpool_dilated_1d", 1, [1, 1, 10000000],
         [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[5000000], dilations=[1],
                           pads=[4999999, 4999999])], y)
gen_case("r1_maxpool_3d", 1, [1, 1, 200, 200, 200],
         [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[200, 200, 200],
                           pads=[199] * 6)], y)
gen_case("r1_lppool_1d_p7", 1, [1, 1, 5000000],
         [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[5000000], p=7,
                           pads=[4999999, 4999999])], y)
gen_case("r1_conv_1d_huge_kernel", 1, [1, 1, 3000000],
         [helper.make_node("Conv", ["x", "w"], ["y"], pads=[2999999, 2999999])], y,
         [init("w", np.ones([1, 1, 3000], np.float32))], args="-O0")
gen_case("r1_deformconv_big", 1, [1, 1, 400, 400],
         [helper.make_node("DeformConv", ["x", "w", "off"], ["y"], pads=[99] * 4)], y,
         [init("w", np.ones([1, 1, 100, 100], np.float32)),
          init("off", np.zeros([1, 20000, 400, 400], np.float32)[:, :, :1, :1])], )
gen_case("r1_qlinearavgpool_big", 1, [1, 1, 3000, 3000],
         [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
          helper.make_node("QLinearAveragePool", ["q", "s", "z", "s", "z"], ["y"], domain="com.microsoft",
                           kernel_shape=[3000, 3000], pads=[2999] * 4)],
         [vi("y", None, U8)], [init("s", np.array(1, np.float32)), init("z", np.array(0, np.uint8))],
         domains=["com.microsoft"])
# Resize / Upsample with huge scales; Resize with an enormous down-scale on a long axis
for mode in ("nearest", "linear", "cubic"):
    gen_case(f"r1_resize_scale_1e6_{mode}", 1, [1, 1, 4, 4],
             [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode=mode)], y,
             [init("sc", np.array([1, 1, 1e6, 1e6], np.float32))])
gen_case("r1_resize_sizes_huge", 1, [1, 1, 4, 4],
         [helper.make_node("Resize", ["x", "", "", "sz"], ["y"])], y,
         [init("sz", np.array([1, 1, 1 << 31, 1 << 31], np.int64))])
gen_case("r1_upsample_opset9", 1, [1, 1, 4, 4],
         [helper.make_node("Upsample", ["x", "sc"], ["y"])], y,
         [init("sc", np.array([1, 1, 3e9, 3e9], np.float32))], opset=9)
gen_case("r1_upsample_opset7_attr", 1, [1, 1, 4, 4],
         [helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 3e9, 3e9])], y, opset=7)
gen_case("r1_resize_linear_aa_1d", 1, [1, 1, 1, 40000000],
         [helper.make_node("Resize", ["x", "", "sc"], ["y"], antialias=1, mode="linear")], y,
         [init("sc", np.array([1, 1, 1, 1e-7], np.float32))])
# huge outputs from tiny files
gen_case("r1_tile_huge", 1, [4, 4], [helper.make_node("Tile", ["x", "r"], ["y"])], y,
         [init("r", np.array([1 << 20, 1 << 20], np.int64))])
gen_case("r1_expand_huge", 1, [1], [helper.make_node("Expand", ["x", "s"], ["y"])], y,
         [init("s", np.array([1 << 20, 1 << 20], np.int64))])
gen_case("r1_cos_1e12", 1, [1 << 20, 1 << 20], [helper.make_node("Relu", ["x"], ["y"])], y)
one("r1_onehot_depth_1e10", 1, helper.make_node("OneHot", ["i", "d", "v"], ["y"]), [], y,
    [init("i", np.array([0, 1], np.int64)), init("d", np.array(10**10, np.int64)),
     init("v", np.array([0, 1], np.float32))])
gen_case("r1_eyelike_huge", 1, [1 << 20, 1 << 20], [helper.make_node("EyeLike", ["x"], ["y"])], y)
one("r1_range_huge_f", 1, helper.make_node("Range", ["a", "b", "c"], ["y"]), [], y,
    [init("a", np.array(0, np.float32)), init("b", np.array(3e38, np.float32)),
     init("c", np.array(1e-30, np.float32))])
one("r1_range_huge_i", 1, helper.make_node("Range", ["a", "b", "c"], ["y"]), [], [vi("y", None, I64)],
    [init("a", np.array(0, np.int64)), init("b", np.array(10**15, np.int64)),
     init("c", np.array(1, np.int64))])
# selection ops over big generated tensors
gen_case("r1_topk_k_huge", 1, [1000], [helper.make_node("TopK", ["x", "k"], ["y", "i"])],
         [vi("y", None), vi("i", None, I64)], [init("k", np.array([IMAX], np.int64))])
gen_case("r1_topk_rows_empty_huge", 1, [1 << 40, 0],
         [helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=0)],
         [vi("y", None), vi("i", None, I64)], [init("k", np.array([1 << 40], np.int64))], expect="any")
gen_case("r1_unique_axis_empty_huge", 1, [1 << 40, 0],
         [helper.make_node("Unique", ["x"], ["y"], axis=0)], y)
gen_case("r1_cumprod_rev", 1, [1 << 14, 1 << 14],
         [helper.make_node("CumProd", ["x", "ax"], ["y"], reverse=1, exclusive=1)], y,
         [init("ax", np.array(0, np.int64))], args="--max-tensor-bytes 100000")
gen_case("r1_nms_max_out_huge", 1, [1, 30000, 4],
         [helper.make_node("NonMaxSuppression", ["x", "sc", "mo", "iou"], ["y"])],
         [vi("y", None, I64)], [init("sc", np.ones([1, 1000, 30000], np.float32)[:, :1]),
                                init("mo", np.array([IMAX], np.int64)),
                                init("iou", np.array([1.0], np.float32))])
gen_case("r1_gathernd_big_batch", 1, [1 << 20, 1 << 10],
         [helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)], y,
         [init("i", np.zeros([1 << 20, 1 << 10, 1], np.int64)[:1, :1])])
gen_case("r1_scatternd_many", 1, [4],
         [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="mul")], y,
         [init("i", np.zeros([200000, 1], np.int64)), init("u", np.ones([200000], np.float32))],
         expect="ok")
gen_case("r1_hardmax_row_huge", 1, [1, 1 << 30], [helper.make_node("Hardmax", ["x"], ["y"])], y,
         args="--max-tensor-bytes 1000000")
gen_case("r1_lrn_size_huge", 1, [1, 100000, 1, 1],
         [helper.make_node("LRN", ["x"], ["y"], size=199999)], y)
gen_case("r1_reverse_sequence_long", 1, [1 << 14, 1 << 14],
         [helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=1, time_axis=0)], y,
         [init("l", np.full([1 << 14], 1 << 14, np.int64))])
# RNNs: the fast LSTM/GRU kernel (isa/run_rnn.c), huge hidden / seq / batch
for op, g in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
    H = 1 << 31
    one(f"r1_{op.lower()}_hidden_2p31", 1,
        helper.make_node(op, ["x", "w", "r"], ["", "yh"], hidden_size=H), [vi("x", [1, 1, 1])],
        [vi("yh", None)], [init("w", np.zeros([1, g, 1], np.float32)), init("r", np.zeros([1, g, 1], np.float32))],
        inputs={"x": np.ones([1, 1, 1], np.float32)})
    # a consistent W/R made at run time: H = 2^16, R is [1, g*H, H] = 2^32+ elements
    inits, nodes = gen([1, g << 16, 1], "w", 0.0)
    i2, n2 = gen([1, g << 16, 1 << 16], "r", 0.0)
    nodes += n2 + [helper.make_node(op, ["x", "w", "r"], ["", "yh"], hidden_size=1 << 16)]
    case(f"r1_{op.lower()}_hidden_2p16", 1, model(nodes, [vi("x", [1, 1, 1])], [vi("yh", None)], inits + i2),
         inputs={"x": np.ones([1, 1, 1], np.float32)})
    # sequence of 2^40 steps, batch 0: no data at all
    inits, nodes = gen([1 << 40, 0, 4], "x")
    nodes.append(helper.make_node(op, ["x", "w", "r"], ["", "yh"], hidden_size=8))
    case(f"r1_{op.lower()}_seq_2p40_batch0", 1,
         model(nodes, [], [vi("yh", None)], inits + [init("w", np.zeros([1, g * 8, 4], np.float32)),
                                                      init("r", np.zeros([1, g * 8, 8], np.float32))]),
         expect="any")
    # sequence_lens out of range, from a run-time input
    for nm, lens in (("big", [2**31 - 1]), ("neg", [-5]), ("past_seq", [7])):
        ins = ["x", "w", "r", "", "sl"]
        one(f"r1_{op.lower()}_seqlens_{nm}", 8,
            helper.make_node(op, ins, ["yy", "yh"], hidden_size=8),
            [vi("x", [3, 1, 4]), vi("sl", [1], I32)], [vi("yy", None), vi("yh", None)],
            [init("w", np.zeros([1, g * 8, 4], np.float32)), init("r", np.zeros([1, g * 8, 8], np.float32))],
            expect="any", inputs={"x": np.ones([3, 1, 4], np.float32), "sl": np.array(lens, np.int32)})
    # empty batch through the fast kernel with run-time input, bidirectional
    one(f"r1_{op.lower()}_empty_batch_bidir", 8,
        helper.make_node(op, ["x", "w", "r"], ["yy", "yh"], hidden_size=8, direction="bidirectional"),
        [vi("x", ["s", "b", 4])], [vi("yy", None), vi("yh", None)],
        [init("w", np.zeros([2, g * 8, 4], np.float32)), init("r", np.zeros([2, g * 8, 8], np.float32))],
        expect="any", inputs={"x": np.ones([3, 0, 4], np.float32)})
    one(f"r1_{op.lower()}_empty_seq", 8,
        helper.make_node(op, ["x", "w", "r"], ["yy", "yh"], hidden_size=8),
        [vi("x", ["s", "b", 4])], [vi("yy", None), vi("yh", None)],
        [init("w", np.zeros([1, g * 8, 4], np.float32)), init("r", np.zeros([1, g * 8, 8], np.float32))],
        expect="any", inputs={"x": np.ones([0, 2, 4], np.float32)})
    one(f"r1_{op.lower()}_empty_input_size", 8,
        helper.make_node(op, ["x", "w", "r"], ["yy", "yh"], hidden_size=8),
        [vi("x", ["s", "b", "i"])], [vi("yy", None), vi("yh", None)],
        [init("w", np.zeros([1, g * 8, 0], np.float32)), init("r", np.zeros([1, g * 8, 8], np.float32))],
        expect="any", inputs={"x": np.ones([3, 2, 0], np.float32)})
    one(f"r1_{op.lower()}_batch_empty_huge", 2,
        helper.make_node(op, ["x", "w", "r"], ["yy", "yh"], hidden_size=8),
        [vi("x", ["s", "b", 4])], [vi("yy", None), vi("yh", None)],
        [init("w", np.zeros([1, g * 8, 4], np.float32)), init("r", np.zeros([1, g * 8, 8], np.float32))],
        expect="any", inputs={"x": ("hdr", [0, BIG, 4])})
# control flow: huge trip counts with trivial bodies
body = helper.make_graph([helper.make_node("Identity", ["c"], ["co"]),
                          helper.make_node("Add", ["v", "one"], ["vo"])], "body",
                         [vi("i", [], I64), vi("c", [], TP.BOOL), vi("v", [1])],
                         [vi("co", [], TP.BOOL), vi("vo", [1])], [init("one", np.ones([1], np.float32))])
one("r1_loop_trip_2p62", 1, helper.make_node("Loop", ["n", "", "v0"], ["y"], body=body), [], y,
    [init("n", np.array(BIG, np.int64)), init("v0", np.zeros([1], np.float32))])
one("r1_loop_trip_2p62_run", 1, helper.make_node("Loop", ["n", "", "v0"], ["y"], body=body),
    [vi("n", [], I64)], y, [init("v0", np.zeros([1], np.float32))],
    inputs={"n": np.array(BIG, np.int64)})
body_scan = helper.make_graph([helper.make_node("Add", ["s", "e"], ["so"]),
                               helper.make_node("Identity", ["so"], ["out"])], "sb",
                              [vi("s", [1]), vi("e", [1])], [vi("so", [1]), vi("out", [1])])
gen_case("r1_scan_len_huge", 1, [1 << 31, 1],
         [helper.make_node("Scan", ["s0", "x"], ["sf", "ys"], body=body_scan, num_scan_inputs=1)],
         [vi("sf", None), vi("ys", None)], [init("s0", np.zeros([1], np.float32))])
gen_case("r1_scan_empty_huge", 2, [0, BIG],
         [helper.make_node("Scan", ["s0", "x"], ["sf", "ys"], body=body_scan, num_scan_inputs=1,
                           scan_input_axes=[1])],
         [vi("sf", None), vi("ys", None)], [init("s0", np.zeros([1], np.float32))], expect="any")
# DFT / STFT of odd sizes
for L in (1000003, 99991, 1):
    gen_case(f"r1_dft_len_{L}", 1, [1, L, 1],
             [helper.make_node("DFT", ["x", "", "ax"], ["y"], inverse=1)], y,
             [init("ax", np.array(1, np.int64))], expect="any")
gen_case("r1_dft_dft_length_huge", 1, [1, 8, 1],
         [helper.make_node("DFT", ["x", "dl", "ax"], ["y"])], y,
         [init("dl", np.array(1 << 40, np.int64)), init("ax", np.array(1, np.int64))])
gen_case("r1_stft_frame_step1_len", 1, [1, 200000, 1],
         [helper.make_node("STFT", ["x", "st", "", "fl"], ["y"])], y,
         [init("st", np.array(1, np.int64)), init("fl", np.array(100000, np.int64))])
gen_case("r1_stft_window_huge_step", 1, [1, 16, 1],
         [helper.make_node("STFT", ["x", "st", "", "fl"], ["y"])], y,
         [init("st", np.array(IMAX, np.int64)), init("fl", np.array(8, np.int64))], expect="any")
one("r1_blackman_huge", 1, helper.make_node("BlackmanWindow", ["n"], ["y"]), [], y,
    [init("n", np.array(1 << 40, np.int64))])
gen_case("r1_affinegrid_huge", 1, [1, 2, 3],
         [helper.make_node("AffineGrid", ["x", "sz"], ["y"])], y,
         [init("sz", np.array([1, 1, 1 << 20, 1 << 20], np.int64))])
gen_case("r1_roialign_out_huge", 1, [1, 1, 4, 4],
         [helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=1 << 20,
                           output_width=1 << 20)], y,
         [init("r", np.array([[0, 0, 3, 3]], np.float32)), init("b", np.array([0], np.int64))])
gen_case("r1_maxunpool_outshape_huge", 1, [1, 1, 2, 2],
         [helper.make_node("MaxUnpool", ["x", "i", "os"], ["y"], kernel_shape=[2, 2])], y,
         [init("i", np.zeros([1, 1, 2, 2], np.int64)), init("os", np.array([1, 1, 1 << 20, 1 << 20], np.int64))])
gen_case("r1_einsum_trace_huge", 1, [1 << 16, 1 << 16],
         [helper.make_node("Einsum", ["x"], ["y"], equation="ij->")], y, args="-O0", expect="any")
gen_case("r1_matmul_k_empty_huge", 2, [2, 0],
         [helper.make_node("MatMul", ["x", "x2"], ["y"])], y,
         [init("x2", np.zeros([0, 4], np.float32))], expect="ok")
gen_case("r1_split_to_sequence_many", 1, [1 << 24],
         [helper.make_node("SplitToSequence", ["x"], ["s"], keepdims=0),
          helper.make_node("SequenceLength", ["s"], ["y"])], [vi("y", None, I64)], expect="any")
gen_case("r1_sum_two_huge", 1, [1 << 16, 1 << 16],
         [helper.make_node("Sum", ["x", "x"], ["y"])], y)
gen_case("r1_det_batch_empty_huge", 1, [1 << 40, 0, 0],
         [helper.make_node("Det", ["x"], ["y"])], y, expect="any")
gen_case("r1_col2im_empty_huge", 1, [1 << 40, 0, 1],
         [helper.make_node("Col2Im", ["x", "is", "bs"], ["y"])], y,
         [init("is", np.array([1, 1], np.int64)), init("bs", np.array([1, 1], np.int64))], expect="any")
gen_case("r1_meanvar_empty_huge_rows", 1, [1 << 40, 0, 1, 1],
         [helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[1, 2, 3])], y, expect="any")
gen_case("r1_rmsnorm_empty_huge_rows", 1, [1 << 40, 0],
         [helper.make_node("RMSNormalization", ["x", "sc"], ["y"], axis=1)], y,
         [init("sc", np.zeros([0], np.float32))], expect="any", opset=23)
gen_case("r1_instnorm_empty_huge", 1, [1 << 40, 1, 0],
         [helper.make_node("InstanceNormalization", ["x", "sc", "b"], ["y"])], y,
         [init("sc", np.ones([1], np.float32)), init("b", np.zeros([1], np.float32))], expect="any")
gen_case("r1_softmax_empty_huge_rows", 1, [1 << 40, 0],
         [helper.make_node("LogSoftmax", ["x"], ["y"], axis=1)], y, expect="any")
gen_case("r1_argmax_empty_huge_rows", 1, [1 << 40, 0, 5],
         [helper.make_node("ArgMax", ["x"], ["y"], axis=2)], [vi("y", None, I64)], expect="any")
gen_case("r1_nonzero_empty_huge", 1, [1 << 40, 0],
         [helper.make_node("NonZero", ["x"], ["y"])], [vi("y", None, I64)], expect="any")
gen_case("r1_gelu_empty_huge", 1, [1 << 40, 0],
         [helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], y, expect="any")
gen_case("r1_lpnorm_empty_huge", 1, [1 << 40, 0, 3],
         [helper.make_node("LpNormalization", ["x"], ["y"], axis=2)], y, expect="any")
gen_case("r1_where_bcast_empty_huge", 1, [1 << 40, 0],
         [helper.make_node("Where", ["c", "x", "x"], ["y"])], y,
         [init("c", np.ones([1, 1], bool))], expect="any")

# ---- class 2: overflow on empty-but-huge tensors, from a ~128-byte .npy ----
EH = ("hdr", [0, BIG, 4])
EH3 = ("hdr", [BIG, 0, 4])
for nm, node, ins, outs, inits in (
        ("transpose", helper.make_node("Transpose", ["x"], ["y"], perm=[2, 0, 1]), [vi("x", None)], y, []),
        ("reducemax_mid", helper.make_node("ReduceMax", ["x", "ax"], ["y"]), [vi("x", None)], y,
         [init("ax", np.array([1], np.int64))]),
        ("reducel2", helper.make_node("ReduceL2", ["x"], ["y"], keepdims=0), [vi("x", None)], y, []),
        ("reducelogsumexp", helper.make_node("ReduceLogSumExp", ["x", "ax"], ["y"]), [vi("x", None)], y,
         [init("ax", np.array([2], np.int64))]),
        ("argmin", helper.make_node("ArgMin", ["x"], ["y"], axis=1, select_last_index=1), [vi("x", None)],
         [vi("y", None, I64)], []),
        ("cumprod", helper.make_node("CumProd", ["x", "ax"], ["y"]), [vi("x", None)], y,
         [init("ax", np.array(2, np.int64))]),
        ("softmax_ax1", helper.make_node("Softmax", ["x"], ["y"], axis=1), [vi("x", None)], y, []),
        ("hardmax", helper.make_node("Hardmax", ["x"], ["y"], axis=1), [vi("x", None)], y, []),
        ("gather_elems", helper.make_node("GatherElements", ["x", "x2"], ["y"], axis=1), [vi("x", None)], y,
         []),
        ("scatter_elems", helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=2),
         [vi("x", None)], y, []),
        ("gathernd", helper.make_node("GatherND", ["x", "i"], ["y"]), [vi("x", None)], y,
         [init("i", np.zeros([0, 2], np.int64))]),
        ("scatternd", helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add"),
         [vi("x", None)], y, []),
        ("einsum_perm", helper.make_node("Einsum", ["x"], ["y"], equation="abc->cba"), [vi("x", None)], y, []),
        ("einsum_bmm", helper.make_node("Einsum", ["x", "x"], ["y"], equation="abc,abd->acd"),
         [vi("x", None)], y, []),
        ("matmul_bcast", helper.make_node("MatMul", ["x", "w"], ["y"]), [vi("x", None)], y,
         [init("w", np.ones([4, 3], np.float32))]),
        ("gemm_like_matmul_t", helper.make_node("MatMul", ["w2", "x"], ["y"]), [vi("x", None)], y,
         [init("w2", np.ones([3, BIG // BIG], np.float32))]),
        ("pad_reflect", helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect"), [vi("x", None)], y,
         [init("p", np.array([0, 0, 1, 0, 0, 1], np.int64))]),
        ("pad_edge", helper.make_node("Pad", ["x", "p"], ["y"], mode="edge"), [vi("x", None)], y,
         [init("p", np.array([0, 0, 1, 0, 0, 1], np.int64))]),
        ("slice_neg_step", helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"]), [vi("x", None)], y,
         [init("s", np.array([-1], np.int64)), init("e", np.array([IMIN], np.int64)),
          init("a", np.array([1], np.int64)), init("t", np.array([-3], np.int64))]),
        ("concat_ax2", helper.make_node("Concat", ["x", "x"], ["y"], axis=2), [vi("x", None)], y, []),
        ("split_ax1", helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2), [vi("x", None)],
         [vi("a", None), vi("b", None)], []),
        ("tile", helper.make_node("Tile", ["x", "r"], ["y"]), [vi("x", None)], y,
         [init("r", np.array([1, 1, 3], np.int64))]),
        ("expand", helper.make_node("Expand", ["x", "s"], ["y"]), [vi("x", None)], y,
         [init("s", np.array([2, 1, 1, 1], np.int64))]),
        ("reverse_seq", helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=0, time_axis=1),
         [vi("x", None)], y, [init("l", np.zeros([0], np.int64))]),
        ("compress", helper.make_node("Compress", ["x", "c"], ["y"], axis=2), [vi("x", None)], y,
         [init("c", np.array([1, 0, 1, 1], bool))]),
        ("depthtospace", helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD"),
         [vi("x", None)], y, []),
        ("trilu", helper.make_node("Trilu", ["x"], ["y"], upper=0), [vi("x", None)], y, []),
        ("quantize_axis1", helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1),
         [vi("x", None)], [vi("y", None, U8)], []),
        ("quantize_block", helper.make_node("QuantizeLinear", ["x", "s2", "z2"], ["y"], axis=2, block_size=2),
         [vi("x", None)], [vi("y", None, U8)], []),
        ("dequantize_axis_neg", helper.make_node("DequantizeLinear", ["x8", "s3"], ["y"], axis=-1),
         [vi("x8", None, U8)], y, [init("s3", np.ones([4], np.float32))]),
        ("layernorm_ax1", helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=1),
         [vi("x", None)], y, []),
        ("groupnorm", helper.make_node("GroupNormalization", ["x", "g", "b"], ["y"], num_groups=1),
         [vi("x", None)], y, [init("g", np.ones([BIG // BIG], np.float32))]),
        ("resize_nearest", helper.make_node("Resize", ["x", "", "sc"], ["y"]), [vi("x", None)], y,
         [init("sc", np.array([1, 1, 2], np.float32))]),
        ("size", helper.make_node("Size", ["x"], ["y"]), [vi("x", None)], [vi("y", None, I64)], []),
        ("dft", helper.make_node("DFT", ["x", "", "ax"], ["y"]), [vi("x", None)], y,
         [init("ax", np.array(1, np.int64))]),
        ("bitcast", helper.make_node("BitCast", ["x"], ["y"], to=TP.INT32, domain="com.microsoft"),
         [vi("x", None)], [vi("y", None, I32)], []),
):
    shape_inputs = {}
    # inputs the cases need beside x, made to fit an empty-huge x
    extra = []
    if nm == "gather_elems":
        node.input[1] = "x2i"
        extra.append(init("x2i", np.zeros([0, 1, 4], np.int64)))
    if nm == "scatter_elems":
        extra += [init("i", np.zeros([0, 1, 1], np.int64)), init("u", np.zeros([0, 1, 1], np.float32))]
    if nm == "scatternd":
        extra += [init("i", np.zeros([0, 3], np.int64)), init("u", np.zeros([0], np.float32))]
    if nm == "quantize_axis1":
        extra += [init("s", np.ones([1], np.float32)), init("z", np.zeros([1], np.uint8))]
    if nm == "quantize_block":
        extra += [init("s2", np.ones([0, 1, 2], np.float32)), init("z2", np.zeros([0, 1, 2], np.uint8))]
    if nm == "layernorm_ax1":
        extra += [init("g", np.ones([1, 4], np.float32))]
    for src, tag in ((EH, "a"), (EH3, "b")):
        if nm == "dequantize_axis_neg":
            inp = {"x8": (src[0], src[1], "|u1")}
        else:
            inp = {"x": src}
        m = model([node], ins, outs, inits + extra, domains=["com.microsoft"] if nm == "bitcast" else ())
        case(f"r2_{nm}_{tag}", 2, m, expect="any", inputs=inp)

# attribute arithmetic: products and sums that overflow int64 in inference
one("r2_conv_group_huge", 2, helper.make_node("Conv", ["x", "w"], ["y"], group=BIG), [vi("x", [1, 4, 4, 4])], y,
    [init("w", np.ones([4, 1, 1, 1], np.float32))])
one("r2_conv_stride_dil_prod", 2, helper.make_node("Conv", ["x", "w"], ["y"], strides=[BIG, 1],
    dilations=[BIG, 1], pads=[BIG, 0, BIG, 0]), [vi("x", [1, 1, 4, 4])], y,
    [init("w", np.ones([1, 1, 2, 1], np.float32))])
one("r2_convtranspose_dil_outpad", 2, helper.make_node("ConvTranspose", ["x", "w"], ["y"], dilations=[BIG, 1],
    output_padding=[1, 0], strides=[2, 1]), [vi("x", [1, 1, 4, 4])], y,
    [init("w", np.ones([1, 1, 3, 3], np.float32))])
one("r2_convtranspose_group_huge", 2, helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=BIG),
    [vi("x", [1, 4, 4, 4])], y, [init("w", np.ones([4, BIG // BIG, 1, 1], np.float32))])
one("r2_avgpool_ceil_stride_max", 2, helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2],
    strides=[IMAX, IMAX], ceil_mode=1, pads=[1, 1, 1, 1]), [vi("x", [1, 1, 4, 4])], y, expect="any",
    inputs={"x": x4})
one("r2_lppool_ceil_pads_max", 2, helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2],
    pads=[0, 0, IMAX, 0], ceil_mode=1), [vi("x", [1, 1, 4, 4])], y)
one("r2_maxpool_dil_kernel_prod", 2, helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1 << 32, 1],
    dilations=[1 << 32, 1]), [vi("x", [1, 1, 4, 4])], y)
one("r2_col2im_dil_huge", 2, helper.make_node("Col2Im", ["x", "is", "bs"], ["y"], dilations=[BIG, 1]),
    [vi("x", [1, 4, 4])], y, [init("is", np.array([4, 4], np.int64)), init("bs", np.array([2, 2], np.int64))])
one("r2_spacetodepth_bs_sq", 2, helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=1 << 32),
    [vi("x", [1, 4, 1 << 32, 1 << 32])], y)
one("r2_lrn_size_max", 2, helper.make_node("LRN", ["x"], ["y"], size=IMAX), [vi("x", [1, 4, 2, 2])], y,
    expect="any", inputs={"x": np.ones([1, 4, 2, 2], np.float32)})
one("r2_gathernd_batch_dims_max", 2, helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=IMAX),
    [vi("x", [2, 2])], y, [init("i", np.zeros([2, 1], np.int64))])
one("r2_onehot_axis_min", 2, helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=IMIN), [], y,
    [init("i", np.array([0], np.int64)), init("d", np.array(2, np.int64)), init("v", np.array([0, 1], np.float32))])
one("r2_cumsum_axis_max", 2, helper.make_node("CumSum", ["x", "a"], ["y"]), [vi("x", [2, 2])], y,
    [init("a", np.array(IMIN, np.int64))])
one("r2_quantize_axis_min", 2, helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=IMIN),
    [vi("x", [2, 2])], [vi("y", None, U8)], [init("s", np.ones([2], np.float32)), init("z", np.zeros([2], np.uint8))])
one("r2_quantize_block_max", 2, helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1,
    block_size=IMAX), [vi("x", [2, 4])], [vi("y", None, U8)],
    [init("s", np.ones([2, 1], np.float32)), init("z", np.zeros([2, 1], np.uint8))], expect="any",
    inputs={"x": np.ones([2, 4], np.float32)})
one("r2_dequantize_block_neg", 2, helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=0,
    block_size=-2), [vi("x", [4, 2], U8)], y, [init("s", np.ones([2, 2], np.float32))],
    inputs={"x": np.ones([4, 2], np.uint8)})
one("r2_dequantize_axis_rank0", 2, helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=3),
    [vi("x", [], U8)], y, [init("s", np.ones([3], np.float32)), init("z", np.zeros([3], np.uint8))],
    inputs={"x": np.array(3, np.uint8)})
one("r2_mha_heads_max", 2, helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=IMAX,
    domain="com.microsoft"), [vi("q", [1, 2, 8]), vi("k", [1, 2, 8]), vi("v", [1, 2, 8])], y,
    domains=["com.microsoft"])
one("r2_attention_kv_heads_min", 2, helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=2,
    kv_num_heads=IMIN), [vi("q", [1, 2, 8]), vi("k", [1, 2, 8]), vi("v", [1, 2, 8])], y, opset=23)
one("r2_rotary_rot_dim_max", 2, helper.make_node("RotaryEmbedding", ["x", "c", "s"], ["y"],
    rotary_embedding_dim=IMAX, num_heads=1), [vi("x", [1, 2, 8]), vi("c", [2, 4]), vi("s", [2, 4])], y,
    opset=23)
one("r2_stft_onesided_len_max", 2, helper.make_node("STFT", ["x", "st", "", "fl"], ["y"]), [vi("x", [1, 16, 1])],
    y, [init("st", np.array(1, np.int64)), init("fl", np.array(IMAX, np.int64))])
one("r2_einsum_ellipsis_rank", 2, helper.make_node("Einsum", ["x", "x"], ["y"], equation="...a,...a->..."),
    [vi("x", [BIG, BIG, 0])], y, expect="any", inputs={"x": ("hdr", [BIG, BIG, 0])})
one("r2_topk_k_neg_run", 2, helper.make_node("TopK", ["x", "k"], ["v", "i"]), [vi("x", [4]), vi("k", [1], I64)],
    [vi("v", None), vi("i", None, I64)], inputs={"x": np.ones([4], np.float32), "k": np.array([IMIN])})

# ---- class 3/8: crash-prone empty spatial dims (RoiAlign's kind, other ops) ----
for nm, node, xs, inits in (
        ("resize_linear_from_empty_h", helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="linear"),
         [1, 1, 0, 4], [init("sz", np.array([1, 1, 3, 3], np.int64))]),
        ("resize_cubic_from_empty_w", helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="cubic"),
         [1, 1, 4, 0], [init("sz", np.array([1, 1, 3, 3], np.int64))]),
        ("resize_nearest_from_empty", helper.make_node("Resize", ["x", "", "", "sz"], ["y"]),
         [1, 1, 0, 0], [init("sz", np.array([1, 1, 3, 3], np.int64))]),
        ("gridsample_empty_h", helper.make_node("GridSample", ["x", "g"], ["y"], padding_mode="border"),
         [1, 1, 0, 4], [init("g", np.zeros([1, 2, 2, 2], np.float32))]),
        ("gridsample_empty_w_reflect", helper.make_node("GridSample", ["x", "g"], ["y"], padding_mode="reflection",
                                                        mode="cubic"),
         [1, 1, 4, 0], [init("g", np.full([1, 2, 2, 2], 0.7, np.float32))]),
        ("pad_reflect_empty", helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect"), [1, 0],
         [init("p", np.array([0, 2, 0, 2], np.int64))]),
        ("pad_edge_empty", helper.make_node("Pad", ["x", "p"], ["y"], mode="edge"), [1, 0],
         [init("p", np.array([0, 2, 0, 2], np.int64))]),
        ("pad_wrap_empty", helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap"), [1, 0],
         [init("p", np.array([0, 2, 0, 2], np.int64))]),
        ("centercroppad_empty", helper.make_node("CenterCropPad", ["x", "s"], ["y"]), [0, 4],
         [init("s", np.array([3, 3], np.int64))]),
        ("maxunpool_empty", helper.make_node("MaxUnpool", ["x", "i", "os"], ["y"], kernel_shape=[2, 2]),
         [1, 1, 0, 2], [init("i", np.zeros([1, 1, 0, 2], np.int64)),
                        init("os", np.array([1, 1, 4, 4], np.int64))]),
        ("deformconv_empty_h", helper.make_node("DeformConv", ["x", "w", "off"], ["y"], pads=[1, 1, 1, 1]),
         [1, 1, 0, 4], [init("w", np.ones([1, 1, 3, 3], np.float32)),
                        init("off", np.ones([1, 18, 0, 4], np.float32))]),
        ("roialign_max_empty_w", helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], mode="max"),
         [1, 1, 4, 0], [init("r", np.array([[0, 0, 3, 3]], np.float32)), init("b", np.array([0], np.int64))]),
        ("avgpool_empty_pad", helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 1, 1],
                                               count_include_pad=0), [1, 1, 0, 0], []),
        ("maxpool_empty_pad_idx", helper.make_node("MaxPool", ["x"], ["y", "yi"], kernel_shape=[2, 2],
                                                   pads=[1, 1, 1, 1]), [1, 1, 0, 0], []),
        ("lppool_empty_pad", helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
         [1, 1, 0, 0], []),
        ("conv_empty_in_pads", helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), [1, 1, 0, 0],
         [init("w", np.ones([1, 1, 2, 2], np.float32))]),
        ("convtranspose_empty_in", helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_shape=[4, 4]),
         [1, 1, 0, 0], [init("w", np.ones([1, 1, 2, 2], np.float32))]),
        ("col2im_empty_blocks", helper.make_node("Col2Im", ["x", "is", "bs"], ["y"], pads=[1, 1, 1, 1]),
         [1, 4, 0], [init("is", np.array([1, 1], np.int64)), init("bs", np.array([2, 2], np.int64))]),
        ("nms_zero_boxes", helper.make_node("NonMaxSuppression", ["x", "sc", "mo"], ["y"], center_point_box=1),
         [1, 0, 4], [init("sc", np.zeros([1, 3, 0], np.float32)), init("mo", np.array([5], np.int64))]),
        ("affinegrid_zero", helper.make_node("AffineGrid", ["x", "sz"], ["y"], align_corners=1),
         [1, 2, 3], [init("sz", np.array([1, 1, 0, 1], np.int64))]),
        ("stft_signal_shorter", helper.make_node("STFT", ["x", "st", "", "fl"], ["y"]), [1, 4, 1],
         [init("st", np.array(1, np.int64)), init("fl", np.array(8, np.int64))]),
        ("dft_zero_len_signal", helper.make_node("DFT", ["x", "dl", "ax"], ["y"]), [1, 0, 1],
         [init("dl", np.array(4, np.int64)), init("ax", np.array(1, np.int64))]),
        ("lrn_empty_channels", helper.make_node("LRN", ["x"], ["y"], size=3), [1, 0, 2, 2], []),
        ("instancenorm_empty_hw", helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"]), [1, 1, 0],
         [init("s", np.ones([1], np.float32)), init("b", np.zeros([1], np.float32))]),
        ("groupnorm_empty_hw", helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=1),
         [1, 2, 0], [init("s", np.ones([2], np.float32)), init("b", np.zeros([2], np.float32))]),
        ("topk_empty_k1", helper.make_node("TopK", ["x", "k"], ["v", "i"]), [2, 0],
         [init("k", np.array([1], np.int64))]),
        ("cumsum_exclusive_empty", helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=1, reverse=1), [0, 3],
         [init("a", np.array(0, np.int64))]),
        ("unique_empty_axis", helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], axis=1), [2, 0],
         []),
        ("det_empty", helper.make_node("Det", ["x"], ["y"]), [0, 0], []),
        ("gathernd_empty_data", helper.make_node("GatherND", ["x", "i"], ["y"]), [0, 3],
         [init("i", np.zeros([2, 1], np.int64))]),
        ("einsum_diag_empty", helper.make_node("Einsum", ["x"], ["y"], equation="ii->i"), [0, 0], []),
        ("mean_var_empty", helper.make_node("MeanVarianceNormalization", ["x"], ["y"]), [1, 1, 0, 0], []),
):
    outs = [vi(o, None, I64 if o in ("i", "yi", "inv", "c") or nm.startswith("nms") else F) for o in node.output]
    m = model([node], [vi("x", None)], outs, inits)
    case(f"r8_{nm}", 8, m, expect="any", inputs={"x": np.zeros(xs, np.float32)})

# ---- class 4: limits, from ops that make big outputs (limit 1 MB) ----
lim = "--max-tensor-bytes 1000000"
for nm, node, inits, outs in (
        ("tile", helper.make_node("Tile", ["x", "r"], ["y"]), [init("x", np.ones([4], np.float32)),
                                                             init("r", np.array([1000000], np.int64))], y),
        ("expand", helper.make_node("Expand", ["x", "s"], ["y"]), [init("x", np.ones([1], np.float32)),
                                                                 init("s", np.array([1000, 1000], np.int64))], y),
        ("resize", helper.make_node("Resize", ["x", "", "sc"], ["y"]), [init("x", np.ones([1, 1, 4, 4], np.float32)),
                                                                      init("sc", np.array([1, 1, 400, 400], np.float32))], y),
        ("onehot", helper.make_node("OneHot", ["i", "d", "v"], ["y"]), [init("i", np.zeros([1000], np.int64)),
                                                                      init("d", np.array(1000, np.int64)),
                                                                      init("v", np.array([0, 1], np.float32))], y),
        ("eyelike", helper.make_node("EyeLike", ["x"], ["y"]), [init("x", np.zeros([1, 1], np.float32))], y),  # (a fit output: exit 0)
        ("blackman", helper.make_node("BlackmanWindow", ["n"], ["y"]), [init("n", np.array(1000000, np.int64))], y),
        ("mel", helper.make_node("MelWeightMatrix", ["nm", "dl", "sr", "lo", "hi"], ["y"]),
         [init("nm", np.array(1000, np.int64)), init("dl", np.array(2000, np.int64)), init("sr", np.array(16000, np.int64)),
          init("lo", np.array(0, np.float32)), init("hi", np.array(8000, np.float32))], y),
        ("affinegrid", helper.make_node("AffineGrid", ["t", "sz"], ["y"]),
         [init("t", np.ones([1, 2, 3], np.float32)), init("sz", np.array([1, 1, 1000, 1000], np.int64))], y),
        ("dft_pad", helper.make_node("DFT", ["x", "dl", "ax"], ["y"]),
         [init("x", np.ones([1, 4, 1], np.float32)), init("dl", np.array(1000000, np.int64)),
          init("ax", np.array(1, np.int64))], y),
        ("concatfromseq", helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1), [], y),
        ("maxunpool", helper.make_node("MaxUnpool", ["x", "i", "os"], ["y"], kernel_shape=[2, 2]),
         [init("x", np.ones([1, 1, 1, 1], np.float32)), init("i", np.zeros([1, 1, 1, 1], np.int64)),
          init("os", np.array([1, 1, 1000, 1000], np.int64))], y),
):
    nodes = [node]
    if nm == "concatfromseq":
        nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones([300000], np.float32))),
                 helper.make_node("SequenceConstruct", ["c", "c", "c", "c"], ["s"]), node]
    for lvl in ("", "-O0"):
        case(f"r4_{nm}{lvl.replace('-', '_')}", 4, model(nodes, [], outs, inits), args=f"{lim} {lvl}".strip())
# a run-time-made big tensor under --memory-limit
gen_case("r4_memory_limit_run", 4, [1000, 1000], [helper.make_node("Relu", ["x"], ["y"])], y,
         args="--memory-limit 100000 -O0")

# ---- class 5: external data paths ----
def ext_model(location, name, offset=None, length=None, extra=None):
    t = onnx.TensorProto()
    t.name = "w"; t.data_type = F; t.dims.extend([2])
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)) + tuple(extra or ()):
        if v is not None:
            e = t.external_data.add(); e.key = k; e.value = str(v)
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [2])], [vi("y", None)], [t])
    case(name, 5, m)


os.makedirs(os.path.join(OUT, "sub"), exist_ok=True)
with open(os.path.join(OUT, "w8.bin"), "wb") as f:
    f.write(np.ones([2], np.float32).tobytes())
ext_model("sub/../../w8.bin", "r5_ext_dotdot_after_sub")
ext_model("sub//..//..//etc/passwd", "r5_ext_double_slash")
ext_model("..\\w8.bin", "r5_ext_backslash")
ext_model("sub/loop", "r5_ext_symlink_loop")
ext_model("sub/abs_link", "r5_ext_symlink_abs_in_sub")
ext_model("sub/rel_up", "r5_ext_symlink_rel_up")
ext_model("w8.bin\0/etc/passwd", "r5_ext_nul_in_name")
ext_model("fifo_in_sub", "r5_ext_fifo_link")
ext_model("/dev/stdin", "r5_ext_dev_stdin")
ext_model("w8.bin", "r5_ext_negative_offset", offset=-8)
ext_model("w8.bin", "r5_ext_length_huge", length=2**64 - 1)
ext_model("w8.bin", "r5_ext_offset_text", offset="8x")
ext_model("w8.bin", "r5_ext_checksum_key", extra=[("checksum", "x")])
ext_model("sub", "r5_ext_directory")
ext_model("A" * 5000, "r5_ext_name_5000")
ext_model("w8.bin", "r5_ext_location_twice", extra=[("location", "/etc/passwd")])
os.symlink("loop", os.path.join(OUT, "sub", "loop"))
os.symlink("/etc/hostname", os.path.join(OUT, "sub", "abs_link"))
os.symlink("../../etc/hostname", os.path.join(OUT, "sub", "rel_up"))
os.mkfifo(os.path.join(OUT, "sub", "fifo"))
os.symlink("sub/fifo", os.path.join(OUT, "fifo_in_sub"))
# output folder: a planted symlink named like the output, and a FIFO
m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", None)])
for nm, plant in (("symlink_dir", "dirlink"), ("fifo", "fifo"), ("hardlink", "hard")):
    d = os.path.join(OUT, f"r5_outdir_{nm}.dir")
    os.makedirs(d, exist_ok=True)
    if plant == "dirlink":
        os.symlink("/tmp", os.path.join(d, "y.npy"))
    elif plant == "fifo":
        os.mkfifo(os.path.join(d, "y.npy"))
    else:
        with open(os.path.join(OUT, "hard_victim"), "w") as f:
            f.write("victim\n")
        os.link(os.path.join(OUT, "hard_victim"), os.path.join(d, "y.npy"))
    case(f"r5_outdir_{nm}", 5, m, expect="any",
         args=f"--output-dir r5_outdir_{nm}.dir", inputs={"x": np.ones([2], np.float32)})
# kiln check on a folder with a FIFO as a data set file, and with a data set that is a link
cd = os.path.join(OUT, "r5_check_fifo")
os.makedirs(os.path.join(cd, "test_data_set_0"), exist_ok=True)
onnx.save(m, os.path.join(cd, "model.onnx"))
os.mkfifo(os.path.join(cd, "test_data_set_0", "input_0.pb"))
rows.append(("r5_check_fifo_input", 5, "err", "check r5_check_fifo"))
cd = os.path.join(OUT, "r5_check_model_fifo")
os.makedirs(cd, exist_ok=True)
os.mkfifo(os.path.join(cd, "model.onnx"))
rows.append(("r5_check_model_is_fifo", 5, "err", "check r5_check_model_fifo"))
rows.append(("r5_inspect_dev_zero", 5, "err", "inspect /dev/zero"))
rows.append(("r5_run_proc_self_mem", 5, "err", "run /proc/self/mem"))
rows.append(("r5_run_input_dev_urandom", 5, "err",
             "run r5_outdir_fifo.onnx --input x=/dev/urandom"))

# ---- class 6: attributes of the wrong type, ops not in the bad corpus ----
A = onnx.AttributeProto


def attr(name, **kw):
    a = A(); a.name = name
    return fill_attr(a, **kw)


def node_with(op, ins, outs, attrs, domain=""):
    n = helper.make_node(op, ins, outs, domain=domain)
    n.attribute.extend(attrs)
    return n


x234 = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10
for nm, op, attrs, ins, inits in (
        ("gemm_alpha_int", "Gemm", [attr("alpha", type=A.INT, i=2)], ["x2", "x2t"], []),
        ("gemm_transb_float", "Gemm", [attr("transB", type=A.FLOAT, f=1.0)], ["x2", "x2"], []),
        ("conv_strides_floats", "Conv", [attr("strides", type=A.FLOATS, floats=[2.0, 2.0])], ["x4", "w4"], []),
        ("conv_group_string", "Conv", [attr("group", type=A.STRING, s=b"1")], ["x4", "w4"], []),
        ("conv_autopad_int", "Conv", [attr("auto_pad", type=A.INT, i=1)], ["x4", "w4"], []),
        ("maxpool_kernel_int", "MaxPool", [attr("kernel_shape", type=A.INT, i=2)], ["x4"], []),
        ("lstm_hidden_float", "LSTM", [attr("hidden_size", type=A.FLOAT, f=8.0)], ["xs", "wl", "rl"], []),
        ("gru_activations_string", "GRU", [attr("hidden_size", type=A.INT, i=8),
                                           attr("activations", type=A.STRING, s=b"Relu")], ["xs", "wg", "rg"], []),
        ("rnn_clip_int", "RNN", [attr("hidden_size", type=A.INT, i=8), attr("clip", type=A.INT, i=3)],
         ["xs", "wr", "rr"], []),
        ("lstm_direction_ints", "LSTM", [attr("hidden_size", type=A.INT, i=8),
                                         attr("direction", type=A.INTS, ints=[1])], ["xs", "wl", "rl"], []),
        ("resize_mode_int", "Resize", [attr("mode", type=A.INT, i=1)], ["x4", "", "sc"], []),
        ("resize_cubic_a_string", "Resize", [attr("cubic_coeff_a", type=A.STRING, s=b"-0.5")], ["x4", "", "sc"], []),
        ("topk_axis_ints", "TopK", [attr("axis", type=A.INTS, ints=[0])], ["x234", "k"], []),
        ("cumsum_reverse_string", "CumSum", [attr("reverse", type=A.STRING, s=b"1")], ["x234", "ax0"], []),
        ("layernorm_eps_int", "LayerNormalization", [attr("epsilon", type=A.INT, i=1)], ["x234", "g4"], []),
        ("layernorm_axis_float", "LayerNormalization", [attr("axis", type=A.FLOAT, f=-1.0)], ["x234", "g4"], []),
        ("quantize_axis_float", "QuantizeLinear", [attr("axis", type=A.FLOAT, f=1.0)], ["x234", "s1"], []),
        ("quantize_saturate_string", "QuantizeLinear", [attr("saturate", type=A.STRING, s=b"0")], ["x234", "s1"], []),
        ("dequantize_block_float", "DequantizeLinear", [attr("block_size", type=A.FLOAT, f=2.0)], ["q234", "s1"], []),
        ("dft_inverse_float", "DFT", [attr("inverse", type=A.FLOAT, f=1.0)], ["x234", "", "ax1"], []),
        ("stft_onesided_string", "STFT", [attr("onesided", type=A.STRING, s=b"1")], ["xsig", "st1", "", "fl4"], []),
        ("depthtospace_mode_int", "DepthToSpace", [attr("blocksize", type=A.INT, i=2), attr("mode", type=A.INT, i=0)],
         ["x4c"], []),
        ("onehot_axis_string", "OneHot", [attr("axis", type=A.STRING, s=b"-1")], ["i2", "d4", "v2"], []),
        ("einsum_equation_int", "Einsum", [attr("equation", type=A.INT, i=1)], ["x234"], []),
        ("einsum_equation_strings", "Einsum", [attr("equation", type=A.STRINGS, strings=[b"abc->"])], ["x234"], []),
        ("nms_center_float", "NonMaxSuppression", [attr("center_point_box", type=A.FLOAT, f=1.0)], ["bx", "sc3"], []),
        ("roialign_mode_int", "RoiAlign", [attr("mode", type=A.INT, i=1)], ["x4", "rois", "bi"], []),
        ("gridsample_align_string", "GridSample", [attr("align_corners", type=A.STRING, s=b"1")], ["x4", "grid"], []),
        ("trilu_upper_float", "Trilu", [attr("upper", type=A.FLOAT, f=0.0)], ["x234"], []),
        ("unique_sorted_ints", "Unique", [attr("sorted", type=A.INTS, ints=[0])], ["x234"], []),
        ("hardsigmoid_alpha_string", "HardSigmoid", [attr("alpha", type=A.STRING, s=b"0.5")], ["x234"], []),
        ("celu_alpha_floats", "Celu", [attr("alpha", type=A.FLOATS, floats=[1.0])], ["x234"], []),
        ("groupnorm_groups_float", "GroupNormalization", [attr("num_groups", type=A.FLOAT, f=1.0)],
         ["x234", "g3", "g3"], []),
        ("reduce_keepdims_string", "ReduceMax", [attr("keepdims", type=A.STRING, s=b"0")], ["x234"], []),
        ("argmax_axis_tensor", "ArgMax", [attr("axis", type=A.TENSOR,
                                               t=numpy_helper.from_array(np.array(1, np.int64)))], ["x234"], []),
        ("pad_mode_bytes_bad_utf8", "Pad", [attr("mode", type=A.STRING, s=b"\xff\xfe")], ["x234", "p6"], []),
        ("scatternd_reduction_int", "ScatterND", [attr("reduction", type=A.INT, i=1)], ["x234", "ind", "upd"], []),
        ("cast_to_float", "Cast", [attr("to", type=A.FLOAT, f=1.0)], ["x234"], []),
        ("cast_to_huge", "Cast", [attr("to", type=A.INT, i=2**40)], ["x234"], []),
        ("constantofshape_value_float", "ConstantOfShape", [attr("value", type=A.FLOAT, f=1.0)], ["shp"], []),
        ("loop_body_int", "Loop", [attr("body", type=A.INT, i=0)], ["n1", "", "v0"], []),
        ("if_branch_graphs", "If", [attr("then_branch", type=A.GRAPHS), attr("else_branch", type=A.GRAPHS)],
         ["cnd"], []),
        ("scan_axes_float", "Scan", [attr("body", type=A.GRAPH, g=body_scan), attr("num_scan_inputs", type=A.FLOAT, f=1.0)],
         ["v0", "x1seq"], []),
):
    consts = {
        "x2": np.ones([2, 2], np.float32), "x2t": np.ones([2, 2], np.float32), "x4": x4,
        "w4": np.ones([1, 1, 2, 2], np.float32), "xs": np.ones([3, 1, 4], np.float32),
        "wl": np.zeros([1, 32, 4], np.float32), "rl": np.zeros([1, 32, 8], np.float32),
        "wg": np.zeros([1, 24, 4], np.float32), "rg": np.zeros([1, 24, 8], np.float32),
        "wr": np.zeros([1, 8, 4], np.float32), "rr": np.zeros([1, 8, 8], np.float32),
        "sc": np.array([1, 1, 2, 2], np.float32), "x234": x234, "k": np.array([1], np.int64),
        "ax0": np.array(0, np.int64), "ax1": np.array(1, np.int64), "g4": np.ones([4], np.float32),
        "g3": np.ones([3], np.float32), "s1": np.array(0.1, np.float32),
        "q234": np.ones([2, 3, 4], np.uint8), "xsig": np.ones([1, 16, 1], np.float32),
        "st1": np.array(1, np.int64), "fl4": np.array(4, np.int64), "x4c": np.ones([1, 4, 2, 2], np.float32),
        "i2": np.array([0, 1], np.int64), "d4": np.array(4, np.int64), "v2": np.array([0, 1], np.float32),
        "bx": np.zeros([1, 2, 4], np.float32), "sc3": np.ones([1, 1, 2], np.float32),
        "rois": np.array([[0, 0, 1, 1]], np.float32), "bi": np.array([0], np.int64),
        "grid": np.zeros([1, 2, 2, 2], np.float32), "p6": np.zeros([6], np.int64),
        "ind": np.zeros([1, 1], np.int64), "upd": np.ones([1, 3, 4], np.float32),
        "shp": np.array([2, 2], np.int64), "n1": np.array(3, np.int64), "v0": np.zeros([1], np.float32),
        "cnd": np.array(True), "x1seq": np.ones([3, 1], np.float32),
    }
    ins2 = list(ins)
    inits = [init(i, consts[i]) for i in dict.fromkeys(ins2) if i]
    nouts = {"TopK": 2, "LSTM": 0, "GRU": 0, "RNN": 0, "Unique": 1, "Scan": 2}.get(op, 1)
    if op in ("LSTM", "GRU", "RNN"):
        outs = ["", "y"]
    elif op == "Scan":
        outs = ["y", "y2"]
    else:
        outs = ["y"] + [f"y{j}" for j in range(2, nouts + 1)]
    n = node_with(op, ins2, outs, attrs)
    ot = {"QuantizeLinear": U8, "NonMaxSuppression": I64, "ArgMax": I64}.get(op, F)
    m = model([n], [], [vi(o, None, ot if j == 0 else I64 if op == "TopK" else F) for j, o in enumerate(outs) if o],
              inits)
    case(f"r6_{nm}", 6, m)

# ---- class 7/truncated files: a valid model cut at many points, npy/pb inputs cut ----
valid = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("LSTM", ["s", "wl", "rl"], ["", "h"], hidden_size=8),
               helper.make_node("Relu", ["c"], ["y"])],
              [vi("x", [1, 1, 4, 4])], [vi("y", None), vi("h", None)],
              [init("w", np.ones([1, 1, 3, 3], np.float32)), init("s", np.ones([2, 1, 4], np.float32)),
               init("wl", np.zeros([1, 32, 4], np.float32)), init("rl", np.zeros([1, 32, 8], np.float32))])
vb = valid.SerializeToString()
case("r7_valid_twin", 7, valid, expect="ok", inputs={"x": x4})
for cut in (1, 9, 33, 77, len(vb) // 3, len(vb) // 2, len(vb) - 17, len(vb) - 1):
    case(f"r7_trunc_{cut:05d}", 7, vb[:cut], inputs={"x": x4})
np.save(os.path.join(OUT, "x4.npy"), x4)
raw = open(os.path.join(OUT, "x4.npy"), "rb").read()
for cut in (5, 11, 60, 127, len(raw) - 1):
    p = f"r7_npy_cut_{cut}.npy"
    with open(os.path.join(OUT, p), "wb") as f:
        f.write(raw[:cut])
    rows.append((f"r7_npy_cut_{cut}", 7, "err", f"run r7_valid_twin.onnx --input x={p}"))
pb = numpy_helper.from_array(x4, "x").SerializeToString()
for cut in (3, len(pb) // 2, len(pb) - 1):
    p = f"r7_pb_cut_{cut}.pb"
    with open(os.path.join(OUT, p), "wb") as f:
        f.write(pb[:cut])
    rows.append((f"r7_pb_cut_{cut}", 7, "err", f"run r7_valid_twin.onnx --input x={p}"))
# an .npy whose header claims a huge shape with a short body, and a fortran-order one
npy_header_only(os.path.join(OUT, "r7_npy_huge_claim.npy"), [1, 1, 1 << 20, 1 << 20])
rows.append(("r7_npy_huge_claim", 7, "err", "run r7_valid_twin.onnx --input x=r7_npy_huge_claim.npy"))
# ---- class 11: CLI arguments, fresh forms ----
for nm, a in (("maxwork_zero", "--max-work 0"), ("maxwork_neg", "--max-work -1"),
              ("maxwork_huge", "--max-work 99999999999999999999999"), ("maxwork_hex", "--max-work 0x10"),
              ("maxwork_float", "--max-work 1e9"), ("memlimit_neg", "--memory-limit -5"),
              ("threads_zero", "--threads 0"), ("threads_neg", "--threads -1"),
              ("shape_huge", "--shape x=99999999999999999999x1"), ("shape_zero", "--shape x=0x0"),
              ("shape_neg", "--shape x=-1x4"), ("shape_many", "--shape x=" + "x".join(["1"] * 40)),
              ("shape_empty_name", "--shape =4"), ("input_empty_path", "--input x="),
              ("input_no_eq", "--input x"), ("opt_level_9", "-O9"), ("maxtb_suffix", "--max-tensor-bytes 10k"),
              ("output_dir_empty", "--output-dir ''"), ("passes_unknown", "--passes nosuchpass"),
              ("device_bad", "--device gpu:99999999999"), ("precision_bad", "--precision fp3"),
              ("input_types_bad", "--input-types x=float128"), ("format_bad", "--format xml")):
    rows.append((f"r11_{nm}", 11, "usage", f"run r7_valid_twin.onnx --input x=x4.npy {a}"))
for cmd in ("inspect", "check", "optimize", "bench", "info"):
    rows.append((f"r11_{cmd}_max_work_neg", 11, "usage", f"{cmd} r7_valid_twin.onnx --max-work -3"))
# the load-time (fold) paths through inspect, for the class-1 cases
for r in list(rows):
    if r[0].startswith("r1_") and r[3].startswith("run ") and "--input" not in r[3]:
        f = r[3].split()[1]
        rows.append((r[0] + "_inspect", r[1], "any", f"inspect {f}"))

with open(os.path.join(OUT, "probe.tsv"), "w") as f:
    for r in rows:
        f.write("\t".join(str(c) for c in r) + "\n")
print(len(rows), "cases")
