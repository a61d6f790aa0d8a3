#!/usr/bin/env python3
"""Issue 20, round 4: FRESH hostile cases of the issue's classes 1-11, from ops, shapes,
attributes, files and commands that make_probe.py, make_probe_r2.py, make_probe_r3.py and
the bad corpus do not use: kiln's own ops read from a file (the training ops: pooling and
convolution gradients, LSTMGrad, the optimizers; FusedConv, QLinearGemm, the NHWC global
pools), recurrences of input size 0, the ONNX ops no earlier round touched (global pools,
the other reductions, variadic Min/Max/Mean, PRelu, CastLike, Shrink, losses, sequences,
optionals, integer products), TorchScript archives with hostile storages and views,
`kiln train` (its .npz data, checkpoint folders) and `kiln quantize`, sequence outputs
written to an output folder, and options of bench, check, train and quantize. Same output
as make_probe.py (a scratch folder and its probe.tsv), run by the same runner:

    .venv/bin/python tests/corpus/make_probe_r4.py OUTDIR
    tests/corpus/run_probe.sh KILN OUTDIR [CAP_KB]

Not part of the test suite: cases that found defects went into tests/corpus/bad or the
unit tests; docs/fuzzing.md ("Round 4") has the results.
"""
import io
import os
import pickle
import struct
import sys
import zipfile

import numpy as np
import onnx
from onnx import TensorProto as TP, helper, numpy_helper

from make_probe import gen, init, vi
from probe_lib import lin_module, Probe, model, npy_header_only

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
F, I64, I32, U8, I8, BOOL = TP.FLOAT, TP.INT64, TP.INT32, TP.UINT8, TP.INT8, TP.BOOL
IMAX, IMIN = 2**63 - 1, -2**63
E59 = 2**59  # the largest extent kiln admits (KL_MAX_EXTENT)


# the case list and its helpers (probe_lib.py, shared with the other rounds)
P = Probe(OUT)
rows = P.rows
case, gen_case, one = P.case, P.gen_case, P.one


def K(op_type, ins, outs, **kw):
    return helper.make_node(op_type, ins, outs, domain="kiln", **kw)


y = [vi("y", None)]
yi = [vi("y", None, I64)]

# ---- class 1: unbounded work ----
# recurrences of input size 0: X [steps, 1, 0] has no elements, each step still runs
for op, g in (("RNN", 1), ("GRU", 3), ("LSTM", 4)):
    gen_case(f"r4w_{op.lower()}_input0_2p27", 1, [1 << 27, 1, 0],
             [helper.make_node(op, ["x", "w", "r"], ["", "yh"], hidden_size=1)], [vi("yh", None)],
             [init("w", np.zeros([1, g, 0], np.float32)), init("r", np.zeros([1, g, 1], np.float32))])
gen_case("r4w_lstm_input0_layout1", 1, [1, 1 << 27, 0],
         [helper.make_node("LSTM", ["x", "w", "r"], ["", "yh"], hidden_size=1, layout=1)],
         [vi("yh", None)], [init("w", np.zeros([1, 4, 0], np.float32)),
                            init("r", np.zeros([1, 4, 1], np.float32))])
gen_case("r4w_gru_input0_bidir", 1, [1 << 26, 1, 0],
         [helper.make_node("GRU", ["x", "w", "r"], ["", "yh"], hidden_size=1,
                           direction="bidirectional", linear_before_reset=1)],
         [vi("yh", None)], [init("w", np.zeros([2, 3, 0], np.float32)),
                            init("r", np.zeros([2, 3, 1], np.float32))])
# kiln's training ops read from a file: gradients with windows and filters of 10^6 taps
big = [1, 1, 1000, 1000]
for op in ("MaxPoolGrad", "AveragePoolGrad"):
    ins, nodes = gen([1, 1, 1999, 1999], "dy")
    i2, n2 = gen(big, "x")
    case(f"r4w_{op.lower()}_window_1e6", 1,
         model(nodes + n2 + [K(op, ["dy", "x"], ["y"], kernel_shape=[1000, 1000], pads=[999] * 4)],
               [], y, ins + i2, domains=["kiln"]))
ins, nodes = gen([1, 1, 5999999], "dy")
i2, n2 = gen([1, 1, 3000000], "x")
case("r4w_convgradx_1d_3000taps", 1,
     model(nodes + n2 + [K("ConvGradX", ["dy", "w", "x"], ["y"], pads=[2999999, 2999999])], [], y,
           ins + i2 + [init("w", np.ones([1, 1, 3000000], np.float32))], domains=["kiln"]))
case("r4w_convgradw_1d_3000taps", 1,
     model(n2 + nodes + [K("ConvGradW", ["x", "dy", "ws"], ["y"], pads=[2999999, 2999999])], [], y,
           ins + i2 + [init("ws", np.ones([1, 1, 3000000], np.float32))], domains=["kiln"]))
gen_case("r4w_nhwc_avgpool_window", 1, [1, 1000, 1000, 1],
         [K("NhwcAveragePool", ["x"], ["y"], kernel_shape=[1000, 1000], pads=[999] * 4)], y,
         domains=["kiln"])
gen_case("r4w_nhwc_globalmax_empty_huge", 1, [1 << 40, 0, 0, 1],
         [K("NhwcGlobalMaxPool", ["x"], ["y"])], y, domains=["kiln"], expect="any")
gen_case("r4w_nhwc_globalavg_rows", 1, [1, 1 << 15, 1 << 15, 1],
         [K("NhwcGlobalAveragePool", ["x"], ["y"])], y, domains=["kiln"], expect="ok")
gen_case("r4w_fusedconv_1d_3000taps", 1, [1, 1, 3000000],
         [K("FusedConv", ["x", "w"], ["y"], pads=[2999999, 2999999], activation="Relu")], y,
         [init("w", np.ones([1, 1, 3000], np.float32))], domains=["kiln"], args="-O0")
gen_case("r4w_fusedconvtranspose_big", 1, [1, 1, 3000, 3000],
         [K("FusedConvTranspose", ["x", "w"], ["y"], activation="Relu")], y,
         [init("w", np.ones([1, 1, 1000, 1000], np.float32))], domains=["kiln"], args="-O0")
gen_case("r4w_fusedgemm_k_huge", 1, [1, 1 << 28],
         [K("FusedGemm", ["x", "x"], ["y"], transB=1, activation="Relu")], y, domains=["kiln"],
         expect="any")
gen_case("r4w_fusedmatmul_big", 1, [6000, 6000],
         [K("FusedMatMul", ["x", "x"], ["y"])], y, domains=["kiln"], args="--threads 1")
# QLinearGemm (8 inputs) 6000^3 in kiln's form, and the global 8-bit pool
qi, qn = gen([6000, 6000], "q", 3, np.uint8)
case("r4w_qlineargemm_big", 1,
     model(qn + [K("QLinearGemm", ["q", "s", "z", "q", "s", "z", "s", "z"], ["y"])], [],
           [vi("y", None, U8)], qi + [init("s", np.array(0.1, np.float32)), init("z", np.array(0, np.uint8))],
           domains=["kiln"]), args="--threads 1")
qi, qn = gen([1, 1 << 14, 1 << 14, 1], "q", 3, np.uint8)
case("r4w_qlinear_globalavg", 1,
     model(qn + [K("QLinearGlobalAveragePool", ["q", "s", "z", "s", "z"], ["y"])], [],
           [vi("y", None, U8)], qi + [init("s", np.array(0.1, np.float32)), init("z", np.array(0, np.uint8))],
           domains=["kiln"]), expect="any")
# integer products: MatMulInteger 8192^3 and a reference ConvInteger of 10^6 taps
qi, qn = gen([8192, 8192], "q", 3, np.uint8)
case("r4w_matmulinteger_8192", 1, model(qn + [helper.make_node("MatMulInteger", ["q", "q"], ["y"])], [],
                                        [vi("y", None, I32)], qi), args="--threads 1", expect="any")
qi, qn = gen([1, 1, 1000, 1000], "q", 3, np.uint8)
case("r4w_convinteger_1e6_taps", 1,
     model(qn + [helper.make_node("ConvInteger", ["q", "w"], ["y"], pads=[999] * 4)], [],
           [vi("y", None, I32)], qi + [init("w", np.ones([1, 1, 1000, 1000], np.uint8))]))
gen_case("r4w_globallppool_rows", 1, [1 << 14, 1 << 14, 1, 1],
         [helper.make_node("GlobalLpPool", ["x"], ["y"], p=7)], y, expect="any")
gen_case("r4w_hamming_huge", 1, [1],
         [helper.make_node("HammingWindow", ["n"], ["y"], periodic=0)], y,
         [init("n", np.array(1 << 40, np.int64))])
# control flow that carries a growing sequence: every trip inserts into it
body = helper.make_graph(
    [helper.make_node("Identity", ["c"], ["co"]),
     helper.make_node("SequenceInsert", ["s", "one"], ["so"])], "body",
    [vi("i", [], I64), vi("c", [], BOOL), helper.make_tensor_sequence_value_info("s", F, None)],
    [vi("co", [], BOOL), helper.make_tensor_sequence_value_info("so", F, None)],
    [init("one", np.ones([64], np.float32))])
case("r4w_loop_sequence_grows", 1,
     model([helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
            helper.make_node("Loop", ["n", "", "s0"], ["sf"], body=body),
            helper.make_node("SequenceLength", ["sf"], ["y"])], [], yi,
           [init("n", np.array(300000, np.int64))]), expect="any")
body2 = helper.make_graph(
    [helper.make_node("Identity", ["c"], ["co"]), helper.make_node("MatMul", ["v", "w"], ["vo"])],
    "body2", [vi("i", [], I64), vi("c", [], BOOL), vi("v", [512, 512])],
    [vi("co", [], BOOL), vi("vo", [512, 512])], [init("w", np.eye(512, dtype=np.float32))])
case("r4w_loop_matmul_1e6_trips", 1,
     model([helper.make_node("Loop", ["n", "", "v0"], ["y"], body=body2)], [], y,
           [init("n", np.array(10**6, np.int64)), init("v0", np.ones([512, 512], np.float32))]))
gen_case("r4w_split_concat_sequence", 1, [1 << 22],
         [helper.make_node("SplitToSequence", ["x"], ["s"], keepdims=0),
          helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1)], y, expect="any")
# the load-time paths (constant folding) of the first ones, through inspect and optimize
for r in list(rows):
    if r[0].startswith("r4w_") and "--input" not in r[3]:
        f = r[3].split()[1]
        rows.append((r[0] + "_inspect", r[1], "any", f"inspect {f}"))
for nm in ("r4w_lstm_input0_2p27", "r4w_maxpoolgrad_window_1e6", "r4w_hamming_huge",
           "r4w_loop_matmul_1e6_trips"):
    rows.append((nm + "_optimize", 1, "any", f"optimize {nm}.onnx -o {nm}.opt.onnx"))

# ---- class 2: overflow on empty-but-huge tensors (extent at most 2^59), fresh ops ----
EHA = ("hdr", [0, E59])
EHB = ("hdr", [1 << 40, 0, 1 << 19])
EH4 = ("hdr", [1 << 29, 0, 1 << 15, 1 << 15])
sc1 = init("sc1", np.ones([1], np.float32))
for nm, mk, outt, inits in (
        ("reducemean", lambda: helper.make_node("ReduceMean", ["x"], ["y"]), F, []),
        ("reducemin_ax0", lambda: helper.make_node("ReduceMin", ["x", "ax"], ["y"], keepdims=0), F,
         [init("ax", np.array([0], np.int64))]),
        ("reducel1_last", lambda: helper.make_node("ReduceL1", ["x", "ax"], ["y"]), F,
         [init("ax", np.array([-1], np.int64))]),
        ("reducelogsum", lambda: helper.make_node("ReduceLogSum", ["x"], ["y"], keepdims=0), F, []),
        ("reducesumsquare_ax1", lambda: helper.make_node("ReduceSumSquare", ["x", "ax"], ["y"]), F,
         [init("ax", np.array([1], np.int64))]),
        ("min3", lambda: helper.make_node("Min", ["x", "x", "sc1"], ["y"]), F, [sc1]),
        ("max_bcast", lambda: helper.make_node("Max", ["x", "sc1"], ["y"]), F, [sc1]),
        ("mean2", lambda: helper.make_node("Mean", ["x", "x"], ["y"]), F, []),
        ("prelu", lambda: helper.make_node("PRelu", ["x", "sc1"], ["y"]), F, [sc1]),
        ("castlike_i8", lambda: helper.make_node("CastLike", ["x", "i8"], ["y"]), I8,
         [init("i8", np.zeros([1], np.int8))]),
        ("shrink", lambda: helper.make_node("Shrink", ["x"], ["y"], lambd=0.5, bias=0.1), F, []),
        ("thresholdedrelu", lambda: helper.make_node("ThresholdedRelu", ["x"], ["y"]), F, []),
        ("dropout_ratio", lambda: helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"]), F,
         [init("r", np.array(0.5, np.float32)), init("t", np.array(True))]),
        ("equal", lambda: helper.make_node("Equal", ["x", "x"], ["y"]), BOOL, []),
        ("isinf", lambda: helper.make_node("IsInf", ["x"], ["y"], detect_negative=0), BOOL, []),
        ("round", lambda: helper.make_node("Round", ["x"], ["y"]), F, []),
        ("clip_minmax", lambda: helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), F,
         [init("lo", np.array(0, np.float32)), init("hi", np.array(1, np.float32))]),
        ("mish", lambda: helper.make_node("Mish", ["x"], ["y"]), F, []),
        ("softplus", lambda: helper.make_node("Softplus", ["x"], ["y"]), F, []),
        ("hardswish", lambda: helper.make_node("HardSwish", ["x"], ["y"]), F, []),
        ("shape_slice", lambda: helper.make_node("Shape", ["x"], ["y"], start=1, end=-1), I64, []),
        ("flatten_ax1", lambda: helper.make_node("Flatten", ["x"], ["y"], axis=1), F, []),
        ("unsqueeze_mid", lambda: helper.make_node("Unsqueeze", ["x", "ax"], ["y"]), F,
         [init("ax", np.array([1, 3], np.int64))]),
        ("softmax_ax0", lambda: helper.make_node("Softmax", ["x"], ["y"], axis=0), F, []),
        ("gather_ax1", lambda: helper.make_node("Gather", ["x", "gi"], ["y"], axis=1), F,
         [init("gi", np.zeros([3], np.int64))]),
        ("globalavgpool", lambda: helper.make_node("GlobalAveragePool", ["x"], ["y"]), F, []),
        ("globalmaxpool", lambda: helper.make_node("GlobalMaxPool", ["x"], ["y"]), F, []),
        ("sequence_at", lambda: helper.make_node("SequenceAt", ["sq", "p"], ["y"]), F,
         [init("p", np.array(0, np.int64))]),
):
    for tag, src in (("a", EHA), ("b", EHB), ("c", EH4)):
        if nm.startswith("global") and tag != "c":
            continue
        node = mk()
        nodes = [node]
        if nm == "sequence_at":
            nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["sq"]), node]
        outs = [vi("y", None, outt)] + ([vi("m", None, BOOL)] if nm.startswith("dropout") else [])
        m = model(nodes, [vi("x", None)], outs, inits)
        case(f"r4o_{nm}_{tag}", 2, m, expect="any", inputs={"x": src})
# kiln's ops and the training ops on empty-huge inputs from a 128-byte .npy
for nm, node, outs, inits in (
        ("sumto", K("SumTo", ["x", "x"], ["y"]), y, []),
        ("softmaxgrad", K("SoftmaxGrad", ["x", "x"], ["y"], axis=0), y, []),
        ("reducegrad", K("ReduceGrad", ["x", "x"], ["y"], axes=[0, 1]), y, []),
        ("unarygrad", K("UnaryGrad", ["x", "x", "x"], ["y"], op="Tanh"), y, []),
        ("layernormgrad", K("LayerNormGrad", ["x", "x", "lg"], ["y"], axis=-1), y,
         [init("lg", np.ones([1], np.float32))]),
        ("batchnormgrad", K("BatchNormGrad", ["x", "x", "bg"], ["y"]), y,
         [init("bg", np.ones([0], np.float32))]),
        ("dropouttrain", K("DropoutTrain", ["x", "r", "sd"], ["y"]), y,
         [init("r", np.array(0.5, np.float32)), init("sd", np.array(3, np.int64))]),
        ("gradnorm", K("GradNorm", ["x", "x"], ["y"]), y, []),
        ("sgd", K("SGD", ["x", "x", "lr"], ["y"]), y, [init("lr", np.array(0.1, np.float32))]),
        ("adam", K("Adam", ["x", "x", "lr", "x", "x"], ["y"]), y, [init("lr", np.array(0.1, np.float32))]),
        ("skiplayernorm", K("SkipLayerNorm", ["x", "x", "lg"], ["y"]), y, [init("lg", np.ones([1], np.float32))]),
        ("loss_mse", K("Loss", ["x", "x"], ["y"], kind="mse", reduction="sum"), y, []),
):
    for tag, src in (("a", EHA), ("b", EHB)):
        case(f"r4o_kiln_{nm}_{tag}", 2, model([node], [vi("x", None)], outs, inits, domains=["kiln"]),
             expect="any", inputs={"x": src})
# attribute and value arithmetic on ops no round used
x2 = np.ones([2, 3], np.float32)
for nm, node, ins, outs, inits, inp in (
        ("shape_start_min", helper.make_node("Shape", ["x"], ["y"], start=IMIN, end=IMAX), [vi("x", None)],
         yi, [], {"x": x2}),
        ("flatten_axis_min", helper.make_node("Flatten", ["x"], ["y"], axis=IMIN), [vi("x", None)], y, [],
         {"x": x2}),
        ("unsqueeze_axis_max", helper.make_node("Unsqueeze", ["x", "ax"], ["y"]), [vi("x", None)], y,
         [init("ax", np.array([IMAX], np.int64))], {"x": x2}),
        ("squeeze_axis_min", helper.make_node("Squeeze", ["x", "ax"], ["y"]), [vi("x", None)], y,
         [init("ax", np.array([IMIN], np.int64))], {"x": x2}),
        ("split_num_outputs_huge", helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=IMAX),
         [vi("x", None)], [vi("a", None), vi("b", None)], [], {"x": x2}),
        ("seq_at_min", helper.make_node("SequenceAt", ["s", "p"], ["y"]), [helper.make_tensor_sequence_value_info("s", F, None)],
         y, [], None),
        ("hamming_neg", helper.make_node("HammingWindow", ["n"], ["y"]), [vi("n", [], I64)], y, [],
         {"n": np.array(IMIN, np.int64)}),
        ("dropout_ratio_nan", helper.make_node("Dropout", ["x", "r", "t"], ["y"]), [vi("x", None), vi("r", [], F)],
         y, [init("t", np.array(True))], {"x": x2, "r": np.array(np.nan, np.float32)}),
        ("dropout_ratio_one", helper.make_node("Dropout", ["x", "r", "t"], ["y"], seed=IMAX),
         [vi("x", None), vi("r", [], F)], y, [init("t", np.array(True))], {"x": x2, "r": np.array(1.0, np.float32)}),
        ("shrink_lambd_nan", helper.make_node("Shrink", ["x"], ["y"], lambd=float("nan")), [vi("x", None)], y, [],
         {"x": x2}),
        ("clip_lo_gt_hi_int", helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), [vi("x", None, I64)], yi,
         [init("lo", np.array(IMAX, np.int64)), init("hi", np.array(IMIN, np.int64))],
         {"x": np.array([IMIN, 0, IMAX], np.int64)}),
        ("prelu_slope_bcast_bad", helper.make_node("PRelu", ["x", "s"], ["y"]), [vi("x", None)], y,
         [init("s", np.ones([5], np.float32))], {"x": x2}),
        ("mean_int_overflow", helper.make_node("Mean", ["x", "x", "x"], ["y"]), [vi("x", None, I64)], yi, [],
         {"x": np.array([IMAX, IMIN], np.int64)}),
        ("max_int_nan_f", helper.make_node("Max", ["x", "x"], ["y"]), [vi("x", None)], y, [],
         {"x": np.array([np.nan, -np.inf], np.float32)}),
        ("matmulinteger_zp_len", helper.make_node("MatMulInteger", ["a", "b", "za"], ["y"]), [vi("a", None, U8)],
         [vi("y", None, I32)], [init("b", np.ones([3, 2], np.uint8)), init("za", np.zeros([7], np.uint8))],
         {"a": np.ones([2, 3], np.uint8)}),
        ("convinteger_zp_len", helper.make_node("ConvInteger", ["a", "w", "za", "zw"], ["y"]), [vi("a", None, U8)],
         [vi("y", None, I32)], [init("w", np.ones([2, 1, 1, 1], np.uint8)), init("za", np.zeros([1], np.uint8)),
                                init("zw", np.zeros([5], np.uint8))], {"a": np.ones([1, 1, 2, 2], np.uint8)}),
        ("qlinearconv_wzp_len", helper.make_node("QLinearConv", ["a", "s", "z", "w", "ws", "wz", "s", "z"], ["y"]),
         [vi("a", None, U8)], [vi("y", None, U8)],
         [init("s", np.array(0.1, np.float32)), init("z", np.array(0, np.uint8)), init("w", np.ones([2, 1, 1, 1], np.uint8)),
          init("ws", np.ones([2], np.float32)), init("wz", np.zeros([3], np.uint8))], {"a": np.ones([1, 1, 2, 2], np.uint8)}),
        ("nll_target_oob", helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"]), [vi("x", None), vi("t", None, I64)],
         y, [], {"x": x2, "t": np.array([5, 1 << 40], np.int64)}),
        ("nll_target_neg", helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="sum"),
         [vi("x", None), vi("t", None, I64)], y, [], {"x": x2, "t": np.array([-1, IMIN], np.int64)}),
        ("nll_ignore_min", helper.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["y"], ignore_index=IMIN),
         [vi("x", None), vi("t", None, I64)], y, [init("w", np.ones([3], np.float32))],
         {"x": x2, "t": np.array([IMIN, IMIN], np.int64)}),
        ("sce_target_oob_4d", helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y", "lp"], reduction="none"),
         [vi("x", None), vi("t", None, I64)], [vi("y", None), vi("lp", None)], [],
         {"x": np.ones([1, 3, 2, 2], np.float32), "t": np.array([[[0, 3], [-4, 2]]], np.int64)}),
        ("sce_weight_short", helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["y"]),
         [vi("x", None), vi("t", None, I64)], y, [init("w", np.ones([2], np.float32))],
         {"x": x2, "t": np.array([2, 2], np.int64)}),
        ("gathergrad_idx_oob", K("GatherGrad", ["dy", "i", "x"], ["y"], axis=0),
         [vi("dy", None), vi("i", None, I64), vi("x", None)], y, [],
         {"dy": np.ones([2, 3], np.float32), "i": np.array([7, IMIN], np.int64), "x": x2}),
        ("slicegrad_steps_min", K("SliceGrad", ["dy", "x", "st", "en", "ax", "sp"], ["y"]),
         [vi("dy", None), vi("x", None)], y,
         [init("st", np.array([IMAX], np.int64)), init("en", np.array([IMIN], np.int64)),
          init("ax", np.array([1], np.int64)), init("sp", np.array([IMIN], np.int64))],
         {"dy": np.ones([2, 0], np.float32), "x": x2}),
        ("maxpoolgrad_stride_max", K("MaxPoolGrad", ["dy", "x"], ["y"], kernel_shape=[2, 2], strides=[IMAX, IMAX],
                                     pads=[1, 1, 1, 1]), [vi("dy", None), vi("x", None)], y, [],
         {"dy": np.ones([1, 1, 2, 2], np.float32), "x": np.ones([1, 1, 2, 2], np.float32)}),
        ("convgradx_dil_max", K("ConvGradX", ["dy", "w", "x"], ["y"], dilations=[IMAX, 1]),
         [vi("dy", None), vi("x", None)], y, [init("w", np.ones([1, 1, 2, 1], np.float32))],
         {"dy": np.ones([1, 1, 1, 2], np.float32), "x": np.ones([1, 1, 2, 2], np.float32)}),
        ("lstmgrad_hidden_huge", K("LSTMGrad", ["x", "w", "r"], ["dx"], hidden_size=1 << 40),
         [vi("x", None)], [vi("dx", None)], [init("w", np.ones([1, 4, 1], np.float32)), init("r", np.ones([1, 4, 1], np.float32))],
         {"x": np.ones([2, 1, 1], np.float32)}),
        ("clipcoef_nan", K("ClipCoef", ["x"], ["y"], max_norm=float("nan")), [vi("x", None)], y, [],
         {"x": np.array(3.0, np.float32)}),
        ("resizegrad_scale_huge", K("ResizeGrad", ["dy", "x", "", "sc"], ["y"]), [vi("dy", None), vi("x", None)], y,
         [init("sc", np.array([1, 1, 1e9, 1e9], np.float32))],
         {"dy": np.ones([1, 1, 2, 2], np.float32), "x": np.ones([1, 1, 2, 2], np.float32)}),
        ("qlinearlookup_short_table", K("QLinearLookup", ["a", "tb"], ["y"]), [vi("a", None, U8)], [vi("y", None, U8)],
         [init("tb", np.zeros([3], np.uint8))], {"a": np.array([0, 200, 255], np.uint8)}),
        ("qlinearadd_scale_nan", K("QLinearAdd", ["a", "s", "z", "a", "s", "z", "s", "z"], ["y"]), [vi("a", None, U8)],
         [vi("y", None, U8)], [init("s", np.array(np.nan, np.float32)), init("z", np.array(0, np.uint8))],
         {"a": np.array([0, 200, 255], np.uint8)}),
        ("check_kiln_op", K("Check", ["x", "x"], ["y"], messages=["m"]), [vi("x", None)], y, [], {"x": x2}),
):
    dom = ["kiln"] if node.domain == "kiln" else []
    seqin = any(v.type.HasField("sequence_type") for v in ins)
    case(f"r4o_{nm}", 2, model([node], ins, outs, inits, domains=dom), expect="any",
         inputs=inp, args="" if not seqin else "")
# optionals and sequences at run time
opt_body = helper.make_node("Optional", ["x"], ["o"])
case("r4o_optional_get_empty", 2,
     model([helper.make_node("Optional", [], ["o"], type=helper.make_tensor_type_proto(F, None)),
            helper.make_node("OptionalGetElement", ["o"], ["y"])], [], y), expect="any")
case("r4o_sequence_erase_min", 2,
     model([helper.make_node("SequenceConstruct", ["c", "c"], ["s"]),
            helper.make_node("SequenceErase", ["s", "p"], ["s2"]),
            helper.make_node("SequenceLength", ["s2"], ["y"])], [], yi,
           [init("c", np.ones([2], np.float32)), init("p", np.array(IMIN, np.int64))]), expect="any")
case("r4o_sequence_insert_max", 2,
     model([helper.make_node("SequenceConstruct", ["c", "c"], ["s"]),
            helper.make_node("SequenceInsert", ["s", "c", "p"], ["s2"]),
            helper.make_node("SequenceLength", ["s2"], ["y"])], [], yi,
           [init("c", np.ones([2], np.float32)), init("p", np.array(IMAX, np.int64))]), expect="any")
case("r4o_sequence_dtype_mix", 2,
     model([helper.make_node("SequenceConstruct", ["c", "d"], ["s"]),
            helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], [], y,
           [init("c", np.ones([2], np.float32)), init("d", np.ones([2], np.int64))]), expect="any")
# a bool initializer whose raw bytes are not 0 or 1 (C's bool may hold only those)
t = onnx.TensorProto(); t.name = "b"; t.data_type = BOOL; t.dims.extend([3]); t.raw_data = b"\x05\x00\xff"
case("r4o_bool_init_raw_5", 6, model([helper.make_node("Not", ["b"], ["nb"]),
                                      helper.make_node("Where", ["b", "one", "zero"], ["y"])], [], y,
                                     [t, init("one", np.ones([3], np.float32)), init("zero", np.zeros([3], np.float32))]),
     expect="any", args="-O0")
case("r4o_bool_input_npy_5", 6, model([helper.make_node("Where", ["b", "one", "zero"], ["y"])], [vi("b", [3], BOOL)], y,
                                      [init("one", np.ones([3], np.float32)), init("zero", np.zeros([3], np.float32))]),
     expect="any", inputs={"b": np.array([5, 0, 255], np.uint8).view(np.bool_)})

# ---- TorchScript archives with hostile storages, views and pickles (classes 1, 2, 5, 8) ----
import torch  # noqa: E402



class _Bool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("m", torch.tensor([True, False, True]))

    def forward(self, x):
        return torch.where(self.m, x, -x)


import warnings  # noqa: E402
warnings.filterwarnings("ignore")
tmpl = {}
for nm, mod in (("lin", lin_module()), ("bool", _Bool())):
    buf = io.BytesIO()
    torch.jit.save(torch.jit.trace(mod, torch.ones(2, 3)), buf)
    tmpl[nm] = buf.getvalue()


def enc(v):
    if 0 <= v < 256:
        return b"K" + bytes([v])
    n = (v.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + v.to_bytes(n, "little", signed=True)


def pt_case(name, cls, expect="err", base="lin", stype=b"FloatStorage", key=b"0", numel=6, offset=0,
            sizes=(2, 3), strides=(3, 1), data=None, pkl=None, extra=(), args=""):
    z = zipfile.ZipFile(io.BytesIO(tmpl[base]))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as w:
        for info in z.infolist():
            body = z.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                if pkl is not None:
                    body = pkl
                else:
                    attr = b"w" if base == "lin" else b"m"
                    rest = body[body.index(b"ccollections") - 1:]
                    cls_line = body[2:body.index(b"q\x00)")]  # c__torch__\n<class>\n
                    body = (b"\x80\x02" + cls_line + b"q\x00)\x81}(X\x01\x00\x00\x00" + attr +
                            b"q\x01ctorch._utils\n_rebuild_tensor_v2\nq\x02((X\x07\x00\x00\x00storageq\x03ctorch\n" +
                            stype + b"\nq\x04X" + struct.pack("<I", len(key)) + key + b"q\x05X\x03\x00\x00\x00cpuq\x06" +
                            enc(numel) + b"tQq\x07" + enc(offset) + b"(" + b"".join(enc(s) for s in sizes) + b"t(" +
                            b"".join(enc(s) for s in strides) + b"t" + rest)
            if info.filename.endswith("/data/0") and data is not None:
                w.writestr(info.filename[:-1] + key.decode("latin-1"), data, zipfile.ZIP_DEFLATED)
                continue
            w.writestr(info, body)
        for n, b in extra:
            w.writestr(n, b)
    with open(os.path.join(OUT, name + ".pt"), "wb") as f:
        f.write(out.getvalue())
    rows.append((name, cls, expect, f"run {name}.pt {args}".strip()))


pt_case("r4t_control", 7, "ok")
pt_case("r4t_stride_max", 2, strides=(IMAX, 1))
pt_case("r4t_stride_neg", 2, strides=(-3, 1))
pt_case("r4t_stride_overflow_sum", 2, sizes=(3, 3), strides=(2**62, 2**62), numel=6)
pt_case("r4t_offset_max", 2, offset=IMAX)
pt_case("r4t_offset_neg", 2, offset=-1)
pt_case("r4t_offset_neg_empty", 2, offset=IMIN, sizes=(0, 3), expect="any")
pt_case("r4t_size_neg", 2, sizes=(-1, 3))
pt_case("r4t_rank9", 2, sizes=(1,) * 9, strides=(1,) * 9, expect="any")
pt_case("r4t_rank_mismatch", 2, sizes=(2, 3), strides=(1,), expect="any")
pt_case("r4t_numel_huge_short_file", 4, numel=2**62)
pt_case("r4t_numel_neg", 2, numel=-6)
pt_case("r4t_empty_extent_2p59", 2, sizes=(0, E59), strides=(1, 1), expect="any")
pt_case("r4t_empty_extent_2p62", 2, sizes=(0, 2**62), strides=(1, 1))
pt_case("r4t_empty_strides_huge", 2, sizes=(0, 4), strides=(IMAX, IMAX), numel=0, expect="any")
pt_case("r4t_expand_1gb", 1, sizes=(1 << 26, 4), strides=(0, 0), expect="any")
pt_case("r4t_transpose_view_1gb", 1, numel=1 << 28, sizes=(1 << 14, 1 << 14), strides=(1, 1 << 14),
        data=bytes(4 << 28), expect="any")
pt_case("r4t_stride_sparse_rows", 1, numel=(1 << 26) + 1, sizes=(1 << 26, 1), strides=(1, 1),
        data=bytes(4 * ((1 << 26) + 1)), expect="any")
for st in (b"ComplexFloatStorage", b"QInt8Storage", b"UntypedStorage", b"NoSuchStorage", b"HalfStorage"):
    pt_case(f"r4t_storage_{st.decode().lower()}", 6, stype=st, expect="any")
pt_case("r4t_bfloat16_odd_bytes", 2, stype=b"BFloat16Storage", data=b"\x01" * 11, expect="err")
pt_case("r4t_key_dotdot", 5, key=b"../../data.pkl")
pt_case("r4t_key_slash_abs", 5, key=b"/etc/passwd")
pt_case("r4t_key_250_chars", 6, key=b"A" * 250, data=np.full(6, 7, np.float32).tobytes(),
        extra=[("lin/data/" + "A" * 200, np.full(6, -1, np.float32).tobytes())], expect="any")
pt_case("r4t_key_traced_inputs", 5, key=b"..", expect="err")
pt_case("r4t_bool_bytes_5", 6, base="bool", stype=b"BoolStorage", numel=3, sizes=(3,), strides=(1,),
        data=b"\x05\x00\xff", expect="any")
pt_case("r4t_pickle_marks_1e6", 2, pkl=b"\x80\x02" + b"(" * 10**6 + b".")
pt_case("r4t_pickle_memo_index_huge", 4, pkl=b"\x80\x02N" + b"r\xff\xff\xff\x7f" + b".")
pt_case("r4t_pickle_get_unset", 8, pkl=b"\x80\x02j\xff\xff\xff\x7f.")
pt_case("r4t_pickle_unicode_len_huge", 8, pkl=b"\x80\x02X\xff\xff\xff\xff" + b"a" * 16 + b".")
pt_case("r4t_pickle_long4_huge", 4, pkl=b"\x80\x02\x8b\xff\xff\xff\x7f" + b"\x01" * 16 + b".")
pt_case("r4t_pickle_list_dup_1e6", 1, pkl=b"\x80\x02]q\x00" + b"(" + b"h\x00" * 10**6 + b"e.")
pt_case("r4t_pickle_self_list", 1, pkl=b"\x80\x02]q\x00h\x00a.")
pt_case("r4t_pickle_dict_nested", 1, pkl=b"\x80\x02" + b"}(X\x01\x00\x00\x00a" * 20000 + b"N" + b"u" * 20000 + b".")

# ---- kiln train and kiln quantize: data files, checkpoint folders, options (classes 1, 5, 11) ----
def npz(path, arrays, raw=()):
    with zipfile.ZipFile(os.path.join(OUT, path), "w", zipfile.ZIP_DEFLATED) as z:
        for k, v in arrays.items():
            b = io.BytesIO()
            np.save(b, v)
            z.writestr(k + ".npy", b.getvalue())
        for k, b in raw:
            z.writestr(k, b)


def hdr_bytes(shape, descr="<f4"):
    p = os.path.join(OUT, "_hdr.npy")
    npy_header_only(p, shape, descr)
    b = open(p, "rb").read()
    os.remove(p)
    return b


rng = np.random.default_rng(0)
tm = model([helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)], [vi("x", ["N", 4])], [vi("y", ["N", 3])],
           [init("W", rng.standard_normal([3, 4]).astype(np.float32)), init("b", np.zeros([3], np.float32))])
onnx.save(tm, os.path.join(OUT, "r4_train.onnx"))
xs, ts = rng.standard_normal([16, 4]).astype(np.float32), rng.integers(0, 3, [16]).astype(np.int64)
npz("r4_train.npz", {"x": xs, "target": ts})
T = "train r4_train.onnx --data r4_train.npz"
rows.append(("r4p_train_control", 7, "ok", f"{T} --epochs 2"))
# the checkpoint folder: a planted link where the manifest goes, and where a weight goes
os.makedirs(os.path.join(OUT, "r4p_ck_link"), exist_ok=True)
with open(os.path.join(OUT, "victim_manifest.txt"), "w") as f:
    f.write("victim\n")
os.symlink("../victim_manifest.txt", os.path.join(OUT, "r4p_ck_link", "checkpoint.json"))
rows.append(("r4p_train_checkpoint_manifest_link", 5, "any", f"{T} --epochs 1 --checkpoint r4p_ck_link"))
os.makedirs(os.path.join(OUT, "r4p_ck_link2"), exist_ok=True)
with open(os.path.join(OUT, "victim_param.txt"), "w") as f:
    f.write("victim\n")
os.symlink("../victim_param.txt", os.path.join(OUT, "r4p_ck_link2", "param0.value.npy"))
rows.append(("r4p_train_checkpoint_param_link", 5, "any", f"{T} --epochs 1 --checkpoint r4p_ck_link2"))
os.makedirs(os.path.join(OUT, "r4p_ck_fifo"), exist_ok=True)
os.mkfifo(os.path.join(OUT, "r4p_ck_fifo", "checkpoint.json"))
rows.append(("r4p_train_resume_manifest_fifo", 1, "err", f"{T} --epochs 1 --resume r4p_ck_fifo"))
rows.append(("r4p_train_checkpoint_manifest_fifo", 1, "any", f"{T} --epochs 1 --checkpoint r4p_ck_fifo"))
# a resumed checkpoint whose manifest and arrays lie
for nm, man, arrays in (
        ("steps_max", '{"kiln_checkpoint": 1, "optimizer": "sgd", "steps": 9223372036854775807, "params": 2, '
                      '"stats": 0}', {"param0.value": np.ones([3, 4], np.float32), "param1.value": np.ones([3], np.float32)}),
        ("steps_huge_text", '{"kiln_checkpoint": 1, "optimizer": "sgd", "steps": 99999999999999999999999, '
                            '"params": 2, "stats": 0}', {"param0.value": np.ones([3, 4], np.float32),
                                                         "param1.value": np.ones([3], np.float32)}),
        ("params_neg", '{"kiln_checkpoint": 1, "optimizer": "sgd", "steps": 1, "params": -2, "stats": 0}', {}),
        ("param_wrong_dtype", '{"kiln_checkpoint": 1, "optimizer": "sgd", "steps": 1, "params": 2, "stats": 0}',
         {"param0.value": np.ones([3, 4], np.float64), "param1.value": np.ones([3], np.float32)}),
        ("param_empty_huge", '{"kiln_checkpoint": 1, "optimizer": "sgd", "steps": 1, "params": 2, "stats": 0}',
         {"param0.value": ("hdr", [0, E59]), "param1.value": np.ones([3], np.float32)}),
        ("param_nan", '{"kiln_checkpoint": 1, "optimizer": "sgd", "steps": 1, "params": 2, "stats": 0}',
         {"param0.value": np.full([3, 4], np.nan, np.float32), "param1.value": np.ones([3], np.float32)}),
):
    d = os.path.join(OUT, f"r4p_ck_{nm}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "checkpoint.json"), "w") as f:
        f.write(man + "\n")
    for k, v in arrays.items():
        if isinstance(v, tuple):
            npy_header_only(os.path.join(d, k + ".npy"), v[1])
        else:
            np.save(os.path.join(d, k + ".npy"), v)
    rows.append((f"r4p_train_resume_{nm}", 2, "any", f"{T} --epochs 1 --resume r4p_ck_{nm}"))
# hostile .npz data: empty-but-huge samples, a deflated 3 GB array, names twice, not a zip
t0 = model([helper.make_node("Mul", ["x", "w"], ["y"])], [vi("x", ["N", 0])], [vi("y", ["N", 0])],
           [init("w", np.ones([1], np.float32))])
onnx.save(t0, os.path.join(OUT, "r4_train0.onnx"))
npz("r4_npz_empty_huge.npz", {}, [("x.npy", hdr_bytes([1 << 40, 0])), ("target.npy", hdr_bytes([1 << 40, 0]))])
rows.append(("r4p_train_npz_empty_huge", 1, "err",
             "train r4_train0.onnx --data r4_npz_empty_huge.npz --epochs 1 --loss mse --reduction sum --no-shuffle"))
rows.append(("r4p_train_npz_empty_huge_shuffled", 1, "err",
             "train r4_train0.onnx --data r4_npz_empty_huge.npz --epochs 1 --loss mse --reduction sum"))
with zipfile.ZipFile(os.path.join(OUT, "r4_npz_bomb.npz"), "w", zipfile.ZIP_DEFLATED) as z:
    with z.open("x.npy", "w", force_zip64=True) as f:
        f.write(hdr_bytes([3 << 26, 4]))
        chunk = bytes(1 << 24)
        for _ in range((3 << 30) // len(chunk)):
            f.write(chunk)
    b = io.BytesIO(); np.save(b, np.zeros([3 << 26], np.int64)[:1]); z.writestr("target.npy", b.getvalue())
rows.append(("r4p_train_npz_bomb_3gb", 4, "err", "train r4_train.onnx --data r4_npz_bomb.npz --epochs 1"))
npz("r4_npz_dup.npz", {"x": xs, "target": ts}, [("x.npy", b"\x93NUMPY garbage")])
rows.append(("r4p_train_npz_name_twice", 6, "any", "train r4_train.onnx --data r4_npz_dup.npz --epochs 1"))
npz("r4_npz_target_oob.npz", {"x": xs, "target": np.full([16], 1 << 40, np.int64)})
rows.append(("r4p_train_target_oob", 8, "err", "train r4_train.onnx --data r4_npz_target_oob.npz --epochs 1"))
npz("r4_npz_target_neg.npz", {"x": xs, "target": np.full([16], -7, np.int64)})
rows.append(("r4p_train_target_neg", 8, "err", "train r4_train.onnx --data r4_npz_target_neg.npz --epochs 1"))
npz("r4_npz_target_f.npz", {"x": xs, "target": ts.astype(np.float32)})
rows.append(("r4p_train_target_float", 6, "err", "train r4_train.onnx --data r4_npz_target_f.npz --epochs 1"))
npz("r4_npz_path.npz", {"x": xs, "target": ts}, [("../../evil.npy", b"x"), ("/abs.npy", b"y")])
rows.append(("r4p_train_npz_path_names", 5, "any", "train r4_train.onnx --data r4_npz_path.npz --epochs 1"))
with open(os.path.join(OUT, "r4_npz_cut.npz"), "wb") as f:
    f.write(open(os.path.join(OUT, "r4_train.npz"), "rb").read()[:300])
rows.append(("r4p_train_npz_truncated", 7, "err", "train r4_train.onnx --data r4_npz_cut.npz --epochs 1"))
for i, a in enumerate(("--epochs 9223372036854775807", "--batch 9223372036854775807", "--batch 0",
                       "--batch -1", "--steps -5", "--lr nan", "--lr inf", "--betas 2,3 --optimizer adam",
                       "--schedule step:0:0.5", "--schedule step:9223372036854775807:0.5",
                       "--schedule cosine:0", "--schedule warmup:-1", "--clip-norm nan", "--clip-norm -1",
                       "--label-smoothing 2", "--ignore-index 99999999999999999999", "--momentum nan",
                       "--frozen nosuch", "--frozen W,b", "-o /nonexistent/dir/out.onnx",
                       "--curve /nonexistent/c.svg", "--seed -1", "--eval r4_npz_cut.npz",
                       "--epochs 1 --steps 1", "--optimizer adamw --weight-decay -1e308",
                       "--schedule step:1:1e308 --epochs 3", "--lr 1e308 --epochs 3",
                       "--epochs 9223372036854775807 --batch 1")):
    ep = "" if "--epochs" in a or "--steps" in a else " --epochs 1"
    rows.append((f"r4c_train_opt_{i:02d}", 11, "usage" if i not in (25, 26) else "any", f"{T}{ep} {a}"))
# kiln quantize: options and calibration data
Q = "quantize r4_train.onnx -o r4_q.onnx"
npz("r4_calib.npz", {"x": xs})
for i, a in enumerate(("--calibrate r4_calib.npz --batch-size 0", "--calibrate r4_calib.npz --batch-size -1",
                       "--calibrate r4_calib.npz --max-samples -1",
                       "--calibrate r4_calib.npz --method percentile --percentile nan",
                       "--calibrate r4_calib.npz --method percentile --percentile 200",
                       "--calibrate r4_calib.npz --method nope", "--calibrate r4_npz_empty_huge.npz",
                       "--calibrate r4_npz_bomb.npz", "--calibrate r4_npz_cut.npz",
                       "--calibrate r4_calib.npz --array x=nosuch", "--calibrate r4_calib.npz --array nosuch=x",
                       "--calibrate r4_calib.npz --report-csv /nonexistent/r.csv",
                       "--calibrate r4_calib.npz --exclude '['", "--calibrate r4_calib.npz --threads 0")):
    rows.append((f"r4c_quantize_{i:02d}", 11, "usage" if i not in (12,) else "any", f"{Q} {a}"))
rows.append(("r4p_quantize_onto_itself", 5, "usage", "quantize r4_train.onnx -o ./r4_train.onnx"))
rows.append(("r4p_quantize_onto_itself_link", 5, "usage", "quantize r4_train.onnx -o r4_train_link.onnx"))
os.symlink("r4_train.onnx", os.path.join(OUT, "r4_train_link.onnx"))
rows.append(("r4p_quantize_control", 7, "ok", f"{Q} --calibrate r4_calib.npz"))

# ---- outputs: sequence elements written beside tensor outputs (classes 5, 6) ----
sm = model([helper.make_node("SequenceConstruct", ["c", "c"], ["s"]),
            helper.make_node("Identity", ["d"], ["s.0"])], [],
           [helper.make_tensor_sequence_value_info("s", F, None), vi("s.0", None)],
           [init("c", np.ones([2], np.float32)), init("d", np.full([3], 7, np.float32))])
case("r4p_seq_output_collides", 6, sm, expect="any", args="--output-dir r4p_seq_output_collides.out")
sm = model([helper.make_node("Identity", ["d"], ["s.0"]),
            helper.make_node("SequenceConstruct", ["c", "c"], ["s"])], [],
           [vi("s.0", None), helper.make_tensor_sequence_value_info("s", F, None)],
           [init("c", np.ones([2], np.float32)), init("d", np.full([3], 7, np.float32))])
case("r4p_seq_output_collides_rev", 6, sm, expect="any", args="--output-dir r4p_seq_output_collides_rev.out")
for nm, n, od in (("seq_output_2p20_print", 1 << 20, ""), ("seq_output_2p17_files", 1 << 17, "--output-dir r4p_seq_files.out")):
    inits, nodes = gen([n], "x")
    case(f"r4p_{nm}", 1, model(nodes + [helper.make_node("SplitToSequence", ["x"], ["s"], keepdims=0)], [],
                               [helper.make_tensor_sequence_value_info("s", F, None)], inits), expect="any", args=od)
os.makedirs(os.path.join(OUT, "r4p_seq_link.out"), exist_ok=True)
os.symlink("../victim_manifest.txt", os.path.join(OUT, "r4p_seq_link.out", "s.1.npy"))
case("r4p_seq_output_link", 5, model([helper.make_node("SequenceConstruct", ["c", "c"], ["s"])], [],
                                     [helper.make_tensor_sequence_value_info("s", F, None)],
                                     [init("c", np.ones([2], np.float32))]), expect="any",
     args="--output-dir r4p_seq_link.out")
om = model([helper.make_node("Identity", ["c"], [".."]), helper.make_node("Identity", ["c"], ["..."]),
            helper.make_node("Identity", ["c"], ["output"])], [],
           [vi("..", None), vi("...", None), vi("output", None)], [init("c", np.ones([2], np.float32))])
case("r4p_output_names_dots", 5, om, expect="any", args="--output-dir r4p_dots.out --format pb")

# ---- kiln check: folders of hostile test cases ----
cm = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])])


def check_dir(name, files, cls=5, expect="err", args=""):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    onnx.save(cm, os.path.join(d, "model.onnx"))
    for rel, v in files.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        if isinstance(v, np.ndarray):
            with open(p, "wb") as f:
                f.write(numpy_helper.from_array(v).SerializeToString())
        elif isinstance(v, tuple) and v[0] == "link":
            os.symlink(v[1], p)
        elif isinstance(v, tuple) and v[0] == "fifo":
            os.mkfifo(p)
        else:
            with open(p, "wb") as f:
                f.write(v)
    rows.append((name, cls, expect, f"check {name} {args}".strip()))


a2 = np.array([1, -1], np.float32)
check_dir("r4k_control", {"test_data_set_0/input_0.pb": a2, "test_data_set_0/output_0.pb": np.maximum(a2, 0)},
          7, "ok")
check_dir("r4k_index_overflow", {"test_data_set_0/input_18446744073709551616.pb": a2,
                                 "test_data_set_0/output_0.pb": np.maximum(a2, 0)})
check_dir("r4k_index_neg", {"test_data_set_0/input_-1.pb": a2, "test_data_set_0/output_0.pb": np.maximum(a2, 0)})
check_dir("r4k_index_twice", {"test_data_set_0/input_0.pb": a2, "test_data_set_0/input_00.pb": a2 * 0,
                              "test_data_set_0/output_0.pb": np.maximum(a2, 0)}, 6)
check_dir("r4k_output_dtype", {"test_data_set_0/input_0.pb": a2,
                               "test_data_set_0/output_0.pb": np.array([1, 0], np.int64)}, 6)
check_dir("r4k_output_nan_expected", {"test_data_set_0/input_0.pb": a2,
                                      "test_data_set_0/output_0.pb": np.array([np.nan, 0], np.float32)}, 6)
check_dir("r4k_output_empty_huge", {"test_data_set_0/input_0.pb": a2,
                                    "test_data_set_0/output_0.pb": numpy_helper.from_array(
                                        np.zeros([0], np.float32)).SerializeToString().replace(b"\x08\x00", b"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x08", 1)}, 2)
check_dir("r4k_model_dir", {}, 5)
os.remove(os.path.join(OUT, "r4k_model_dir", "model.onnx"))
os.makedirs(os.path.join(OUT, "r4k_model_dir", "model.onnx"))
check_dir("r4k_dataset_socketlike_dev", {"test_data_set_0/input_0.pb": ("link", "/dev/null"),
                                         "test_data_set_0/output_0.pb": np.maximum(a2, 0)})
check_dir("r4k_dataset_link_inside", {"real/input_0.pb": a2, "real/output_0.pb": np.maximum(a2, 0),
                                      "test_data_set_0": ("link", "real")}, 5, "any")
check_dir("r4k_output_fifo", {"test_data_set_0/input_0.pb": a2, "test_data_set_0/output_0.pb": ("fifo",)}, 1)
check_dir("r4k_many_outputs_index", {"test_data_set_0/input_0.pb": a2, "test_data_set_0/output_0.pb": np.maximum(a2, 0),
                                     "test_data_set_0/output_1000000.pb": a2}, 6)
sets = {}
for k in range(300):
    sets[f"test_data_set_{k}/input_0.pb"] = a2
    sets[f"test_data_set_{k}/output_0.pb"] = np.maximum(a2, 0) if k != 257 else a2
check_dir("r4k_300_sets_one_wrong", sets, 6)
for i, a in enumerate(("--atol nan", "--rtol -1", "--rtol inf", "--atol -1e-3", "--rtol 1e", "--atol ''")):
    rows.append((f"r4c_check_{i:02d}", 11, "usage" if i != 2 else "any", f"check r4k_control {a}"))

# ---- CLI: bench, inspect, optimize options not tried before (class 11) ----
B = "bench r4_train.onnx --shape x=2x4"
for i, a in enumerate(("--iterations 0", "--iterations -1", "--iterations 99999999999999999999",
                       "--warmup -1", "--time nan", "--time -1", "--time inf", "--time 1e300", "--batch 0",
                       "--batch -5", "--seed x", "--profile --trace /nonexistent/t.json", "--shape x=2x4x",
                       "--shape x=2xx4", "--shape 'x=2 x4'", "--iterations 1e3", "--warmup 0x10")):
    rows.append((f"r4c_bench_{i:02d}", 11, "usage", f"{B} {a}"))
for i, a in enumerate(("inspect r4_train.onnx --dot /nonexistent/g.dot", "inspect r4_train.onnx --fold-limit -1",
                       "inspect r4_train.onnx --fold-limit 99999999999999999999", "optimize r4_train.onnx -o ''",
                       "optimize r4_train.onnx -o /nonexistent/o.onnx", "optimize r4_train.onnx -o r4p_ck_link",
                       "optimize r4_train.onnx", "info --json extra", "run r4_train.onnx --shape x=2x4 --output-dir /nonexistent/d",
                       "run r4_train.onnx --shape N=2", "run r4_train.onnx --shape x=2x4 --batch 3")):
    rows.append((f"r4c_misc_{i:02d}", 11, "usage", a))

with open(os.path.join(OUT, "probe.tsv"), "w") as f:
    for r in rows:
        f.write("\t".join(str(c) for c in r) + "\n")
print(len(rows), "cases")
