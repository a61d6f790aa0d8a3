#!/usr/bin/env python3
"""Issue 20, round 3: hostile cases aimed at the default compute bound itself. For each
class of slow kernel (src/ir/work_weight.c), a file of a few hundred bytes whose one
heavy node weighs just under the default max_work (2^39) at the AVX-512 levels, run on
one thread: it must finish within the probe's 10 s; and the same node at about twice
the size, which must be refused at once. Same output as make_probe.py (a scratch
folder and its probe.tsv), run by the same runner:

    .venv/bin/python tests/corpus/make_probe_r3.py OUTDIR
    tests/corpus/run_probe.sh KILN OUTDIR [CAP_KB]

Sizes follow the weights at the AVX-512 levels (at avx2 some "under" cases weigh over
the bound and are refused, which the probe reports as REFUSED). Not part of the test
suite; docs/fuzzing.md has the results.
"""
import os
import sys

import numpy as np
from onnx import TensorProto as TP, helper, numpy_helper

from make_probe import vi, init

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
F, I64, U8 = TP.FLOAT, TP.INT64, TP.UINT8
rows = []


def model(nodes, outputs, inits, opset=21, domains=()):
    g = helper.make_graph(list(nodes), "g", [], list(outputs), list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 10
    return m


def const_of(name, shape, value=0.5, dtype=np.float32):
    """ConstantOfShape: a large tensor from a few bytes."""
    return [init(name + "_shape", np.array(shape, np.int64))], [
        helper.make_node("ConstantOfShape", [name + "_shape"], [name],
                         value=numpy_helper.from_array(np.array([value], dtype)))]


def ramp(name, n, shape):
    """Range(0, n) reshaped: distinct ascending values (the worst order for TopK)."""
    return [init(name + "_start", np.array(0, np.float32)), init(name + "_end", np.array(n, np.float32)),
            init(name + "_one", np.array(1, np.float32)),
            init(name + "_shape", np.array(shape, np.int64))], [
        helper.make_node("Range", [name + "_start", name + "_end", name + "_one"], [name + "_flat"]),
        helper.make_node("Reshape", [name + "_flat", name + "_shape"], [name])]


def pair(name, make, small, large, opset=21, domains=()):
    """Two cases: make(size) just under the bound (must run within 10 s on one thread)
    and over it (must be refused)."""
    for tag, size, expect, args in (("under", small, "ok", "--threads 1"),
                                    ("over", large, "err", "--threads 1")):
        nodes, outputs, inits = make(size)
        m = model(nodes, outputs, inits, opset, domains)
        path = os.path.join(OUT, f"r3_{name}_{tag}.onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        rows.append((f"r3_{name}_{tag}", 1, expect, f"run r3_{name}_{tag}.onnx {args}"))


# Reductions keep the outputs small (the runner prints them): ReduceSum of all of y.
def summed(nodes, y="y"):
    return nodes + [helper.make_node("ReduceSum", [y], ["s"], keepdims=0)], [vi("s", None)]


# the reference Einsum (8192 units a step): i x j x k steps of its slowest pattern
def einsum(i):
    ia, na = const_of("a", [i, 1024])
    ib, nb = const_of("b", [1024, 4096])
    nodes, outs = summed(na + nb + [helper.make_node("Einsum", ["a", "b"], ["y"],
                                                     equation="ij,jk->ik")])
    return nodes, outs, ia + ib


pair("einsum_ref", einsum, 16, 32)


# a convolution of one channel pair (96 a step on oneDNN): 30000 taps over L outputs
def conv_1pair(n_out):
    ix, nx = const_of("x", [1, 1, n_out + 29999])
    nodes, outs = summed(nx + [helper.make_node("Conv", ["x", "w"], ["y"])])
    return nodes, outs, ix + [init("w", np.full([1, 1, 30000], 1e-4, np.float32))]


pair("conv_1pair_30000taps", conv_1pair, 190000, 400000)


# depthwise, 31 x 31 taps (one pair a group)
def conv_dw(hw):
    ix, nx = const_of("x", [1, 16, hw + 30, hw + 30])
    nodes, outs = summed(nx + [helper.make_node("Conv", ["x", "w"], ["y"], group=16)])
    return nodes, outs, ix + [init("w", np.full([16, 1, 31, 31], 1e-3, np.float32))]


pair("conv_dw_31x31", conv_dw, 600, 860)


# ConvTranspose of one pair (192 a step), 31 x 31 taps, stride 2
def deconv(hw):
    ix, nx = const_of("x", [1, 1, hw, hw])
    nodes, outs = summed(nx + [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])])
    return nodes, outs, ix + [init("w", np.full([1, 1, 31, 31], 1e-3, np.float32))]


pair("convtranspose_1pair", deconv, 840, 1200)


# kiln.NhwcMaxPool of one channel (192 a step): a 64 x 64 window
def nhwc_pool(hw):
    ix, nx = const_of("x", [1, hw + 63, hw + 63, 1])
    nodes, outs = summed(nx + [helper.make_node("NhwcMaxPool", ["x"], ["y"], domain="kiln",
                                                kernel_shape=[64, 64])])
    return nodes, outs, ix


pair("nhwc_maxpool_c1", nhwc_pool, 830, 1180, domains=["kiln"])


# a 1-D MaxPool wider than the optimized kernel's buffers: the reference takes it (768)
def wide_pool(n_out):
    ix, nx = const_of("x", [1, 4, n_out + 4095])
    nodes, outs = summed(nx + [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[4096])])
    return nodes, outs, ix


pair("maxpool_1d_4096_taps", wide_pool, 43000, 90000)


# LpPool (the reference only, 1536 a step): 16 x 16 windows
def lppool(hw):
    ix, nx = const_of("x", [1, 16, hw + 15, hw + 15])
    nodes, outs = summed(nx + [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[16, 16])])
    return nodes, outs, ix


pair("lppool_16x16", lppool, 290, 420)


# TopK (256 a step, counted as rows x k) over ascending values: every one enters the heap
def topk(n):
    ix, nx = ramp("x", n, [1, n])
    nodes, outs = summed(nx + [helper.make_node("TopK", ["x", "k"], ["y", "i"])])
    return nodes, outs, ix + [init("k", np.array([100], np.int64))]


pair("topk_ascending_k100", topk, 21000000, 44000000)


# RoiAlign, mode max, 8 x 8 samples a bin (96 a step)
def roialign(rois):
    ix, nx = const_of("x", [1, 64, 64, 64])
    nodes = nx + [helper.make_node("Tile", ["box", "reps"], ["r"]),
                  helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], mode="max",
                                   sampling_ratio=8, output_height=7, output_width=7)]
    nodes, outs = summed(nodes)
    return nodes, outs, ix + [init("box", np.array([[0, 0, 60, 60]], np.float32)),
                              init("reps", np.array([rois, 1], np.int64)),
                              init("b", np.zeros([rois], np.int64))]


pair("roialign_max_ratio8", roialign, 7000, 15000)


# an LSTM of hidden size 1 (3 a step; 8192 counted for each step's gates and loop)
def lstm(seq):
    ix, nx = const_of("x", [seq, 1, 1])
    nodes, outs = summed(nx + [helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=1)])
    return nodes, outs, ix + [init("w", np.full([1, 4, 1], 0.5, np.float32)),
                              init("r", np.full([1, 4, 1], 0.5, np.float32))]


pair("lstm_hidden_1", lstm, 22000000, 45000000)


# DFT of a prime length (Bluestein; 48 a step, 5.1e7 steps a line)
def dft(lines):
    ix, nx = const_of("x", [lines, 100003, 1])
    nodes, outs = summed(nx + [helper.make_node("DFT", ["x", "", "ax"], ["y"])])
    return nodes, outs, ix + [init("ax", np.array(1, np.int64))]


pair("dft_prime_100003", dft, 220, 460, opset=20)


# Unique (the reference only, 3072 a step): a merge sort of n distinct values
def unique(n):
    ix, nx = ramp("x", n, [n])
    nodes, outs = summed(nx + [helper.make_node("Unique", ["x"], ["y"])])
    return nodes, outs, ix


pair("unique_sort", unique, 7200000, 15000000)


# Resize, cubic (6144 an element): x4 on a 2048^2 image
def resize(hw):
    ix, nx = const_of("x", [1, 1, hw, hw])
    nodes, outs = summed(nx + [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="cubic")])
    return nodes, outs, ix + [init("sc", np.array([1, 1, 4, 4], np.float32))]


pair("resize_cubic", resize, 2000, 2900)


# GridSample, cubic (the reference only, 2048 an element)
def gridsample(hw):
    ix, nx = const_of("x", [1, 16, hw, hw])
    ig, ng = const_of("g", [1, hw, hw, 2], 0.25)
    nodes, outs = summed(nx + ng + [helper.make_node("GridSample", ["x", "g"], ["y"], mode="cubic")])
    return nodes, outs, ix + ig


pair("gridsample_cubic", gridsample, 2000, 3000, opset=20)


# ONNX Attention (the reference only, 256 a step), head width 1: 4 S^2 steps
def attention(s):
    iq, nq = const_of("q", [1, 1, s, 1])
    nodes, outs = summed(nq + [helper.make_node("Attention", ["q", "q", "q"], ["y"])])
    return nodes, outs, iq


pair("attention_width_1", attention, 23000, 33000, opset=23)


# LRN (the reference only, 384 a step), size 63
def lrn(hw):
    ix, nx = const_of("x", [1, 128, hw, hw])
    nodes, outs = summed(nx + [helper.make_node("LRN", ["x"], ["y"], size=63)])
    return nodes, outs, ix


pair("lrn_size63", lrn, 415, 600)


# Det (the reference only, 12 a step) of 1024 x 1024 matrices of no pattern (a constant
# one is singular at the first column, which ends the elimination): cos(0.37 i j + i +
# 1.3 j), one matrix expanded to the batch
def det(batch):
    ii, ni = ramp("i", 1024, [1024, 1])
    ij, nj = ramp("j", 1024, [1, 1024])
    nodes = ni + nj + [helper.make_node("Mul", ["i", "j"], ["ij"]),
                       helper.make_node("Mul", ["ij", "c37"], ["a"]),
                       helper.make_node("Mul", ["j", "c13"], ["b"]),
                       helper.make_node("Add", ["a", "i"], ["ab"]),
                       helper.make_node("Add", ["ab", "b"], ["m"]),
                       helper.make_node("Cos", ["m"], ["one"]),
                       helper.make_node("Expand", ["one", "bs"], ["x"]),
                       helper.make_node("Det", ["x"], ["y"])]
    nodes, outs = summed(nodes)
    return nodes, outs, ii + ij + [init("c37", np.array(0.37, np.float32)),
                                   init("c13", np.array(1.3, np.float32)),
                                   init("bs", np.array([batch, 1024, 1024], np.int64))]


pair("det_1024", det, 40, 90)


# NonMaxSuppression (the reference only, 96 a step) of boxes that all overlap and are
# all kept (IoU threshold 1): every candidate against every kept box
def nms(n):
    ib, nb = const_of("ones", [1, n, 1])
    ns, nsc = const_of("sc", [1, 1, n], 0.5)
    nodes = nb + nsc + [helper.make_node("Mul", ["ones", "box"], ["bx"]),
                        helper.make_node("NonMaxSuppression", ["bx", "sc", "mo", "iou"], ["y"])]
    return nodes, [vi("y", None, I64)], ib + ns + [
        init("box", np.array([[[0, 0, 10, 10]]], np.float32)),
        init("mo", np.array([n], np.int64)), init("iou", np.array([1.0], np.float32))]


pair("nms_all_kept", nms, 53000, 110000)


# DeformConv (the reference only, 3072 a step), 32 x 32 channels
def deform(hw):
    ix, nx = const_of("x", [1, 32, hw, hw])
    io, no = const_of("off", [1, 18, hw, hw], 0.25)
    nodes, outs = summed(nx + no + [helper.make_node("DeformConv", ["x", "w", "off"], ["y"],
                                                     pads=[1, 1, 1, 1])])
    return nodes, outs, ix + io + [init("w", np.full([32, 32, 3, 3], 1e-3, np.float32))]


pair("deformconv_32x32", deform, 128, 180, opset=22)


# QLinearMatMul (the reference only, 768 a step)
def qmatmul(m):
    ia, na = const_of("a", [m, 1024], 3, np.uint8)
    ib, nb = const_of("b", [1024, 1024], 5, np.uint8)
    q = [init("s", np.array(0.1, np.float32)), init("z", np.array(0, np.uint8))]
    nodes = na + nb + [helper.make_node("QLinearMatMul", ["a", "s", "z", "b", "s", "z", "s", "z"],
                                        ["y"])]
    return nodes, [vi("y", None, U8)], ia + ib + q


pair("qlinearmatmul", qmatmul, 640, 1400)

# A 1-D convolution of 3 taps over a long signal: few steps, but oneDNN's brgconv
# primitive takes memory and time by the output's width to create
for n, tag in ((3000000, "3e6"), (9000000, "9e6")):
    ix, nx = const_of("x", [1, 1, n])
    nodes, outs = summed(nx + [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])])
    m = model(nodes, outs, ix + [init("w", np.full([1, 1, 3], 0.25, np.float32))])
    with open(os.path.join(OUT, f"r3_conv1d_3taps_{tag}.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    rows.append((f"r3_conv1d_3taps_{tag}", 1, "any", f"run r3_conv1d_3taps_{tag}.onnx --threads 1"))

with open(os.path.join(OUT, "probe.tsv"), "w") as f:
    for r in rows:
        f.write("\t".join(str(c) for c in r) + "\n")
print(len(rows), "cases")
