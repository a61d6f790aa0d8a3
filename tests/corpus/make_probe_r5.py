#!/usr/bin/env python3
"""Issue 20, round 5: FRESH hostile cases that make_probe.py, make_probe_r2.py,
make_probe_r3.py and make_probe_r4.py do not use: extreme and inconsistent attributes
of the index, signal and geometry ops (Resize, GridSample, RoiAlign, NonMaxSuppression,
TopK, Unique, CumSum, ScatterND, GatherND, Einsum, DFT, STFT, Col2Im, CenterCropPad,
AffineGrid, DepthToSpace, Trilu, OneHot, Range, EyeLike, Tile, MaxUnpool), external data
whose offset and length disagree with the file, initializers whose data disagrees with
their dims and dtype (float16, bfloat16, int4, strings), graph structure (cycles,
duplicate outputs, opset and domain oddities, subgraph scoping) and CLI numbers. Same
output as make_probe.py (a scratch folder and its probe.tsv), run by the same runner:

    .venv/bin/python tests/corpus/make_probe_r5.py OUTDIR
    tests/corpus/run_probe.sh KILN OUTDIR [CAP_KB] > RESULTS
    .venv/bin/python tests/corpus/probe_refcmp.py OUTDIR KILN RESULTS   # the cmp:ref oracle

The `cmp:ref` cases (r5v_) are valid models whose outputs probe_refcmp.py compares with
onnx.reference. Not part of the test suite: docs/fuzzing.md ("Round 5") has the results.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP, helper

from make_probe import init, vi
from probe_lib import Probe, fill_attr, model

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
F, I64, I32, U8, BOOL = TP.FLOAT, TP.INT64, TP.INT32, TP.UINT8, TP.BOOL
IMAX, IMIN = 2**63 - 1, -2**63
P = Probe(OUT)
rows = P.rows
case, gen_case, one = P.case, P.gen_case, P.one
N = helper.make_node
y = [vi("y", None)]
yi = [vi("y", None, I64)]
f32 = lambda *s: init("x", np.arange(int(np.prod(s)), dtype=np.float32).reshape(s))
i64 = lambda n, v: init(n, np.array(v, np.int64))

# ---- index ops: axes, sizes and indices at the edges (classes 2, 3, 6) ----
x234 = f32(2, 3, 4)
for ax in (3, -4, IMAX, IMIN):
    one(f"r5a_topk_axis_{ax}", 3, N("TopK", ["x", "k"], ["y", "i"], axis=ax), [], [vi("y", None), vi("i", None, I64)], [x234, i64("k", [1])])
    one(f"r5a_cumsum_axis_{ax}", 3, N("CumSum", ["x", "a"], ["y"]), [], y, [x234, i64("a", ax)])
    one(f"r5a_unique_axis_{ax}", 3, N("Unique", ["x"], ["y"], axis=ax), [], y, [x234])
    one(f"r5a_onehot_axis_{ax}", 3, N("OneHot", ["i", "d", "v"], ["y"], axis=ax), [], y,
        [i64("i", [0, 1]), i64("d", [3]), init("v", np.array([0, 1], np.float32))])
    one(f"r5a_gatherelements_axis_{ax}", 3, N("GatherElements", ["x", "i"], ["y"], axis=ax), [], y,
        [x234, init("i", np.zeros([2, 3, 4], np.int64))])
    one(f"r5a_scatterelements_axis_{ax}", 3, N("ScatterElements", ["x", "i", "x"], ["y"], axis=ax), [], y,
        [x234, init("i", np.zeros([2, 3, 4], np.int64))])
    one(f"r5a_compress_axis_{ax}", 3, N("Compress", ["x", "c"], ["y"], axis=ax), [], y,
        [x234, init("c", np.array([True, False]))])
    one(f"r5a_lpnorm_axis_{ax}", 3, N("LpNormalization", ["x"], ["y"], axis=ax), [], y, [x234])
    one(f"r5a_hardmax_axis_{ax}", 3, N("Hardmax", ["x"], ["y"], axis=ax), [], y, [x234])
    one(f"r5a_argmax_axis_{ax}", 3, N("ArgMax", ["x"], ["y"], axis=ax), [], yi, [x234])
for k in (-1, 25, IMAX, IMIN):
    one(f"r5a_topk_k_{k}", 3, N("TopK", ["x", "k"], ["y", "i"], axis=-1), [], [vi("y", None), vi("i", None, I64)], [x234, i64("k", [k])])
one("r5a_topk_k_0", 3, N("TopK", ["x", "k"], ["y", "i"]), [], [vi("y", None), vi("i", None, I64)], [x234, i64("k", [0])], expect="ok")
one("r5a_topk_k_rank2", 3, N("TopK", ["x", "k"], ["y", "i"]), [], [vi("y", None), vi("i", None, I64)], [x234, i64("k", [[1]])])
one("r5a_topk_k_two", 3, N("TopK", ["x", "k"], ["y", "i"]), [], [vi("y", None), vi("i", None, I64)], [x234, i64("k", [1, 2])])
one("r5a_topk_k_input", 3, N("TopK", ["x", "k"], ["y", "i"]), [vi("k", [1], I64)], [vi("y", None), vi("i", None, I64)], [x234],
    inputs={"k": np.array([IMAX], np.int64)})
# ScatterND / GatherND
for nm, idx, upd in (("idx_past", [[5]], [[1, 2, 3, 4] * 3]), ("idx_neg_big", [[IMIN]], np.ones([1, 3, 4])),
                     ("idx_last_too_long", [[0, 0, 0, 0]], np.ones([1])), ("updates_wrong", [[0]], np.ones([1, 3, 5])),
                     ("idx_scalar", 0, np.ones([3, 4])), ("idx_empty_last", np.zeros([1, 0], np.int64), np.ones([1, 2, 3, 4]))):
    one(f"r5a_scatternd_{nm}", 3, N("ScatterND", ["x", "i", "u"], ["y"]), [], y,
        [x234, init("i", np.array(idx, np.int64)), init("u", np.array(upd, np.float32))])
one("r5a_scatternd_dup_mul", 6, N("ScatterND", ["x", "i", "u"], ["y"], reduction="mul"), [], y,
    [x234, init("i", np.array([[0], [0]], np.int64)), init("u", np.ones([2, 3, 4], np.float32))], expect="ok")
one("r5a_scatternd_reduction_bad", 3, N("ScatterND", ["x", "i", "u"], ["y"], reduction="div"), [], y,
    [x234, init("i", np.array([[0]], np.int64)), init("u", np.ones([1, 3, 4], np.float32))])
for nm, idx, bd in (("past", [[2]], 0), ("neg_big", [[IMIN]], 0), ("too_long", [[0, 0, 0, 0]], 0),
                    ("batch_dims_3", [[0]], 3), ("batch_dims_neg", [[0]], -1), ("batch_dims_max", [[0]], IMAX),
                    ("batch_mismatch", np.zeros([3, 1], np.int64), 1), ("idx_scalar", 0, 0)):
    one(f"r5a_gathernd_{nm}", 3, N("GatherND", ["x", "i"], ["y"], batch_dims=bd), [], y,
        [x234, init("i", np.array(idx, np.int64))])
one("r5a_gathernd_empty_last", 3, N("GatherND", ["x", "i"], ["y"]), [], y,
    [x234, init("i", np.zeros([5, 0], np.int64))], expect="ok")
# Einsum
for i, eq in enumerate(("abc,abc->", "abc->abcd", "...a->...b", "a...b...->", "abc->aa", "ab,bc->ac",
                        "aaa->a", "abc->", "->", "A" * 60 + "->", "abc,->", "a b c->abc", "abc->cba,", "abc-->",
                        "ABC->CBA", "...->...", "a.c->a", "abc->\u00e9", ",->", "abcdefghijklmnopqrstuvwxyz->")):
    one(f"r5a_einsum_{i:02d}", 3, N("Einsum", ["x"], ["y"], equation=eq), [], y, [x234], expect="any")
one("r5a_einsum_k_huge", 1, N("Einsum", ["a", "a"], ["y"], equation="ij,kl->ijkl"), [], y,
    [init("a", np.ones([3000, 3000], np.float32))])
# Trilu, DepthToSpace, SpaceToDepth, Tile, EyeLike, Range, CenterCropPad
for k in (IMAX, IMIN, -5, 100):
    one(f"r5a_trilu_k_{k}", 3, N("Trilu", ["x", "k"], ["y"]), [], y, [x234, i64("k", k)], expect="ok")
for bs in (0, -1, 3, 2**32, IMAX):
    one(f"r5a_depthtospace_{bs}", 3, N("DepthToSpace", ["x"], ["y"], blocksize=bs), [], y, [f32(1, 4, 2, 2)])
    one(f"r5a_spacetodepth_{bs}", 3, N("SpaceToDepth", ["x"], ["y"], blocksize=bs), [], y, [f32(1, 4, 2, 2)])
one("r5a_depthtospace_mode_bad", 3, N("DepthToSpace", ["x"], ["y"], blocksize=2, mode="XYZ"), [], y, [f32(1, 4, 2, 2)])
for nm, r in (("neg", [1, -1, 1]), ("huge", [1, 2**40, 2**40]), ("overflow", [2**31, 2**31, 2**31]),
              ("zero", [0, 1, 1]), ("short", [1, 1])):
    one(f"r5a_tile_{nm}", 3, N("Tile", ["x", "r"], ["y"]), [], y, [x234, i64("r", r)], expect="ok" if nm == "zero" else "err")
for k in (IMAX, IMIN, 5):
    one(f"r5a_eyelike_k_{k}", 3, N("EyeLike", ["x"], ["y"], k=k), [], y, [f32(3, 4)], expect="ok")
one("r5a_eyelike_rank3", 3, N("EyeLike", ["x"], ["y"]), [], y, [x234])
one("r5a_eyelike_dtype_bad", 3, N("EyeLike", ["x"], ["y"], dtype=99), [], y, [f32(3, 4)])
for nm, s, l, d in (("delta0", 0, 10, 0), ("overflow", IMIN, IMAX, 1), ("huge", 0, 2**40, 1),
                    ("neg_delta_huge", IMAX, IMIN, -1), ("min_delta", 0, 1, IMIN)):
    one(f"r5a_range_{nm}", 1, N("Range", ["s", "l", "d"], ["y"]), [], yi, [i64("s", s), i64("l", l), i64("d", d)])
for nm, v in (("nan", np.nan), ("inf", np.inf)):
    one(f"r5a_range_f_{nm}", 1, N("Range", ["s", "l", "d"], ["y"]), [], y,
        [init("s", np.float32(0)), init("l", np.float32(v)), init("d", np.float32(1))])
one("r5a_range_f_tiny_delta", 1, N("Range", ["s", "l", "d"], ["y"]), [], y,
    [init("s", np.float32(0)), init("l", np.float32(1e30)), init("d", np.float32(1e-30))])
for nm, sh, ax in (("neg", [-1, 2], None), ("huge", [2**40, 2**40], None), ("axes_dup", [2, 2], [0, 0]),
                   ("axes_oob", [2, 2], [0, 7]), ("len_mismatch", [2, 2, 2], [0, 1]), ("zero", [0, 0, 0], None)):
    kw = {} if ax is None else {"axes": ax}
    one(f"r5a_centercroppad_{nm}", 3, N("CenterCropPad", ["x", "s"], ["y"], **kw), [], y, [x234, i64("s", sh)],
        expect="ok" if nm == "zero" else "err")
# MaxUnpool
one("r5a_maxunpool_idx_past", 3, N("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), [], y,
    [f32(1, 1, 2, 2), init("i", np.array([[[[0, 1], [2, 999]]]], np.int64))])
one("r5a_maxunpool_idx_neg", 3, N("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), [], y,
    [f32(1, 1, 2, 2), init("i", np.array([[[[0, 1], [2, -3]]]], np.int64))])
one("r5a_maxunpool_outshape_small", 3, N("MaxUnpool", ["x", "i", "o"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), [], y,
    [f32(1, 1, 2, 2), init("i", np.zeros([1, 1, 2, 2], np.int64)), i64("o", [1, 1, 1, 1])])
one("r5a_maxunpool_outshape_huge", 1, N("MaxUnpool", ["x", "i", "o"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), [], y,
    [f32(1, 1, 2, 2), init("i", np.zeros([1, 1, 2, 2], np.int64)), i64("o", [1, 1, 2**31, 2**31])])

# ---- geometry and signal ops ----
x4 = f32(1, 1, 4, 4)
for nm, sc in (("zero", [1, 1, 0, 0]), ("neg", [1, 1, -2, 2]), ("nan", [1, 1, np.nan, 2]), ("inf", [1, 1, np.inf, 2]),
               ("huge", [1, 1, 1e9, 1e9]), ("tiny", [1, 1, 1e-30, 1e-30]), ("short", [2, 2]), ("batch", [1e6, 1, 1, 1])):
    one(f"r5g_resize_scales_{nm}", 3, N("Resize", ["x", "", "s"], ["y"], mode="linear"), [], y,
        [x4, init("s", np.array(sc, np.float32))])
for nm, sz in (("zero", [1, 1, 0, 0]), ("neg", [1, 1, -4, 4]), ("huge", [1, 1, 2**31, 2**31]), ("overflow", [2**40, 2**40, 2**40, 2**40]),
               ("short", [4])):
    one(f"r5g_resize_sizes_{nm}", 3, N("Resize", ["x", "", "", "s"], ["y"]), [], y, [x4, i64("s", sz)])
for nm, kw, sz in (("keep_bad", dict(keep_aspect_ratio_policy="huge"), [4, 4]), ("axes_dup", dict(axes=[2, 2]), [4, 4]),
                   ("axes_oob", dict(axes=[2, 9]), [4, 4]), ("keep_larger_huge", dict(axes=[2, 3], keep_aspect_ratio_policy="not_larger"), [2**40, 1]),
                   ("cubic_a_nan", dict(mode="cubic", cubic_coeff_a=float("nan")), [1, 1, 8, 8]),
                   ("antialias_down_huge", dict(mode="linear", antialias=1), [1, 1, 1, 1]),
                   ("tf_crop_no_roi", dict(coordinate_transformation_mode="tf_crop_and_resize"), [1, 1, 8, 8]),
                   ("ctm_bad", dict(coordinate_transformation_mode="bogus"), [1, 1, 8, 8])):
    one(f"r5g_resize_{nm}", 3, N("Resize", ["x", "", "", "s"], ["y"], **kw), [], y, [x4, i64("s", sz)],
        expect="ok" if nm in ("antialias_down_huge",) else "any")
one("r5g_resize_roi_nan", 3, N("Resize", ["x", "r", "", "s"], ["y"], coordinate_transformation_mode="tf_crop_and_resize"), [], y,
    [x4, init("r", np.array([0, 0, np.nan, 0, 1, 1, np.inf, 1], np.float32)), i64("s", [1, 1, 8, 8])], expect="any")
one("r5g_resize_roi_short", 3, N("Resize", ["x", "r", "", "s"], ["y"], coordinate_transformation_mode="tf_crop_and_resize"), [], y,
    [x4, init("r", np.array([0, 1], np.float32)), i64("s", [1, 1, 8, 8])])
# GridSample: grid of wrong shape, NaN/inf coordinates, modes
for nm, g, kw in (("grid_rank3", np.zeros([1, 4, 2], np.float32), {}), ("grid_last3", np.zeros([1, 4, 4, 3], np.float32), {}),
                  ("grid_batch2", np.zeros([2, 4, 4, 2], np.float32), {}),
                  ("grid_nan", np.full([1, 2, 2, 2], np.nan, np.float32), {}),
                  ("grid_inf", np.full([1, 2, 2, 2], np.inf, np.float32), dict(padding_mode="reflection")),
                  ("grid_huge_reflect", np.full([1, 2, 2, 2], 3e38, np.float32), dict(padding_mode="reflection")),
                  ("grid_huge_border_cubic", np.full([1, 2, 2, 2], -3e38, np.float32), dict(mode="cubic", padding_mode="border")),
                  ("grid_nan_cubic", np.full([1, 2, 2, 2], np.nan, np.float32), dict(mode="cubic")),
                  ("mode_bad", np.zeros([1, 2, 2, 2], np.float32), dict(mode="bilinear2")),
                  ("pad_bad", np.zeros([1, 2, 2, 2], np.float32), dict(padding_mode="wrap"))):
    one(f"r5g_gridsample_{nm}", 3, N("GridSample", ["x", "g"], ["y"], **kw), [], y, [x4, init("g", g)],
        expect="ok" if nm.startswith("grid_nan") or nm.startswith("grid_inf") or nm.startswith("grid_huge") else "err")
one("r5g_gridsample_empty_input_hw", 3, N("GridSample", ["x", "g"], ["y"]), [], y,
    [f32(1, 1, 0, 4), init("g", np.zeros([1, 2, 2, 2], np.float32))], expect="any")
# AffineGrid
for nm, th, sz in (("size_neg", np.zeros([1, 2, 3]), [1, 1, -2, 2]), ("size_huge", np.zeros([1, 2, 3]), [1, 1, 2**31, 2**31]),
                   ("theta_3d_size_2d", np.zeros([1, 3, 4]), [1, 1, 2, 2]), ("batch_mismatch", np.zeros([2, 2, 3]), [1, 1, 2, 2]),
                   ("size_len3", np.zeros([1, 2, 3]), [1, 1, 2]), ("size_zero", np.zeros([1, 2, 3]), [1, 1, 0, 0])):
    one(f"r5g_affinegrid_{nm}", 3, N("AffineGrid", ["t", "s"], ["y"]), [], y,
        [init("t", th.astype(np.float32)), i64("s", sz)], expect="any" if nm == "size_zero" else "err")
# RoiAlign
rois = lambda v: init("r", np.array(v, np.float32))
for nm, r, bi, kw in (("batch_idx_past", [[0, 0, 2, 2]], [5], {}), ("batch_idx_neg", [[0, 0, 2, 2]], [-1], {}),
                      ("roi_nan", [[np.nan, 0, 2, 2]], [0], {}), ("roi_inf", [[0, 0, np.inf, np.inf]], [0], {}),
                      ("roi_huge", [[-3e38, -3e38, 3e38, 3e38]], [0], dict(sampling_ratio=0)),
                      ("ratio_huge", [[0, 0, 2, 2]], [0], dict(sampling_ratio=2**40)),
                      ("out_huge", [[0, 0, 2, 2]], [0], dict(output_height=2**31, output_width=2**31)),
                      ("out_zero", [[0, 0, 2, 2]], [0], dict(output_height=0)),
                      ("scale_nan", [[0, 0, 2, 2]], [0], dict(spatial_scale=float("nan"))),
                      ("rois_cols5", [[0, 0, 2, 2, 9]], [0], {}), ("count_mismatch", [[0, 0, 2, 2]], [0, 0], {}),
                      ("mode_bad", [[0, 0, 2, 2]], [0], dict(mode="min"))):
    exp = "ok" if nm in ("roi_nan", "roi_inf") else "err"
    one(f"r5g_roialign_{nm}", 3, N("RoiAlign", ["x", "r", "b"], ["y"], **kw), [], y,
        [x4, rois(r), i64("b", bi)], expect=exp)
one("r5g_roialign_sampling_work", 1, N("RoiAlign", ["x", "r", "b"], ["y"], sampling_ratio=0, output_height=64, output_width=64), [], y,
    [x4, rois([[-1e7, -1e7, 1e7, 1e7]] * 64), i64("b", [0] * 64)])
# NonMaxSuppression
boxes = lambda n: init("bx", np.tile(np.array([0, 0, 1, 1], np.float32), (1, n, 1)))
for nm, b, sc, mx, kw in (("scores_batch_mismatch", boxes(3), np.ones([2, 1, 3]), 10, {}),
                          ("scores_count_mismatch", boxes(3), np.ones([1, 1, 4]), 10, {}),
                          ("boxes_cols5", init("bx", np.zeros([1, 3, 5], np.float32)), np.ones([1, 1, 3]), 10, {}),
                          ("max_neg", boxes(3), np.ones([1, 1, 3]), -1, {}), ("max_huge", boxes(3), np.ones([1, 1, 3]), IMAX, {}),
                          ("scores_nan", boxes(3), np.full([1, 1, 3], np.nan), 10, {}),
                          ("center_bad", boxes(3), np.ones([1, 1, 3]), 10, dict(center_point_box=7)),
                          ("many_boxes", boxes(20000), np.ones([1, 1, 20000]), IMAX, {})):
    exp = "err" if nm in ("scores_batch_mismatch", "scores_count_mismatch", "boxes_cols5", "center_bad") else "any"
    one(f"r5g_nms_{nm}", 3, N("NonMaxSuppression", ["bx", "s", "m"], ["y"], **kw), [], yi,
        [b, init("s", sc.astype(np.float32)), i64("m", [mx])], expect=exp)
one("r5g_nms_iou_nan", 3, N("NonMaxSuppression", ["bx", "s", "m", "iou"], ["y"]), [], yi,
    [boxes(3), init("s", np.ones([1, 1, 3], np.float32)), i64("m", [3]), init("iou", np.array([np.nan], np.float32))], expect="any")
one("r5g_nms_many_classes", 1, N("NonMaxSuppression", ["bx", "s", "m"], ["y"]), [], yi,
    [boxes(4), init("s", np.ones([1, 4096, 4], np.float32)), i64("m", [IMAX])], expect="ok")
# DFT / STFT / Col2Im / windows
sig = init("x", np.ones([1, 16, 1], np.float32))
for nm, ax, dl, kw in (("axis_0", 0, None, {}), ("axis_oob", 5, None, {}), ("axis_last", -1, None, {}),
                       ("len_zero", 1, 0, {}), ("len_neg", 1, -4, {}), ("len_huge", 1, 2**40, {}),
                       ("inverse_onesided", 1, None, dict(inverse=1, onesided=1)), ("len_prime_big", 1, 1000003, {})):
    ins = ["x", "dl" if dl is not None else "", "ax"]
    inits = [sig, i64("ax", ax)] + ([i64("dl", dl)] if dl is not None else [])
    one(f"r5g_dft_{nm}", 3, N("DFT", ins, ["y"], **kw), [], y, inits,
        expect="any" if nm in ("inverse_onesided", "len_prime_big") else "err")
sig2 = init("x", np.ones([1, 64], np.float32))
for nm, st, win, fl in (("step_zero", 0, None, 16), ("step_neg", -1, None, 16), ("step_huge", IMAX, None, 16),
                        ("frame_zero", 4, None, 0), ("frame_past", 4, None, 100), ("frame_neg", 4, None, -16),
                        ("window_len_mismatch", 4, np.ones([8], np.float32), 16), ("window_only_huge", 4, np.ones([65], np.float32), None)):
    ins = ["x", "st", "w" if win is not None else "", "fl" if fl is not None else ""]
    inits = [sig2, i64("st", st)] + ([init("w", win)] if win is not None else []) + ([i64("fl", fl)] if fl is not None else [])
    one(f"r5g_stft_{nm}", 3, N("STFT", ins, ["y"]), [], y, inits)
for nm, im, bl, kw in (("block_zero", [4, 4], [0, 2], {}), ("block_huge", [4, 4], [2**31, 2**31], {}),
                       ("image_neg", [-4, 4], [2, 2], {}), ("channels_indivisible", [4, 4], [3, 3], {}),
                       ("dilation_huge", [4, 4], [2, 2], dict(dilations=[2**40, 1])), ("stride_zero", [4, 4], [2, 2], dict(strides=[0, 1])),
                       ("pads_neg", [4, 4], [2, 2], dict(pads=[-10, 0, 0, 0])), ("len_mismatch", [4, 4, 4], [2, 2], {})):
    one(f"r5g_col2im_{nm}", 3, N("Col2Im", ["x", "im", "bl"], ["y"], **kw), [], y,
        [init("x", np.ones([1, 4, 9], np.float32)), i64("im", im), i64("bl", bl)])
for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
    for nm, n in (("neg", -5), ("zero", 0), ("huge", 2**40)):
        one(f"r5g_{op.lower()}_{nm}", 1, N(op, ["n"], ["y"]), [], y, [i64("n", n)], expect="ok" if nm == "zero" else "err")
one("r5g_melweight_bins_huge", 1, N("MelWeightMatrix", ["a", "b", "c", "d", "e"], ["y"]), [], y,
    [i64("a", 2**20), i64("b", 2**31), i64("c", 16000), init("d", np.float32(0)), init("e", np.float32(8000))])
one("r5g_melweight_freq_inverted", 3, N("MelWeightMatrix", ["a", "b", "c", "d", "e"], ["y"]), [], y,
    [i64("a", 8), i64("b", 64), i64("c", 16000), init("d", np.float32(8000)), init("e", np.float32(0))], expect="any")
one("r5g_melweight_rate_zero", 3, N("MelWeightMatrix", ["a", "b", "c", "d", "e"], ["y"]), [], y,
    [i64("a", 8), i64("b", 64), i64("c", 0), init("d", np.float32(0)), init("e", np.float32(8000))], expect="any")

# ---- initializers whose data disagrees with dims and dtype (classes 3, 6) ----
def tp(name, dt, dims, raw=None, **fields):
    t = onnx.TensorProto(); t.name = name; t.data_type = dt; t.dims.extend(dims)
    if raw is not None:
        t.raw_data = raw
    for k, v in fields.items():
        getattr(t, k).extend(v)
    return t


def idm(t, name, out_t=None, expect="err", cast=None):
    nodes = [N("Identity", ["w"], ["y"])] if cast is None else [N("Cast", ["w"], ["y"], to=cast)]
    case(name, 3, model(nodes, [], [vi("y", None, out_t if out_t is not None else t.data_type)], [t]), expect)


H, BF, I4, U4, STR, C64 = TP.FLOAT16, TP.BFLOAT16, TP.INT4, TP.UINT4, TP.STRING, TP.COMPLEX64
idm(tp("w", H, [3], raw=b"\0" * 5), "r5t_f16_raw_odd", F, cast=F)
idm(tp("w", H, [3], int32_data=[1, 2]), "r5t_f16_int32_short", F, cast=F)
idm(tp("w", H, [2], int32_data=[0x10000, 70000]), "r5t_f16_int32_over16bits", F, cast=F, expect="any")
idm(tp("w", BF, [2], raw=b"\0" * 6), "r5t_bf16_raw_long", F, cast=F)
idm(tp("w", BF, [4], int32_data=[1]), "r5t_bf16_int32_short", F, cast=F)
idm(tp("w", I4, [3], raw=b"\x11"), "r5t_int4_raw_short", F, cast=F)
idm(tp("w", I4, [3], raw=b"\x11\x11\x11"), "r5t_int4_raw_long", F, cast=F)
idm(tp("w", I4, [3], raw=b"\x11\x01"), "r5t_int4_raw_ok", F, cast=F, expect="ok")
idm(tp("w", U4, [1], int32_data=[300]), "r5t_uint4_int32_300", F, cast=F, expect="any")
idm(tp("w", I4, [2**62], raw=b""), "r5t_int4_dims_huge", F, cast=F)
idm(tp("w", STR, [2], string_data=[b"a"]), "r5t_string_short", STR)
idm(tp("w", STR, [1], string_data=[b"a" * 100000]), "r5t_string_cast", F, cast=F)
idm(tp("w", C64, [2], raw=b"\0" * 16), "r5t_complex64", C64)
idm(tp("w", 99, [2], raw=b"\0" * 8), "r5t_dtype_99", F)
idm(tp("w", 0, [2], raw=b"\0" * 8), "r5t_dtype_undefined", F)
idm(tp("w", F, [2], raw=b"\0" * 8, float_data=[1, 2]), "r5t_raw_and_float_data", F, expect="any")
idm(tp("w", F, [2, -1], raw=b""), "r5t_dims_neg", F)
idm(tp("w", F, [IMAX, 0], raw=b""), "r5t_dims_max_zero", F, expect="any")
idm(tp("w", F, [2**32, 2**32], raw=b""), "r5t_dims_overflow", F)
idm(tp("w", F, [2], int64_data=[1, 2]), "r5t_float_in_int64_data", F)
idm(tp("w", I64, [2], float_data=[1, 2]), "r5t_int64_in_float_data", I64)
idm(tp("w", BOOL, [3], int32_data=[1, 0, 7]), "r5t_bool_int32_7", BOOL, expect="any")
idm(tp("w", TP.DOUBLE, [2], raw=b"\0" * 12), "r5t_double_raw_12", TP.DOUBLE)
idm(tp("w", TP.FLOAT8E4M3FN, [2], raw=b"\x7f\xff"), "r5t_f8_nan_cast", F, cast=F, expect="any")
idm(tp("w", TP.UINT64, [2], uint64_data=[2**64 - 1]), "r5t_uint64_short", TP.UINT64)
# segments, sparse initializers
t = tp("w", F, [4], raw=b"\0" * 16); t.segment.begin = 0; t.segment.end = 2
idm(t, "r5t_segment", F, expect="any")
m = model([N("Identity", ["w"], ["y"])], [], y)
sp = onnx.SparseTensorProto(); sp.dims.extend([4, 4])
sp.values.CopyFrom(tp("w", F, [2], float_data=[1, 2])); sp.indices.CopyFrom(tp("i", I64, [2], int64_data=[3, 99]))
m.graph.sparse_initializer.append(sp)
case("r5t_sparse_index_past", 3, m)
sp.indices.CopyFrom(tp("i", I64, [2], int64_data=[-1, 3])); case("r5t_sparse_index_neg", 3, m)
sp.indices.CopyFrom(tp("i", I64, [2, 2], int64_data=[0, 0, 9, 9])); case("r5t_sparse_coord_past", 3, m)

# ---- external data: offset and length against the file (class 5) ----
with open(os.path.join(OUT, "w8.bin"), "wb") as f:
    f.write(np.ones([2], np.float32).tobytes())
with open(os.path.join(OUT, "empty.bin"), "wb") as f:
    pass


def ext(name, location, offset=None, length=None, dims=(2,), extra=(), expect="err", init2=False):
    def one_t(nm):
        t = onnx.TensorProto(); t.name = nm; t.data_type = F; t.dims.extend(dims)
        t.data_location = onnx.TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", offset), ("length", length)) + tuple(extra):
            if v is not None:
                e = t.external_data.add(); e.key = k; e.value = str(v)
        return t
    inits = [one_t("w")] + ([one_t("w2")] if init2 else [])
    nodes = [N("Add", ["w", "w2" if init2 else "w"], ["y"])]
    case(name, 5, model(nodes, [], y, inits), expect)


ext("r5e_offset_plus_length_past", "w8.bin", 4, 8)
ext("r5e_offset_past_end", "w8.bin", 9, None)
ext("r5e_offset_at_end_len0", "w8.bin", 8, 0, dims=(0,), expect="ok")
ext("r5e_length_zero_dims2", "w8.bin", 0, 0)
ext("r5e_length_short", "w8.bin", 0, 4)
ext("r5e_length_long_in_file", "w8.bin", 0, 8, dims=(1,))
ext("r5e_offset_overflow", "w8.bin", IMAX, 8)
ext("r5e_offset_u64_wrap", "w8.bin", 2**64 - 4, 8)
ext("r5e_offset_plus_len_wrap", "w8.bin", 8, 2**64 - 8)
ext("r5e_overlap_ok", "w8.bin", 0, 8, init2=True, expect="ok")
ext("r5e_offset_unaligned", "w8.bin", 1, 4, dims=(1,), expect="ok")
ext("r5e_empty_file", "empty.bin", None, None)
ext("r5e_empty_file_dims0", "empty.bin", None, None, dims=(0,), expect="ok")
ext("r5e_location_empty", "", None, None)
ext("r5e_location_dot", ".", None, None)
ext("r5e_location_abs_self", os.path.abspath(os.path.join(OUT, "w8.bin")), None, None, expect="any")
ext("r5e_location_proc", "/proc/self/mem", 0, 8)
ext("r5e_location_dev_zero", "/dev/zero", 0, 8)
ext("r5e_location_trailing_slash", "w8.bin/", None, None)
ext("r5e_location_dotdot_only", "..", None, None)
ext("r5e_location_model_itself", "r5e_location_model_itself.onnx", 0, 8, expect="any")
ext("r5e_offset_plus", "w8.bin", "+0", 8, expect="any")
ext("r5e_offset_spaces", "w8.bin", " 0", 8, expect="any")
ext("r5e_offset_hex", "w8.bin", "0x0", 8)
ext("r5e_length_float", "w8.bin", 0, "8.0")
ext("r5e_offset_empty", "w8.bin", "", 8)
ext("r5e_unknown_key", "w8.bin", None, None, extra=[("basepath", "/etc")], expect="any")
ext("r5e_length_twice", "w8.bin", 0, 8, extra=[("length", "4")])
ext("r5e_dims_huge_file_small", "w8.bin", None, None, dims=(2**40,))
os.symlink("w8.bin", os.path.join(OUT, "w8_link.bin"))
ext("r5e_symlink_inside", "w8_link.bin", None, None, expect="any")
os.makedirs(os.path.join(OUT, "ed"), exist_ok=True)
ext("r5e_location_subdir_dotdot_back", "ed/../w8.bin", None, None, expect="any")

# ---- graph structure (classes 3, 6) ----
case("r5s_cycle_two", 3, model([N("Relu", ["b"], ["a"]), N("Relu", ["a"], ["b"])], [], [vi("a", None)]))
case("r5s_self_loop", 3, model([N("Add", ["a", "a"], ["a"])], [], [vi("a", None)]))
case("r5s_cycle_via_input", 3, model([N("Add", ["x", "b"], ["a"]), N("Relu", ["a"], ["b"])], [vi("x", [2])], [vi("b", None)]))
case("r5s_dup_output_names", 3, model([N("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", None), vi("y", None)]))
case("r5s_two_nodes_same_output", 3, model([N("Relu", ["x"], ["y"]), N("Neg", ["x"], ["y"])], [vi("x", [2])], y))
case("r5s_node_out_twice", 3, model([N("Split", ["x"], ["y", "y"], num_outputs=2)], [vi("x", [2])], y))
case("r5s_output_is_input", 3, model([], [vi("x", [2])], [vi("x", [2])]), inputs={"x": np.ones([2], np.float32)}, expect="ok")
case("r5s_output_is_init", 3, model([], [], [vi("w", [2])], [init("w", np.ones([2], np.float32))]), expect="ok")
case("r5s_input_is_init_and_output", 3, model([N("Relu", ["w"], ["y"])], [vi("w", [2])], y, [init("w", np.ones([2], np.float32))]), expect="ok")
case("r5s_output_undefined", 3, model([N("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("z", None)]))
case("r5s_init_twice", 3, model([N("Relu", ["w"], ["y"])], [], y, [init("w", np.ones([2], np.float32)), init("w", np.ones([3], np.float32))]))
case("r5s_input_twice", 3, model([N("Relu", ["x"], ["y"])], [vi("x", [2]), vi("x", [3])], y))
case("r5s_node_output_shadows_init", 3, model([N("Relu", ["x"], ["w"])], [vi("x", [2])], [vi("w", None)], [init("w", np.ones([2], np.float32))]))
case("r5s_empty_name_output", 3, model([N("Relu", ["x"], [""])], [vi("x", [2])], y))
case("r5s_output_empty_name", 3, model([N("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("", None)]))
case("r5s_no_outputs", 3, model([N("Relu", ["x"], ["y"])], [vi("x", [2])], []))
for nm, ops, ir in (("opset_0", 0, 10), ("opset_1", 1, 10), ("opset_huge", 2**62, 10), ("opset_neg", -1, 10), ("ir_0", 21, 0),
                    ("ir_huge", 21, 2**40)):
    case(f"r5s_{nm}", 3, model([N("Relu", ["x"], ["y"])], [vi("x", [2])], y, opset=ops, ir=ir),
         inputs={"x": np.ones([2], np.float32)}, expect="any")
m = model([N("Relu", ["x"], ["y"])], [vi("x", [2])], y); m.opset_import.append(helper.make_opsetid("", 13))
case("r5s_default_domain_twice", 3, m, inputs={"x": np.ones([2], np.float32)}, expect="any")
m = model([N("Relu", ["x"], ["y"])], [vi("x", [2])], y); del m.opset_import[:]
case("r5s_no_opset", 3, m, inputs={"x": np.ones([2], np.float32)})
case("r5s_op_in_unknown_domain", 3, model([N("Relu", ["x"], ["y"], domain="com.evil")], [vi("x", [2])], y, domains=["com.evil"]))
case("r5s_op_domain_not_imported", 3, model([N("Relu", ["x"], ["y"], domain="com.microsoft")], [vi("x", [2])], y))
case("r5s_kiln_op_default_domain", 3, model([N("FusedGemm", ["x", "x"], ["y"])], [vi("x", [2, 2])], y))
m = model([N("F", ["x"], ["y"], domain="local")], [vi("x", [2])], y, domains=["local"])
fn = helper.make_function("local", "F", ["a"], ["b"], [N("F", ["a"], ["b"], domain="local")], [helper.make_opsetid("", 21)])
m.functions.append(fn)
case("r5s_function_recursive", 3, m, inputs={"x": np.ones([2], np.float32)})
m = model([N("G", ["x"], ["y"], domain="local")], [vi("x", [2])], y, domains=["local"])
m.functions.append(helper.make_function("local", "G", ["a"], ["b"], [N("Relu", ["a"], ["b"])], [helper.make_opsetid("", 21)]))
case("r5s_function_simple", 3, m, inputs={"x": np.ones([2], np.float32)}, expect="any")
# value_info lies
m = model([N("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [3])])
case("r5s_output_shape_lie", 3, m, inputs={"x": np.ones([2], np.float32)})
m = model([N("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2], I64)])
case("r5s_output_dtype_lie", 3, m, inputs={"x": np.ones([2], np.float32)})
m = model([N("Relu", ["x"], ["t"]), N("Relu", ["t"], ["y"])], [vi("x", [2])], y)
m.graph.value_info.append(vi("t", [2**40]))
case("r5s_value_info_lie", 3, m, inputs={"x": np.ones([2], np.float32)}, expect="any")

# subgraphs: scoping
def body(nodes, outs, ins=()):
    return helper.make_graph(nodes, "b", list(ins), outs)


c = init("c", np.array(True))
th = body([N("Relu", ["inner"], ["o"])], [vi("o", None)])
el = body([N("Neg", ["x"], ["o"])], [vi("o", None)])
case("r5s_if_uses_other_branch_name", 3, model([N("Relu", ["x"], ["r"]), N("If", ["c"], ["y"], then_branch=body([N("Relu", ["x"], ["inner"]), N("Identity", ["inner"], ["o"])], [vi("o", None)]), else_branch=body([N("Identity", ["inner"], ["o"])], [vi("o", None)]))],
                                               [vi("x", [2])], y, [c]), inputs={"x": np.ones([2], np.float32)})
case("r5s_if_uses_later_outer", 3, model([N("If", ["c"], ["y"], then_branch=body([N("Identity", ["late"], ["o"])], [vi("o", None)]), else_branch=el), N("Relu", ["x"], ["late"])],
                                         [vi("x", [2])], y, [c]), inputs={"x": np.ones([2], np.float32)})
case("r5s_if_output_count_mismatch", 3, model([N("If", ["c"], ["y"], then_branch=body([N("Relu", ["x"], ["o"]), N("Relu", ["x"], ["o2"])], [vi("o", None), vi("o2", None)]), else_branch=el)],
                                              [vi("x", [2])], y, [c]), inputs={"x": np.ones([2], np.float32)})
case("r5s_if_branch_defines_outer_name", 3, model([N("Relu", ["x"], ["r"]), N("If", ["c"], ["y"], then_branch=body([N("Neg", ["x"], ["r"]), N("Identity", ["r"], ["o"])], [vi("o", None)]), else_branch=el), N("Add", ["y", "r"], ["z"])],
                                                  [vi("x", [2])], [vi("z", None)], [c]), inputs={"x": np.ones([2], np.float32)}, expect="any")
case("r5s_if_cond_float", 3, model([N("If", ["cf"], ["y"], then_branch=el, else_branch=el)], [vi("x", [2])], y, [init("cf", np.array(1.0, np.float32))]),
     inputs={"x": np.ones([2], np.float32)})
case("r5s_if_cond_two", 3, model([N("If", ["c2"], ["y"], then_branch=el, else_branch=el)], [vi("x", [2])], y, [init("c2", np.array([True, False]))]),
     inputs={"x": np.ones([2], np.float32)})
case("r5s_if_cond_empty", 3, model([N("If", ["c0"], ["y"], then_branch=el, else_branch=el)], [vi("x", [2])], y, [init("c0", np.zeros([0], bool))]),
     inputs={"x": np.ones([2], np.float32)})
case("r5s_if_branches_shape_differ", 3, model([N("If", ["c"], ["y"], then_branch=body([N("Concat", ["x", "x"], ["o"], axis=0)], [vi("o", None)]), else_branch=el)],
                                              [vi("x", [2])], y, [c]), inputs={"x": np.ones([2], np.float32)}, expect="ok")
case("r5s_if_branches_dtype_differ", 3, model([N("If", ["c"], ["y"], then_branch=body([N("Cast", ["x"], ["o"], to=I64)], [vi("o", None, I64)]), else_branch=el)],
                                              [vi("x", [2])], y, [c]), inputs={"x": np.ones([2], np.float32)})
lb = body([N("Identity", ["cond"], ["co"]), N("Add", ["v", "v"], ["vo"])], [vi("co", [], BOOL), vi("vo", None)],
          [vi("i", [], I64), vi("cond", [], BOOL), vi("v", None)])
case("r5s_loop_trip_neg", 3, model([N("Loop", ["m", "", "x"], ["y"], body=lb)], [vi("x", [2])], y, [i64("m", -5)]),
     inputs={"x": np.ones([2], np.float32)}, expect="any")
case("r5s_loop_trip_max_no_cond", 1, model([N("Loop", ["m", "", "x"], ["y"], body=lb)], [vi("x", [2])], y, [i64("m", IMAX)]),
     inputs={"x": np.ones([2], np.float32)})
case("r5s_loop_body_arity_wrong", 3, model([N("Loop", ["m", "", "x", "x"], ["y"], body=lb)], [vi("x", [2])], y, [i64("m", 2)]),
     inputs={"x": np.ones([2], np.float32)})
lb2 = body([N("Identity", ["cond"], ["co"]), N("Concat", ["v", "v"], ["vo"], axis=0)], [vi("co", [], BOOL), vi("vo", None)],
           [vi("i", [], I64), vi("cond", [], BOOL), vi("v", None)])
case("r5s_loop_doubling", 1, model([N("Loop", ["m", "", "x"], ["y"], body=lb2)], [vi("x", [2])], y, [i64("m", 62)]),
     inputs={"x": np.ones([2], np.float32)})
lb3 = body([N("Identity", ["cond"], ["co"]), N("Identity", ["v"], ["vo"]), N("Unsqueeze", ["i", "z"], ["sc"])],
           [vi("co", [], BOOL), vi("vo", None), vi("sc", None, I64)], [vi("i", [], I64), vi("cond", [], BOOL), vi("v", None)])
case("r5s_loop_scan_out_2p24", 1, model([N("Loop", ["m", "", "x"], ["y", "s"], body=lb3)], [vi("x", [2])], [vi("y", None), vi("s", None, I64)],
                                        [i64("m", 1 << 24), i64("z", [0])]), inputs={"x": np.ones([2], np.float32)}, expect="any")
sb = body([N("Add", ["st", "xi"], ["so"]), N("Identity", ["so"], ["yo"])], [vi("so", None), vi("yo", None)], [vi("st", None), vi("xi", None)])
for nm, kw in (("axis_oob", dict(scan_input_axes=[5])), ("dir_bad", dict(scan_input_directions=[2])),
               ("out_axis_oob", dict(scan_output_axes=[-9])), ("num_inputs_big", {})):
    nsi = 5 if nm == "num_inputs_big" else 1
    case(f"r5s_scan_{nm}", 3, model([N("Scan", ["s0", "xs"], ["y", "ys"], body=sb, num_scan_inputs=nsi, **kw)], [], [vi("y", None), vi("ys", None)],
                                    [init("s0", np.zeros([2], np.float32)), init("xs", np.ones([3, 2], np.float32))]))

# ---- CLI numbers (class 11) ----
gen_case("r5c_base", 11, [2, 2], [N("Relu", ["x"], ["y"])], y, expect="ok")
for i, a in enumerate(("--threads 0", "--threads -1", "--threads 100000", "--threads 9223372036854775807",
                       "--max-work 0", "--max-work -1", "--max-work 1e9", "--max-work 99999999999999999999",
                       "--max-tensor-bytes 0", "--max-tensor-bytes -1", "--max-tensor-bytes 18446744073709551615",
                       "--memory-limit -1", "--memory-limit 18446744073709551616", "--iterations 0",
                       "--iterations -1", "--iterations 1e2", "--seed -1", "--seed 18446744073709551616",
                       "--precision fp7", "--precision ''", "--passes ''", "--passes nosuch", "--passes fold,fold,fold",
                       "--pin 99999", "--pin -1", "--device gpu:99", "--device ''", "--format nosuch", "--input-types x=float99",
                       "--shape x=", "--shape =2", "--verify 2", "-O9", "-O-1", "-O")):
    rows.append((f"r5c_run_{i:02d}", 11, "usage" if i not in (13,) else "any", f"run r5c_base.onnx {a}"))

# ---- wrong but silent (class 6): valid but unusual attributes, results checked against
# onnx.reference (tests/corpus/probe_refcmp.py) ----
rng = np.random.default_rng(5)
R = lambda *s: init("x", rng.standard_normal(s).astype(np.float32))


def v(name, node, inits, out_t=F, nout=1):
    outs = [vi("y", None, out_t)] + [vi(f"y{k}", None, I64) for k in range(1, nout)]
    node.output[:] = ["y"] + [f"y{k}" for k in range(1, nout)]
    one(f"r5v_{name}", 6, node, [], outs, inits, expect="cmp:ref")


xr = R(1, 2, 5, 7)
for mode in ("nearest", "linear", "cubic"):
    for ctm in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"):
        for nm, sc in (("up", [1, 1, 1.7, 2.3]), ("down", [1, 1, 0.45, 0.6])):
            v(f"resize_{mode}_{ctm}_{nm}", N("Resize", ["x", "", "s"], ["y"], mode=mode, coordinate_transformation_mode=ctm),
              [xr, init("s", np.array(sc, np.float32))])
for nmode in ("round_prefer_ceil", "floor", "ceil"):
    v(f"resize_nearest_{nmode}", N("Resize", ["x", "", "s"], ["y"], mode="nearest", nearest_mode=nmode), [xr, init("s", np.array([1, 1, 1.7, 0.6], np.float32))])
for mode in ("linear", "cubic"):
    v(f"resize_{mode}_antialias_down", N("Resize", ["x", "", "s"], ["y"], mode=mode, antialias=1), [xr, init("s", np.array([1, 1, 0.3, 0.45], np.float32))])
v("resize_cubic_exclude_outside", N("Resize", ["x", "", "s"], ["y"], mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5), [xr, init("s", np.array([1, 1, 1.5, 0.7], np.float32))])
for pol in ("not_larger", "not_smaller"):
    v(f"resize_keep_{pol}", N("Resize", ["x", "", "", "s"], ["y"], mode="linear", axes=[-2, -1], keep_aspect_ratio_policy=pol), [xr, i64("s", [9, 4])])
v("resize_tf_crop", N("Resize", ["x", "r", "", "s"], ["y"], mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.0),
  [xr, init("r", np.array([0, 0, -0.2, 0.1, 1, 1, 1.3, 0.8], np.float32)), i64("s", [1, 2, 6, 4])])
xg = R(2, 3, 5, 6)
for mode in ("linear", "nearest", "cubic"):
    for pad in ("zeros", "border", "reflection"):
        for ac in (0, 1):
            v(f"gridsample_{mode}_{pad}_{ac}", N("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad, align_corners=ac),
              [xg, init("g", (rng.uniform(-1.6, 1.6, [2, 4, 3, 2])).astype(np.float32))])
v("gridsample_3d_linear_reflect", N("GridSample", ["x", "g"], ["y"], mode="linear", padding_mode="reflection"),
  [R(1, 2, 3, 4, 5), init("g", rng.uniform(-1.5, 1.5, [1, 2, 3, 4, 3]).astype(np.float32))])
for ac in (0, 1):
    v(f"affinegrid_2d_{ac}", N("AffineGrid", ["t", "s"], ["y"], align_corners=ac), [init("t", rng.standard_normal([2, 2, 3]).astype(np.float32)), i64("s", [2, 3, 4, 5])])
    v(f"affinegrid_3d_{ac}", N("AffineGrid", ["t", "s"], ["y"], align_corners=ac), [init("t", rng.standard_normal([1, 3, 4]).astype(np.float32)), i64("s", [1, 1, 3, 4, 2])])
for mode in ("avg", "max"):
    for ctm in ("half_pixel", "output_half_pixel"):
        for sr in (0, 2):
            v(f"roialign_{mode}_{ctm}_{sr}", N("RoiAlign", ["x", "r", "b"], ["y"], mode=mode, coordinate_transformation_mode=ctm, sampling_ratio=sr,
                                                output_height=3, output_width=2, spatial_scale=0.5),
              [xg, init("r", np.array([[0, 0, 9, 9], [2.5, 1, 7.7, 11], [-3, -2, 4, 3]], np.float32)), i64("b", [0, 1, 1])])
for nm, kw in (("dil", dict(dilations=[2, 1])), ("stride", dict(strides=[2, 3])), ("pads", dict(pads=[1, 0, 2, 1]))):
    bl = [2, 2]; im = [7, 8]
    d = kw.get("dilations", [1, 1]); s = kw.get("strides", [1, 1]); p = kw.get("pads", [0, 0, 0, 0])
    L = 1
    for i in range(2):
        L *= (im[i] + p[i] + p[i + 2] - d[i] * (bl[i] - 1) - 1) // s[i] + 1
    v(f"col2im_{nm}", N("Col2Im", ["x", "im", "bl"], ["y"], **kw), [R(2, 3 * 4, L), i64("im", im), i64("bl", bl)])
for ax in ([0, 2], [-1], [-3, 1]):
    sh = [2, 7, 5] if ax != [-1] else [9]
    v(f"centercroppad_{'_'.join(map(str, ax))}", N("CenterCropPad", ["x", "s"], ["y"], axes=ax), [R(4, 6, 3), i64("s", sh[:len(ax)])])
xt = init("x", np.array([[3, 1, 3, 2, 1, 3], [0, 0, 5, 5, 5, -1]], np.float32))
for lg in (0, 1):
    for so in (0, 1):
        v(f"topk_ties_{lg}_{so}", N("TopK", ["x", "k"], ["y"], largest=lg, sorted=so), [xt, i64("k", [4])], nout=2)
for ax in (None, 0, 1):
    for so in (0, 1):
        kw = {"sorted": so} if ax is None else {"sorted": so, "axis": ax}
        v(f"unique_{ax}_{so}", N("Unique", ["x"], ["y"], **kw), [init("x", np.array([[2, 1, 2], [0, 5, 0], [2, 1, 2]], np.float32))], nout=4)
for ex in (0, 1):
    for rv in (0, 1):
        v(f"cumsum_{ex}_{rv}", N("CumSum", ["x", "a"], ["y"], exclusive=ex, reverse=rv), [R(3, 4), i64("a", -1)])
for red in ("add", "mul", "min", "max"):
    v(f"scatterelements_{red}", N("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction=red),
      [R(3, 4), init("i", np.array([[0, 0, 3], [1, 1, 1], [-1, -4, 2]], np.int64)), init("u", rng.standard_normal([3, 3]).astype(np.float32))])
    v(f"scatternd_{red}", N("ScatterND", ["x", "i", "u"], ["y"], reduction=red),
      [R(3, 4), init("i", np.array([[0, 1], [0, 1], [-1, -1]], np.int64)), init("u", rng.standard_normal([3]).astype(np.float32))])
v("gathernd_batch1", N("GatherND", ["x", "i"], ["y"], batch_dims=1), [R(2, 3, 4), init("i", np.array([[[1], [-1]], [[0], [2]]], np.int64))])
v("gathernd_batch2", N("GatherND", ["x", "i"], ["y"], batch_dims=2), [R(2, 3, 4), init("i", np.array([[[1], [3], [0]], [[2], [-1], [0]]], np.int64))])
for i, (eq, shapes) in enumerate((("ii->i", [[4, 4]]), ("ii->", [[4, 4]]), ("...ij,...jk->...ik", [[2, 1, 3, 4], [5, 4, 2]]),
                                  ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]), ("ij,ij,ij->i", [[3, 4]] * 3), ("i,j->ij", [[3], [5]]),
                                  ("iij->j", [[3, 3, 4]]), ("ij...->...ji", [[2, 3, 4, 5]]), ("ab,ba->", [[3, 4], [4, 3]]),
                                  ("a...,...->a...", [[2, 3], [1]]))):
    ins = [f"e{k}" for k in range(len(shapes))]
    v(f"einsum_{i:02d}", N("Einsum", ins, ["y"], equation=eq), [init(n, rng.standard_normal(s).astype(np.float32)) for n, s in zip(ins, shapes)])
for one_s in (0, 1):
    for inv in (0, 1):
        for dl in (None, 5, 13):
            if one_s and inv:
                continue
            x = init("x", rng.standard_normal([2, 9, 1 if (one_s or not inv) and not inv else 2]).astype(np.float32))
            ins = ["x", "dl" if dl else "", "ax"]
            v(f"dft_{one_s}_{inv}_{dl}", N("DFT", ins, ["y"], onesided=one_s, inverse=inv), [x, i64("ax", 1)] + ([i64("dl", dl)] if dl else []))
v("dft_complex_axis2", N("DFT", ["x", "", "ax"], ["y"]), [R(2, 3, 7, 2), i64("ax", -2)])
for one_s in (0, 1):
    v(f"stft_window_{one_s}", N("STFT", ["x", "st", "w", ""], ["y"], onesided=one_s), [R(2, 40), i64("st", 7), init("w", np.hanning(10).astype(np.float32))])
    v(f"stft_len_{one_s}", N("STFT", ["x", "st", "", "fl"], ["y"], onesided=one_s), [R(1, 33, 1), i64("st", 5), i64("fl", 11)])
for bs in (2, 3):
    for mode in ("DCR", "CRD"):
        v(f"depthtospace_{mode}_{bs}", N("DepthToSpace", ["x"], ["y"], blocksize=bs, mode=mode), [R(2, 2 * bs * bs, 3, 2)])
for up in (0, 1):
    for k in (-2, 0, 3):
        v(f"trilu_{up}_{k}", N("Trilu", ["x", "k"], ["y"], upper=up), [R(2, 4, 6), i64("k", k)])
v("onehot_neg_idx", N("OneHot", ["i", "d", "vv"], ["y"], axis=0), [init("i", np.array([[-1, 2], [0, -3]], np.int64)), init("d", np.float32(3.7)), init("vv", np.array([-2, 5], np.float32))])
v("range_f_neg", N("Range", ["s", "l", "d"], ["y"]), [init("s", np.float32(5)), init("l", np.float32(-3.3)), init("d", np.float32(-0.7))])
v("maxunpool_outshape", N("MaxUnpool", ["x", "i", "o"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
  [R(1, 1, 2, 2), init("i", np.array([[[[0, 6], [14, 24]]]], np.int64)), i64("o", [1, 1, 5, 5])])
for mode in ("constant", "reflect", "edge", "wrap"):
    v(f"pad_{mode}_neg_axes", N("Pad", ["x", "p", "", "a"], ["y"], mode=mode), [R(3, 4, 5), i64("p", [2, -1, 1, 3]), i64("a", [-1, 0])])
for nm, s, e, a, st in (("neg_step", [10, -1], [-10, -100], [1, 0], [-2, -1]), ("big", [IMIN, 2], [IMAX, IMAX], [0, 1], [3, IMAX]),
                        ("neg_step_min", [IMAX], [IMIN], [1], [-1]), ("empty", [3], [1], [2], [1])):
    v(f"slice_{nm}", N("Slice", ["x", "s", "e", "a", "st"], ["y"]), [R(3, 4, 5), i64("s", s), i64("e", e), i64("a", a), i64("st", st)])
v("reversesequence_batch1", N("ReverseSequence", ["x", "l"], ["y"], batch_axis=1, time_axis=0), [R(5, 3, 2), i64("l", [5, 1, 3])])
v("lppool_p3", N("LpPool", ["x"], ["y"], p=3, kernel_shape=[2, 3], strides=[1, 2], pads=[1, 0, 0, 1]), [R(1, 2, 5, 6)])
v("mvn_axes", N("MeanVarianceNormalization", ["x"], ["y"], axes=[1, 3]), [R(2, 3, 4, 5)])
v("compress_no_axis", N("Compress", ["x", "c"], ["y"]), [R(2, 3), init("c", np.array([True, False, False, True, True], bool))])
v("nms_center", N("NonMaxSuppression", ["bx", "s", "m", "iou", "th"], ["y"], center_point_box=1),
  [init("bx", np.array([[[0.5, 0.5, 1, 1], [0.6, 0.5, 1, 1], [5, 5, 2, 2], [0.5, 0.5, -1, -1]]], np.float32)),
   init("s", np.array([[[0.9, 0.8, 0.7, 0.95], [0.1, 0.2, 0.3, 0.4]]], np.float32)), i64("m", [3]),
   init("iou", np.array([0.3], np.float32)), init("th", np.array([0.15], np.float32))], out_t=I64)
v("nms_flipped_corners", N("NonMaxSuppression", ["bx", "s", "m", "iou"], ["y"]),
  [init("bx", np.array([[[1, 1, 0, 0], [0, 0, 1, 1], [0.1, 0.1, 1.1, 1.1]]], np.float32)),
   init("s", np.array([[[0.9, 0.8, 0.7]]], np.float32)), i64("m", [3]), init("iou", np.array([0.5], np.float32))], out_t=I64)
# int4 / float8 values
for dt, raw in ((TP.INT4, b"\x8f\x70\x01"), (TP.UINT4, b"\x8f\x70\x01"), (TP.FLOAT8E4M3FN, bytes(range(0, 256, 17))),
                (TP.FLOAT8E5M2, bytes(range(0, 256, 17))), (TP.FLOAT8E4M3FNUZ, bytes(range(0, 256, 17))), (TP.FLOAT8E5M2FNUZ, bytes(range(0, 256, 17)))):
    n = 5 if dt in (TP.INT4, TP.UINT4) else len(raw)
    case(f"r5v_cast_{TP.DataType.Name(dt).lower()}", 6, model([N("Cast", ["w"], ["y"], to=F)], [], y, [tp("w", dt, [n], raw=raw)]), expect="cmp:ref")

# ---- the same ops with their shape and index operands as model inputs, read at run
# time from .npy files (the run-time checks, not the load-time ones; classes 2, 3, 6) ----
def rt(name, node, ins, feeds, expect="err", out_t=F, nout=1, cls=3, inits=()):
    outs = [vi("y", None, out_t)] + [vi(f"y{k}", None, I64) for k in range(1, nout)]
    node.output[:] = ["y"] + [f"y{k}" for k in range(1, nout)]
    one(f"r5r_{name}", cls, node, ins, outs, list(inits), expect=expect, inputs=feeds)


X = lambda *s: np.arange(int(np.prod(s)), dtype=np.float32).reshape(s)
xin = vi("x", None)
def ii(n, r=1):
    return vi(n, [None] * r if r else [], I64)
L = lambda v: np.array(v, np.int64)
for nm, idx in (("past", [[5]]), ("neg", [[-3]]), ("min", [[IMIN]])):
    rt(f"gather_{nm}", N("Gather", ["x", "i"], ["y"]), [xin, ii("i", 2)], {"x": X(2, 3), "i": L(idx)})
    rt(f"gatherelements_{nm}", N("GatherElements", ["x", "i"], ["y"], axis=1), [xin, ii("i", 2)], {"x": X(2, 3), "i": L(idx * 2)})
    rt(f"scatterelements_{nm}", N("ScatterElements", ["x", "i", "u"], ["y"], axis=1), [xin, ii("i", 2), vi("u", None)],
       {"x": X(2, 3), "i": L(idx * 2), "u": X(2, 1)})
    rt(f"gathernd_{nm}", N("GatherND", ["x", "i"], ["y"]), [xin, ii("i", 2)], {"x": X(2, 3), "i": L(idx)})
    rt(f"scatternd_{nm}", N("ScatterND", ["x", "i", "u"], ["y"]), [xin, ii("i", 2), vi("u", None)], {"x": X(2, 3), "i": L(idx), "u": X(1, 3)})
    rt(f"maxunpool_{nm}", N("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), [xin, ii("i", 4)],
       {"x": X(1, 1, 1, 1), "i": L(idx).reshape(1, 1, 1, 1)})
    rt(f"onehot_{nm}", N("OneHot", ["i", "d", "vv"], ["y"]), [ii("i", 1), ii("d", 0), vi("vv", None)],
       {"i": L(idx[0]), "d": L(3), "vv": X(2)}, expect="ok")
    rt(f"gathergrad_free_{nm}", N("Gather", ["x", "i"], ["y"], axis=-1), [xin, ii("i", 0)], {"x": X(2, 3), "i": L(idx[0][0])})
rt("scatterelements_dup_none", N("ScatterElements", ["x", "i", "u"], ["y"], axis=0), [xin, ii("i", 2), vi("u", None)],
   {"x": X(2, 3), "i": L([[0, 0, 0], [0, 0, 0]]), "u": X(2, 3)}, expect="any")
rt("scatternd_idx_shape_mismatch", N("ScatterND", ["x", "i", "u"], ["y"]), [xin, ii("i", 2), vi("u", None)],
   {"x": X(2, 3), "i": L([[0], [1]]), "u": X(1, 3)})
rt("gatherelements_idx_bigger", N("GatherElements", ["x", "i"], ["y"], axis=1), [xin, ii("i", 2)], {"x": X(2, 3), "i": L(np.zeros([3, 5]))})
for nm, k in (("past", 7), ("neg", -1), ("max", IMAX)):
    rt(f"topk_{nm}", N("TopK", ["x", "k"], ["y"]), [xin, ii("k")], {"x": X(2, 3), "k": L([k])}, nout=2)
for nm, s in (("neg", [2, -2]), ("two_neg1", [-1, -1]), ("zero_past_rank", [0, 0, 0]), ("huge", [2**40, 2**40]),
              ("count_wrong", [4, 4]), ("zero_and_neg1_empty", [0, -1])):
    rt(f"reshape_{nm}", N("Reshape", ["x", "s"], ["y"]), [xin, ii("s")], {"x": X(2, 3), "s": L(s)})
rt("reshape_allowzero_neg1_with_zero", N("Reshape", ["x", "s"], ["y"], allowzero=1), [xin, ii("s")], {"x": X(0, 3), "s": L([0, -1])})
rt("reshape_empty_to_neg1", N("Reshape", ["x", "s"], ["y"]), [xin, ii("s")], {"x": X(0, 3), "s": L([5, -1])}, expect="any")
for nm, s in (("huge", [2**31, 2**31]), ("neg", [-1, 3]), ("incompatible", [4, 3]), ("rank9", [1] * 9)):
    rt(f"expand_{nm}", N("Expand", ["x", "s"], ["y"]), [xin, ii("s")], {"x": X(2, 3), "s": L(s)})
for nm, s in (("huge", [2**40, 2**40]), ("neg", [-3]), ("rank9", [1] * 9)):
    rt(f"constantofshape_{nm}", N("ConstantOfShape", ["s"], ["y"]), [ii("s")], {"s": L(s)})
for nm, s in (("huge", [2**40, 1]), ("neg", [1, -1]), ("short", [1])):
    rt(f"tile_{nm}", N("Tile", ["x", "s"], ["y"]), [xin, ii("s")], {"x": X(2, 3), "s": L(s)})
for nm, p in (("past_dim", [-3, 0, 0, 0]), ("huge", [2**40, 0, 0, 0]), ("short", [1, 1]), ("neg_both_ends", [-1, -2, -1, -1])):
    rt(f"pad_{nm}", N("Pad", ["x", "p"], ["y"]), [xin, ii("p")], {"x": X(2, 3), "p": L(p)}, expect="ok" if nm == "neg_both_ends" else "err")
    rt(f"pad_reflect_{nm}", N("Pad", ["x", "p"], ["y"], mode="reflect"), [xin, ii("p")], {"x": X(2, 3), "p": L(p)},
       expect="any" if nm == "neg_both_ends" else "err")
rt("pad_reflect_wider_than_dim", N("Pad", ["x", "p"], ["y"], mode="reflect"), [xin, ii("p")], {"x": X(2, 3), "p": L([5, 0, 5, 0])}, expect="any")
rt("pad_edge_empty_dim", N("Pad", ["x", "p"], ["y"], mode="edge"), [xin, ii("p")], {"x": X(0, 3), "p": L([1, 0, 1, 0])})
rt("pad_wrap_empty_dim", N("Pad", ["x", "p"], ["y"], mode="wrap"), [xin, ii("p")], {"x": X(0, 3), "p": L([1, 0, 1, 0])})
rt("pad_wrap_wider", N("Pad", ["x", "p"], ["y"], mode="wrap"), [xin, ii("p")], {"x": X(2, 3), "p": L([0, 7, 0, 8])}, expect="any")
for nm, s, e, a, st in (("step0", [0], [2], [0], [0]), ("axis_dup", [0, 0], [1, 1], [0, 0], [1, 1]), ("axis_oob", [0], [1], [5], [1]),
                        ("len_mismatch", [0, 0], [1], [0], [1]), ("step_min", [IMAX], [IMIN], [0], [IMIN])):
    rt(f"slice_{nm}", N("Slice", ["x", "s", "e", "a", "st"], ["y"]), [xin, ii("s"), ii("e"), ii("a"), ii("st")],
       {"x": X(2, 3), "s": L(s), "e": L(e), "a": L(a), "st": L(st)}, expect="ok" if nm == "step_min" else "err")
for nm, sz in (("neg", [1, 1, -2, 2]), ("huge", [1, 1, 2**31, 2**31]), ("zero", [1, 1, 0, 0]), ("short", [3])):
    rt(f"resize_sizes_{nm}", N("Resize", ["x", "", "", "s"], ["y"]), [xin, ii("s")], {"x": X(1, 1, 2, 2), "s": L(sz)},
       expect="ok" if nm == "zero" else "err")
for nm, sc in (("nan", [1, 1, np.nan, 1]), ("neg", [1, 1, -1, 1]), ("huge", [1, 1, 1e12, 1e12]), ("zero", [1, 1, 0, 1])):
    rt(f"resize_scales_{nm}", N("Resize", ["x", "", "s"], ["y"]), [xin, vi("s", [None])], {"x": X(1, 1, 2, 2), "s": np.array(sc, np.float32)},
       expect="ok" if nm == "zero" else "err")
rt("resize_roi_runtime_short", N("Resize", ["x", "r", "", "s"], ["y"], coordinate_transformation_mode="tf_crop_and_resize"),
   [xin, vi("r", [None]), ii("s")], {"x": X(1, 1, 2, 2), "r": np.array([0, 1], np.float32), "s": L([1, 1, 3, 3])})
for nm, s in (("huge", [2**40]), ("neg", [-1]), ("zero_last", [0])):
    rt(f"centercroppad_{nm}", N("CenterCropPad", ["x", "s"], ["y"], axes=[-1]), [xin, ii("s")], {"x": X(2, 3), "s": L(s)},
       expect="ok" if nm == "zero_last" else "err")
for nm, im, bl in (("block_zero", [3, 3], [0, 1]), ("image_huge", [2**31, 2**31], [1, 1]), ("block_past", [3, 3], [4, 4]), ("L_mismatch", [3, 3], [1, 1])):
    rt(f"col2im_{nm}", N("Col2Im", ["x", "im", "bl"], ["y"]), [xin, ii("im"), ii("bl")], {"x": X(1, 1, 4), "im": L(im), "bl": L(bl)})
for nm, dl in (("zero", 0), ("neg", -1), ("huge", 2**40), ("one", 1)):
    rt(f"dft_len_{nm}", N("DFT", ["x", "dl", ""], ["y"]), [xin, ii("dl", 0)], {"x": X(1, 4, 1), "dl": L(dl)}, expect="ok" if nm == "one" else "err")
for nm, ax in (("oob", 7), ("batch0", 0), ("min", IMIN)):
    rt(f"dft_axis_{nm}", N("DFT", ["x", "", "ax"], ["y"]), [xin, ii("ax", 0)], {"x": X(1, 4, 1), "ax": L(ax)}, expect="any" if nm == "batch0" else "err")
for nm, st, fl in (("step0", 0, 2), ("step_neg", -2, 2), ("fl_past", 1, 9), ("fl0", 1, 0), ("step_huge", IMAX, 2)):
    rt(f"stft_{nm}", N("STFT", ["x", "st", "", "fl"], ["y"]), [xin, ii("st", 0), ii("fl", 0)], {"x": X(1, 8, 1), "st": L(st), "fl": L(fl)},
       expect="any" if nm == "step_huge" else "err")
for nm, k in (("max", IMAX), ("min", IMIN)):
    rt(f"trilu_{nm}", N("Trilu", ["x", "k"], ["y"]), [xin, ii("k", 0)], {"x": X(3, 3), "k": L(k)}, expect="ok")
for nm, d in (("huge", 2**40), ("neg", -3), ("zero", 0)):
    rt(f"onehot_depth_{nm}", N("OneHot", ["i", "d", "vv"], ["y"]), [ii("i", 1), ii("d", 0), vi("vv", None)], {"i": L([0]), "d": L(d), "vv": X(2)})
rt("onehot_values_three", N("OneHot", ["i", "d", "vv"], ["y"]), [ii("i", 1), ii("d", 0), vi("vv", None)], {"i": L([0]), "d": L(3), "vv": X(3)})
for nm, s, l, d in (("d0", 0, 5, 0), ("huge", 0, 2**40, 1), ("wrap", IMIN, IMAX, 3)):
    rt(f"range_{nm}", N("Range", ["s", "l", "d"], ["y"]), [ii("s", 0), ii("l", 0), ii("d", 0)], {"s": L(s), "l": L(l), "d": L(d)}, out_t=I64)
for nm, n in (("huge", 2**40), ("neg", -2)):
    rt(f"hannwindow_{nm}", N("HannWindow", ["n"], ["y"]), [ii("n", 0)], {"n": L(n)})
for nm, r, b in (("bidx_past", [[0, 0, 1, 1]], [3]), ("bidx_neg", [[0, 0, 1, 1]], [-1]), ("rois_nan", [[np.nan] * 4], [0])):
    rt(f"roialign_{nm}", N("RoiAlign", ["x", "r", "b"], ["y"]), [xin, vi("r", [None, 4]), ii("b")],
       {"x": X(1, 1, 4, 4), "r": np.array(r, np.float32), "b": L(b)}, expect="any" if nm == "rois_nan" else "err")
rt("nms_max_runtime_huge", N("NonMaxSuppression", ["bx", "s", "m"], ["y"]), [vi("bx", None), vi("s", None), ii("m")],
   {"bx": np.array([[[0, 0, 1, 1]] * 3], np.float32), "s": np.ones([1, 1, 3], np.float32), "m": L([IMAX])}, out_t=I64, expect="ok")
rt("nms_boxes_scores_mismatch", N("NonMaxSuppression", ["bx", "s", "m"], ["y"]), [vi("bx", None), vi("s", None), ii("m")],
   {"bx": np.zeros([1, 3, 4], np.float32), "s": np.ones([2, 1, 3], np.float32), "m": L([1])}, out_t=I64)
rt("compress_cond_longer", N("Compress", ["x", "c"], ["y"], axis=0), [xin, vi("c", [None], BOOL)], {"x": X(2, 3), "c": np.ones([5], bool)}, expect="any")
rt("compress_cond_longer_flat", N("Compress", ["x", "c"], ["y"]), [xin, vi("c", [None], BOOL)], {"x": X(2, 3), "c": np.ones([9], bool)}, expect="any")
rt("reversesequence_len_past", N("ReverseSequence", ["x", "l"], ["y"]), [xin, ii("l")], {"x": X(3, 2, 2), "l": L([5, 1])})
rt("reversesequence_len_neg", N("ReverseSequence", ["x", "l"], ["y"]), [xin, ii("l")], {"x": X(3, 2, 2), "l": L([-1, 1])})
rt("split_sizes_neg", N("Split", ["x", "s"], ["y", "y1"]), [xin, ii("s")], {"x": X(4, 3), "s": L([5, -1])}, nout=2)
rt("split_sizes_sum", N("Split", ["x", "s"], ["y", "y1"]), [xin, ii("s")], {"x": X(4, 3), "s": L([1, 1])}, nout=2)
rt("unsqueeze_axes_runtime_dup", N("Unsqueeze", ["x", "a"], ["y"]), [xin, ii("a")], {"x": X(2, 3), "a": L([0, 0])})
rt("squeeze_axes_runtime_not1", N("Squeeze", ["x", "a"], ["y"]), [xin, ii("a")], {"x": X(2, 3), "a": L([1])})
rt("reducesum_axes_runtime_oob", N("ReduceSum", ["x", "a"], ["y"]), [xin, ii("a")], {"x": X(2, 3), "a": L([5])})
rt("reducesum_axes_runtime_dup", N("ReduceSum", ["x", "a"], ["y"]), [xin, ii("a")], {"x": X(2, 3), "a": L([1, -1])})
rt("cumsum_axis_runtime_oob", N("CumSum", ["x", "a"], ["y"]), [xin, ii("a", 0)], {"x": X(2, 3), "a": L(2)})
rt("einsum_runtime_mismatch", N("Einsum", ["x", "x2"], ["y"], equation="ij,jk->ik"), [xin, vi("x2", None)], {"x": X(2, 3), "x2": X(4, 2)})
rt("gridsample_runtime_grid_wrong", N("GridSample", ["x", "g"], ["y"]), [xin, vi("g", None)], {"x": X(1, 1, 2, 2), "g": X(1, 2, 2, 3)})
rt("affinegrid_runtime_size_huge", N("AffineGrid", ["t", "s"], ["y"]), [vi("t", None), ii("s")], {"t": np.zeros([1, 2, 3], np.float32), "s": L([1, 1, 2**31, 2**31])})
rt("lstm_seq_lens_past", N("LSTM", ["x", "w", "r", "", "sl"], ["", "y"], hidden_size=2), [xin, vi("sl", None, I32)],
   {"x": X(3, 1, 2), "sl": np.array([7], np.int32)}, inits=[init("w", np.ones([1, 8, 2], np.float32)), init("r", np.ones([1, 8, 2], np.float32))])
rt("lstm_seq_lens_neg", N("LSTM", ["x", "w", "r", "", "sl"], ["", "y"], hidden_size=2), [xin, vi("sl", None, I32)],
   {"x": X(3, 1, 2), "sl": np.array([-1], np.int32)}, inits=[init("w", np.ones([1, 8, 2], np.float32)), init("r", np.ones([1, 8, 2], np.float32))])
rt("gru_seq_lens_zero", N("GRU", ["x", "w", "r", "", "sl"], ["", "y"], hidden_size=2), [xin, vi("sl", None, I32)],
   {"x": X(3, 1, 2), "sl": np.array([0], np.int32)}, inits=[init("w", np.ones([1, 6, 2], np.float32)), init("r", np.ones([1, 6, 2], np.float32))], expect="any")
rt("attention_mask_wrong", N("Attention", ["q", "k", "vv", "m"], ["y"]), [vi("q", None), vi("k", None), vi("vv", None), vi("m", None, BOOL)],
   {"q": X(1, 2, 3, 4), "k": X(1, 2, 5, 4), "vv": X(1, 2, 5, 4), "m": np.ones([7, 7], bool)})
rt("if_cond_runtime_empty", N("If", ["c"], ["y"], then_branch=body([N("Identity", ["x"], ["o"])], [vi("o", None)]),
                                  else_branch=body([N("Neg", ["x"], ["o"])], [vi("o", None)])),
   [xin, vi("c", None, BOOL)], {"x": X(2), "c": np.zeros([0], bool)})
rt("loop_cond_runtime_two", N("Loop", ["m", "c", "x"], ["y"], body=lb), [xin, ii("m", 0), vi("c", None, BOOL)],
   {"x": X(2), "m": L(3), "c": np.ones([2], bool)})
rt("loop_trip_runtime_huge", N("Loop", ["m", "", "x"], ["y"], body=lb), [xin, ii("m", 0)], {"x": X(2), "m": L(IMAX)}, cls=1)

# ---- input files (.pb TensorProto, .npy) that disagree with the model (classes 3, 5, 6) ----
mb = model([N("Relu", ["x"], ["y"])], [vi("x", [2])], y)
with open(os.path.join(OUT, "r5f_base.onnx"), "wb") as f:
    f.write(mb.SerializeToString())
mbi = model([N("Not", ["x"], ["y"])], [vi("x", [3], BOOL)], [vi("y", None, BOOL)])
with open(os.path.join(OUT, "r5f_bool.onnx"), "wb") as f:
    f.write(mbi.SerializeToString())


def pbfile(name, t, expect="err", mdl="r5f_base"):
    with open(os.path.join(OUT, name + ".pb"), "wb") as f:
        f.write(t.SerializeToString() if hasattr(t, "SerializeToString") else t)
    rows.append((name, 3, expect, f"run {mdl}.onnx --input x={name}.pb"))


def ext_pb(name, loc, off=None, ln=None, expect="err"):
    t = onnx.TensorProto(); t.name = "x"; t.data_type = F; t.dims.extend([2])
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, val in (("location", loc), ("offset", off), ("length", ln)):
        if val is not None:
            e = t.external_data.add(); e.key = k; e.value = str(val)
    pbfile(name, t, expect)


ext_pb("r5f_pb_ext_etc", "/etc/hostname")
ext_pb("r5f_pb_ext_dotdot", "../w8.bin")
ext_pb("r5f_pb_ext_inside", "w8.bin", expect="any")
ext_pb("r5f_pb_ext_past", "w8.bin", 4, 8)
ext_pb("r5f_pb_ext_proc", "/proc/self/environ")
pbfile("r5f_pb_raw_short", tp("x", F, [2], raw=b"\0" * 7))
pbfile("r5f_pb_raw_long", tp("x", F, [2], raw=b"\0" * 12))
pbfile("r5f_pb_dtype_i64", tp("x", I64, [2], raw=b"\0" * 16))
pbfile("r5f_pb_dtype_f16", tp("x", H, [2], raw=b"\0" * 4), expect="any")
pbfile("r5f_pb_shape_3", tp("x", F, [3], raw=b"\0" * 12))
pbfile("r5f_pb_rank2", tp("x", F, [1, 2], raw=b"\0" * 8))
pbfile("r5f_pb_string", tp("x", STR, [2], string_data=[b"a", b"b"]))
pbfile("r5f_pb_int4", tp("x", I4, [2], raw=b"\x11"))
pbfile("r5f_pb_dims_neg", tp("x", F, [-2], raw=b""))
pbfile("r5f_pb_dims_huge_empty", tp("x", F, [2**62, 0], raw=b""))
pbfile("r5f_pb_float_data_short", tp("x", F, [2], float_data=[1.0]))
pbfile("r5f_pb_two_forms", tp("x", F, [2], raw=b"\0" * 8, float_data=[1, 2]))
pbfile("r5f_pb_name_other", tp("zz", F, [2], raw=b"\0" * 8), expect="any")
pbfile("r5f_pb_garbage", b"\xff" * 64)
pbfile("r5f_pb_empty", b"", expect="any")
pbfile("r5f_pb_bool_raw_7", tp("x", BOOL, [3], raw=b"\x07\x00\x01"), expect="any", mdl="r5f_bool")
pbfile("r5f_pb_bool_int32_big", tp("x", BOOL, [3], int32_data=[2**31 - 1, 0, -1]), expect="any", mdl="r5f_bool")
t = tp("x", F, [2], raw=b"\0" * 8); t.segment.begin = 0; t.segment.end = 1
pbfile("r5f_pb_segment", t, expect="any")


def npyfile(name, arr=None, raw=None, expect="err", mdl="r5f_base"):
    p = os.path.join(OUT, name + ".npy")
    if raw is not None:
        with open(p, "wb") as f:
            f.write(raw)
    else:
        np.save(p, arr)
    rows.append((name, 3, expect, f"run {mdl}.onnx --input x={name}.npy"))


def npy_raw(descr, shape, body, ver=1, fortran=False, extra=""):
    hdr = "{'descr': %s, 'fortran_order': %s, 'shape': %s, %s}" % (descr, fortran, shape, extra)
    hdr += " " * (63 - (len(hdr) + (10 if ver == 1 else 12)) % 64) + "\n"
    ln = len(hdr).to_bytes(2 if ver == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([ver, 0]) + ln + hdr.encode() + body


npyfile("r5f_npy_bigendian", np.array([1, -2], ">f4"), expect="any")
npyfile("r5f_npy_f16", np.array([1, -2], np.float16), expect="any")
npyfile("r5f_npy_f64", np.array([1, -2], np.float64), expect="any")
npyfile("r5f_npy_i64", np.array([1, -2], np.int64), expect="any")
npyfile("r5f_npy_scalar", np.float32(1))
npyfile("r5f_npy_unicode", np.array(["a", "b"]))
npyfile("r5f_npy_object", raw=npy_raw("'|O'", "(2,)", b"\0" * 16))
npyfile("r5f_npy_structured", np.zeros(2, dtype=[("a", "<f4")]))
npyfile("r5f_npy_complex", np.zeros(2, np.complex64))
npyfile("r5f_npy_v2", raw=npy_raw("'<f4'", "(2,)", b"\0" * 8, ver=2), expect="ok")
npyfile("r5f_npy_v3", raw=npy_raw("'<f4'", "(2,)", b"\0" * 8, ver=3), expect="any")
npyfile("r5f_npy_v9", raw=npy_raw("'<f4'", "(2,)", b"\0" * 8, ver=9))
npyfile("r5f_npy_shape_trailing_garbage", raw=npy_raw("'<f4'", "(2,) + (3,)", b"\0" * 8))
npyfile("r5f_npy_shape_neg", raw=npy_raw("'<f4'", "(-2,)", b""))
npyfile("r5f_npy_shape_float", raw=npy_raw("'<f4'", "(2.0,)", b"\0" * 8))
npyfile("r5f_npy_shape_huge", raw=npy_raw("'<f4'", "(99999999999999999999999,)", b"\0" * 8))
npyfile("r5f_npy_descr_twice", raw=npy_raw("'<f4'", "(2,)", b"\0" * 16, extra="'descr': '<f8', "))
npyfile("r5f_npy_key_unknown", raw=npy_raw("'<f4'", "(2,)", b"\0" * 8, extra="'evil': 1, "), expect="any")
npyfile("r5f_npy_descr_list", raw=npy_raw("[('a', '<f4')]", "(2,)", b"\0" * 8))
npyfile("r5f_npy_body_long", raw=npy_raw("'<f4'", "(2,)", b"\0" * 12), expect="any")
npyfile("r5f_npy_fortran_2d", raw=npy_raw("'<f4'", "(2,)", b"\0" * 8, fortran=True), expect="any")
npyfile("r5f_npy_header_len_huge", raw=b"\x93NUMPY\x02\x00\xff\xff\xff\x7f{")
npyfile("r5f_npy_header_nul", raw=npy_raw("'<f4'\0", "(2,)", b"\0" * 8))
npyfile("r5f_npy_descr_f4_nobyteorder", raw=npy_raw("'f4'", "(2,)", b"\0" * 8), expect="any")
npyfile("r5f_npy_descr_i1_for_bool", np.array([0, 2, -1], np.int8), mdl="r5f_bool", expect="any")
npyfile("r5f_npy_bool_byte_2", raw=npy_raw("'|b1'", "(3,)", b"\x02\x00\xff"), mdl="r5f_bool", expect="any")

# ---- tensors inside attributes and subgraphs: external data, forms, references (classes 3, 5) ----
def ext_t(nm, loc, off=None, ln=None, dims=(2,)):
    t = onnx.TensorProto(); t.name = nm; t.data_type = F; t.dims.extend(dims)
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, val in (("location", loc), ("offset", off), ("length", ln)):
        if val is not None:
            e = t.external_data.add(); e.key = k; e.value = str(val)
    return t


for nm, loc, exp in (("etc", "/etc/hostname", "err"), ("dotdot", "../w8.bin", "err"), ("inside", "w8.bin", "ok"),
                     ("past", "w8.bin", "err")):
    off = 4 if nm == "past" else None
    ln = 8 if nm == "past" else None
    case(f"r5x_constant_ext_{nm}", 5, model([N("Constant", [], ["y"], value=ext_t("c", loc, off, ln))], [], y), exp)
    case(f"r5x_constantofshape_ext_{nm}", 5, model([N("ConstantOfShape", ["s"], ["y"], value=ext_t("c", loc, off, ln, dims=(1,)))], [], y,
                                                   [i64("s", [2])]), "ok" if nm == "inside" else "err")
    sub = helper.make_graph([N("Identity", ["w"], ["o"])], "b", [], [vi("o", None)], [ext_t("w", loc, off, ln)])
    case(f"r5x_if_init_ext_{nm}", 5, model([N("If", ["c"], ["y"], then_branch=sub, else_branch=sub)], [], y, [init("c", np.array(True))]), exp)
    lsub = helper.make_graph([N("Identity", ["cond"], ["co"]), N("Add", ["v", "w"], ["vo"])], "b",
                             [vi("i", [], I64), vi("cond", [], BOOL), vi("v", None)], [vi("co", [], BOOL), vi("vo", None)], [ext_t("w", loc, off, ln)])
    case(f"r5x_loop_init_ext_{nm}", 5, model([N("Loop", ["m", "", "z"], ["y"], body=lsub)], [], y, [i64("m", 2), init("z", np.zeros([2], np.float32))]), exp)
A = onnx.AttributeProto


def raw_attr(node, **fields):
    fill_attr(node.attribute.add(), **fields)
    return node


x2 = init("x", np.ones([2, 3], np.float32))
for nm, node in (
        ("ref_attr_outside_function", raw_attr(N("Softmax", ["x"], ["y"]), name="axis", type=A.INT, ref_attr_name="ax")),
        ("type_int_field_f", raw_attr(N("Softmax", ["x"], ["y"]), name="axis", type=A.INT, f=1.0)),
        ("type_undefined", raw_attr(N("Softmax", ["x"], ["y"]), name="axis", i=0)),
        ("type_ints_for_int", raw_attr(N("Softmax", ["x"], ["y"]), name="axis", type=A.INTS, ints=[0, 1])),
        ("type_tensor_for_int", raw_attr(N("Softmax", ["x"], ["y"]), name="axis", type=A.TENSOR, t=init("t", np.array(0, np.int64)))),
        ("type_graph_for_int", raw_attr(N("Softmax", ["x"], ["y"]), name="axis", type=A.GRAPH, g=helper.make_graph([], "e", [], []))),
        ("type_sparse_for_int", raw_attr(N("Softmax", ["x"], ["y"]), name="axis", type=A.SPARSE_TENSOR, i=0)),
        ("name_empty", raw_attr(N("Softmax", ["x"], ["y"]), name="", type=A.INT, i=0)),
        ("constant_two_values", N("Constant", [], ["y"], value=init("c", np.ones(2, np.float32)), value_float=1.0)),
        ("constant_no_value", N("Constant", [], ["y"])),
        ("constant_value_string", N("Constant", [], ["y"], value_string="abc")),
        ("constant_value_strings", N("Constant", [], ["y"], value_strings=["a", "b"])),
        ("constant_value_ints_empty", raw_attr(N("Constant", [], ["y"]), name="value_ints", type=A.INTS)),
        ("constant_sparse", raw_attr(N("Constant", [], ["y"]), name="sparse_value", type=A.SPARSE_TENSOR)),
        ("constant_tensor_raw_short", N("Constant", [], ["y"], value=tp("c", F, [4], raw=b"\0" * 8))),
        ("constant_tensor_int4_odd", N("Constant", [], ["y"], value=tp("c", I4, [3], raw=b"\x01"))),
        ("constant_tensor_dims_huge", N("Constant", [], ["y"], value=tp("c", F, [2**40], raw=b""))),
        ("constantofshape_value_two", N("ConstantOfShape", ["s"], ["y"], value=init("c", np.ones(2, np.float32)))),
        ("constantofshape_value_string", N("ConstantOfShape", ["s"], ["y"], value=tp("c", STR, [1], string_data=[b"a"]))),
        ("if_branch_graphs_attr", raw_attr(N("If", ["c"], ["y"], else_branch=body([N("Identity", ["x"], ["o"])], [vi("o", None)])),
                                           name="then_branch", type=A.GRAPHS, graphs=[body([N("Identity", ["x"], ["o"])], [vi("o", None)])])),
        ("if_branch_missing", N("If", ["c"], ["y"], then_branch=body([N("Identity", ["x"], ["o"])], [vi("o", None)]))),
        ("loop_body_has_inputs_missing", N("Loop", ["m", "", "x"], ["y"], body=body([N("Identity", ["x"], ["o"])], [vi("o", None)]))),
        ("scan_body_empty", N("Scan", ["x"], ["y"], num_scan_inputs=1, body=body([], []))),
        ):
    case(f"r5x_attr_{nm}", 3, model([node], [], y, [x2, i64("s", [2]), init("c", np.array(True)), i64("m", 1)]))

# ---- bodies without inputs or captures, outputs that are inputs, outer values or
# initializers (the import path of the round's UBSan finding; class 2, 6) ----
def gb(nodes, ins, outs, inits=()):
    return helper.make_graph(nodes, "b", ins, outs, list(inits))


cT = init("c", np.array(True))
wv = lambda val: helper.make_tensor("w", F, [2], [val, val])
xs1 = {"x": np.array([1, -2], np.float32)}
m3 = i64("m", 3)
it = [vi("i", [], I64), vi("cond", [], BOOL)]
for nm, m, ins, exp in (
        ("if_branch_output_is_outer", model([N("If", ["c"], ["y"], then_branch=gb([], [], [vi("x", [2])]), else_branch=gb([], [], [vi("x", [2])]))], [vi("x", [2])], y, [cT]), xs1, "ok"),
        ("if_branch_output_is_init", model([N("If", ["c"], ["y"], then_branch=gb([], [], [vi("w", [2])], [wv(1.0)]), else_branch=gb([], [], [vi("w", [2])], [wv(2.0)]))], [], y, [cT]), None, "ok"),
        ("if_branch_has_inputs", model([N("If", ["c"], ["y"], then_branch=gb([N("Neg", ["a"], ["o"])], [vi("a", [2])], [vi("o", None)]), else_branch=gb([N("Neg", ["x"], ["o"])], [], [vi("o", None)]))], [vi("x", [2])], y, [cT]), xs1, "err"),
        ("if_nested_no_captures", model([N("If", ["c"], ["y"], then_branch=gb([N("If", ["c2"], ["o"], then_branch=gb([], [], [vi("w", [2])], [wv(3.0)]), else_branch=gb([], [], [vi("w", [2])], [wv(4.0)]))], [], [vi("o", None)], [init("c2", np.array(False))]), else_branch=gb([], [], [vi("w", [2])], [wv(1.0)]))], [], y, [cT]), None, "ok"),
        ("if_two_outputs_one_value", model([N("If", ["c"], ["y", "y2"], then_branch=gb([N("Neg", ["x"], ["o"])], [], [vi("o", None), vi("o", None)]), else_branch=gb([N("Neg", ["x"], ["o"])], [], [vi("o", None), vi("o", None)]))], [vi("x", [2])], [vi("y", None), vi("y2", None)], [cT]), xs1, "ok"),
        ("loop_body_output_is_input", model([N("Loop", ["m", "", "x"], ["y"], body=gb([], it + [vi("v", None)], [vi("cond", [], BOOL), vi("v", None)]))], [vi("x", [2])], y, [m3]), xs1, "ok"),
        ("loop_body_output_is_outer", model([N("Loop", ["m", "", "x"], ["y"], body=gb([N("Identity", ["cond"], ["co"])], it + [vi("v", None)], [vi("co", [], BOOL), vi("x", None)]))], [vi("x", [2])], y, [m3]), xs1, "ok"),
        ("loop_body_outputs_iter_twice", model([N("Loop", ["m", "", "z"], ["y", "s"], body=gb([N("Identity", ["cond"], ["co"])], it + [vi("v", [], I64)], [vi("co", [], BOOL), vi("i", [], I64), vi("i", [], I64)]))], [], [vi("y", None, I64), vi("s", None, I64)], [m3, i64("z", 0)]), None, "ok"),
        ("loop_no_outputs", model([N("Loop", ["m", ""], [], body=gb([N("Identity", ["cond"], ["co"])], it, [vi("co", [], BOOL)])), N("Relu", ["x"], ["y"])], [vi("x", [2])], y, [m3]), xs1, "err"),
        ("loop_zero_trips_scan_out", model([N("Loop", ["m", "", "x"], ["y", "s"], body=gb([N("Identity", ["cond"], ["co"]), N("Identity", ["v"], ["vo"]), N("Identity", ["v"], ["so"])], it + [vi("v", None)], [vi("co", [], BOOL), vi("vo", None), vi("so", None)]))], [vi("x", [2])], [vi("y", None), vi("s", None)], [i64("m", 0)]), xs1, "ok"),
        ("scan_body_state_passthrough", model([N("Scan", ["s0", "xs"], ["y", "ys"], num_scan_inputs=1, body=gb([N("Identity", ["xi"], ["yo"])], [vi("st", None), vi("xi", None)], [vi("st", None), vi("yo", None)]))], [], [vi("y", None), vi("ys", None)], [init("s0", np.zeros([2], np.float32)), init("xs", np.ones([3, 2], np.float32))]), None, "ok"),
        ("scan_body_own_init", model([N("Scan", ["s0", "xs"], ["y", "ys"], num_scan_inputs=1, body=gb([N("Add", ["st", "w"], ["so"]), N("Identity", ["xi"], ["yo"])], [vi("st", None), vi("xi", None)], [vi("so", None), vi("yo", None)], [wv(1.0)]))], [], [vi("y", None), vi("ys", None)], [init("s0", np.zeros([2], np.float32)), init("xs", np.ones([3, 2], np.float32))]), None, "ok")):
    case(f"r5b_{nm}", 2, m, exp, inputs=ins)

with open(os.path.join(OUT, "probe.tsv"), "w") as f:
    for r in rows:
        f.write("\t".join(str(c) for c in r) + "\n")
print(len(rows), "cases")
