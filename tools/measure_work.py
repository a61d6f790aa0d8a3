#!/usr/bin/env python3
"""What one counted step (kl_node_work) of each op class costs on one core: single-op
ONNX models of the classes kl_node_work counts, and a few that it counts by their
elements, each run by build/tools/work_cost at 1 thread on kiln's default kernel and on
its portable reference kernel. The measurements behind max_work's weights
(src/runtime/work_weight.c; docs/fuzzing.md has the table).

    .venv/bin/python tools/measure_work.py BUILD_DIR OUT_DIR [--only REGEX] [--ref|--fast]

Prints one line per case and kernel: ns per step, and ns per weighed step (the weight
the session gave the node), which the weights aim at about 0.0125 (a multiply-add of a
large float32 product on one AVX-512 core). KILN_ISA=avx2 measures that level. Cases
are sized for about 0.1 to 1 s (the reference ones smaller). Not run by the tests.
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP, helper, numpy_helper

F, I64, U8, I8 = TP.FLOAT, TP.INT64, TP.UINT8, TP.INT8
CASES = []


def vi(name, dims, t=F):
    return helper.make_tensor_value_info(name, t, dims)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def rnd(*shape, lo=-1.0, hi=1.0):
    return np.random.default_rng(1).uniform(lo, hi, shape).astype(np.float32)


def model(nodes, inputs, outputs, inits=(), opset=21, domains=()):
    g = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 10
    return m


def case(name, fast=True, ref=True):
    """Registers builder(small) -> (model, {input: array}): small for a reference kernel
    (which the default one is for some ops), large for an optimized one."""
    def reg(fn):
        CASES.append((name, fn, fast, ref))
        return fn
    return reg


def one(op, x_shape, attrs=None, inits=(), extra_in=(), n_out=1, opset=21, domain="",
        x_t=F, inputs=None, out_t=None):
    """Node op on input x (and constants); out_t: the outputs' types (default x's)."""
    node = helper.make_node(op, ["x", *extra_in], [f"y{k}" for k in range(n_out)],
                            domain=domain, **(attrs or {}))
    out_t = out_t or [x_t] * n_out
    return model([node], [vi("x", x_shape, x_t)], [vi(f"y{k}", None, out_t[k]) for k in range(n_out)],
                 inits, opset, [domain] if domain else ()), inputs or {}


# ---- products ----
@case("matmul_dense")
def _(small):
    n = 256 if small else 2048
    return one("MatMul", [n, 2048], inits=[init("w", rnd(2048, 2048))], extra_in=["w"])


@case("matmul_both_inputs")
def _(small):
    n = 256 if small else 2048
    node = helper.make_node("MatMul", ["x", "w"], ["y0"])
    return model([node], [vi("x", [n, 2048]), vi("w", [2048, 2048])], [vi("y0", None)]), {}


@case("matmul_gemv")
def _(small):
    return one("MatMul", [1, 8192], inits=[init("w", rnd(8192, 8192 if not small else 1024))],
               extra_in=["w"])


@case("matmul_batched_8x8")
def _(small):
    b = 4096 if small else 262144
    node = helper.make_node("MatMul", ["x", "w"], ["y0"])
    return model([node], [vi("x", [b, 8, 8]), vi("w", [b, 8, 8])], [vi("y0", None)]), {}


@case("matmul_k1_outer")
def _(small):
    n = 1024 if small else 8192
    node = helper.make_node("MatMul", ["x", "w"], ["y0"])
    return model([node], [vi("x", [n, 1]), vi("w", [1, n])], [vi("y0", None)]), {}


@case("gemm_transb")
def _(small):
    n = 256 if small else 2048
    return one("Gemm", [n, 2048], {"transB": 1}, [init("w", rnd(2048, 2048)), init("c", rnd(2048))],
               ["w", "c"])


@case("matmulinteger_u8")
def _(small):
    n = 256 if small else 2048
    w = np.random.default_rng(2).integers(-100, 100, [2048, 2048]).astype(np.int8)
    node = helper.make_node("MatMulInteger", ["x", "w"], ["y0"])
    return model([node], [vi("x", [n, 2048], U8)], [vi("y0", None, TP.INT32)], [init("w", w)]), {
        "x": np.random.default_rng(3).integers(0, 255, [n, 2048]).astype(np.uint8)}


@case("qlinearmatmul_u8")
def _(small):
    n = 256 if small else 2048
    w = np.random.default_rng(2).integers(0, 255, [2048, 2048]).astype(np.uint8)
    s, z = init("s", np.array(0.05, np.float32)), init("z", np.array(128, np.uint8))
    node = helper.make_node("QLinearMatMul", ["x", "s", "z", "w", "s", "z", "s", "z"], ["y0"])
    return model([node], [vi("x", [n, 2048], U8)], [vi("y0", None, U8)], [s, z, init("w", w)]), {
        "x": np.random.default_rng(3).integers(0, 255, [n, 2048]).astype(np.uint8)}


# ---- convolutions: (in channels, out channels, group), 2-D 3x3 unless said ----
def conv(c, m, g, hw, k=3, op="Conv", attrs=None, rank=2):
    wshape = [c, m // g] if op == "ConvTranspose" else [m, c // g]
    w = init("w", rnd(*wshape, *([k] * rank)) * 0.1)
    a = {"group": g, "pads": [k // 2] * (2 * rank)}
    a.update(attrs or {})
    return one(op, [1, c, *hw], a, [w], ["w"])


for c, m, g, small_hw, hw in (
        (1, 1, 1, [256, 256], [2048, 2048]),        # 1 channel pair
        (64, 64, 64, [64, 64], [512, 512]),          # depthwise: 1 pair per group
        (2, 2, 1, [256, 256], [1024, 1024]),         # 4 pairs
        (4, 4, 1, [256, 256], [1024, 1024]),         # 16 pairs
        (8, 8, 1, [128, 128], [1024, 1024]),         # 64 pairs
        (32, 32, 8, [64, 64], [512, 512]),           # 16 pairs a group
        (64, 64, 1, [64, 64], [256, 256]),
        (256, 256, 1, [32, 32], [128, 128])):
    case(f"conv_{c}x{m}_g{g}")(lambda small, c=c, m=m, g=g, a=small_hw, b=hw:
                               conv(c, m, g, a if small else b))
case("conv_dw_7x7")(lambda small: conv(64, 64, 64, [64, 64] if small else [512, 512], k=7))
case("conv_dw_s2")(lambda small: conv(64, 64, 64, [64, 64] if small else [1024, 1024],
                                      attrs={"strides": [2, 2]}))
case("conv_64x64_dil2")(lambda small: conv(64, 64, 1, [32, 32] if small else [256, 256],
                                           attrs={"dilations": [2, 2], "pads": [2] * 4}))
case("conv_64x64_1x1")(lambda small: conv(64, 64, 1, [64, 64] if small else [512, 512], k=1))
case("conv3d_16x16")(lambda small: conv(16, 16, 1, [16, 16, 16] if small else [64, 64, 64],
                                        rank=3))
case("conv3d_dw")(lambda small: conv(16, 16, 16, [16, 16, 16] if small else [128, 128, 128],
                                     rank=3))
case("conv1d_1pair_3000taps")(lambda small: conv(1, 1, 1, [30000 if small else 300000], k=3000,
                                                 rank=1, attrs={"pads": [2999, 2999]}))
case("conv1d_1pair_3000taps_padded")(lambda small: conv(1, 1, 1, [30000 if small else 300000], k=3000,
                                                        rank=1, attrs={"pads": [299999, 299999]}))
case("convtranspose1d_1pair_3000taps")(lambda small: conv(1, 1, 1, [10000 if small else 100000], k=3000,
                                                          rank=1, op="ConvTranspose",
                                                          attrs={"pads": [0, 0]}))
case("conv1d_1pair_3taps")(lambda small: conv(1, 1, 1, [100000 if small else 1000000], rank=1))
case("conv1d_32x32")(lambda small: conv(32, 32, 1, [10000 if small else 100000], rank=1))
case("conv1d_dw_31taps")(lambda small: conv(64, 64, 64, [10000 if small else 100000], k=31,
                                            rank=1))
for c, m, small_l, l in ((1, 2, 30000, 300000), (1, 4, 30000, 300000), (2, 2, 30000, 300000),
                         (4, 4, 30000, 300000)):
    case(f"conv1d_{c}x{m}_3000taps")(lambda small, c=c, m=m, a=small_l, b=l:
                                     conv(c, m, 1, [a if small else b], k=3000, rank=1,
                                          attrs={"pads": [2999, 2999]}))
for c, m, g, small_hw, hw in ((1, 1, 1, [128, 128], [1024, 1024]),
                              (2, 2, 1, [128, 128], [1024, 1024]),
                              (4, 4, 1, [128, 128], [512, 512]),
                              (64, 64, 64, [32, 32], [256, 256]),
                              (64, 64, 1, [32, 32], [128, 128])):
    case(f"convtranspose_{c}x{m}_g{g}")(
        lambda small, c=c, m=m, g=g, a=small_hw, b=hw:
        conv(c, m, g, a if small else b, op="ConvTranspose",
             attrs={"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}))


@case("convinteger_64x64")
def _(small):
    hw = [32, 32] if small else [256, 256]
    w = np.random.default_rng(2).integers(-50, 50, [64, 64, 3, 3]).astype(np.int8)
    return one("ConvInteger", [1, 64, *hw], {"pads": [1] * 4}, [init("w", w)], ["w"], x_t=U8,
               out_t=[TP.INT32],
               inputs={"x": np.random.default_rng(3).integers(0, 255, [1, 64, *hw]).astype(np.uint8)})


def qconv(c, m, g, hw):
    w = np.random.default_rng(2).integers(-50, 50, [m, c // g, 3, 3]).astype(np.int8)
    ins = ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"]
    inits = [init("sx", np.array(0.05, np.float32)), init("zx", np.array(128, np.uint8)),
             init("w", w), init("sw", np.array(0.01, np.float32)), init("zw", np.array(0, np.int8)),
             init("sy", np.array(0.1, np.float32)), init("zy", np.array(128, np.uint8))]
    node = helper.make_node("QLinearConv", ins, ["y0"], group=g, pads=[1] * 4)
    return model([node], [vi("x", [1, c, *hw], U8)], [vi("y0", None, U8)], inits), {
        "x": np.random.default_rng(3).integers(0, 255, [1, c, *hw]).astype(np.uint8)}


case("qlinearconv_64x64")(lambda small: qconv(64, 64, 1, [32, 32] if small else [256, 256]))
case("qlinearconv_dw")(lambda small: qconv(64, 64, 64, [64, 64] if small else [512, 512]))


@case("deformconv_16x16")
def _(small):
    hw = [16, 16] if small else [64, 64]
    w = init("w", rnd(16, 16, 3, 3) * 0.1)
    off = init("off", rnd(1, 18, *hw))
    node = helper.make_node("DeformConv", ["x", "w", "off"], ["y0"], pads=[1] * 4)
    return model([node], [vi("x", [1, 16, *hw])], [vi("y0", None)], [w, off], opset=22), {}


# ---- pooling ----
def pool(op, shape, k, attrs=None, x_t=F, inputs=None, domain=""):
    a = {"kernel_shape": k, "strides": [1] * len(k)}
    a.update(attrs or {})
    return one(op, shape, a, x_t=x_t, inputs=inputs, domain=domain)


case("maxpool_3x3")(lambda small: pool("MaxPool", [1, 64, 64 if small else 512, 512], [3, 3]))
case("maxpool_32x32")(lambda small: pool("MaxPool", [1, 16, 64 if small else 256, 256], [32, 32]))
case("averagepool_32x32")(lambda small: pool("AveragePool", [1, 16, 64 if small else 256, 256],
                                             [32, 32]))
case("averagepool_32x32_ceil")(lambda small: pool("AveragePool", [1, 16, 64 if small else 256, 256],
                                                  [32, 32], {"ceil_mode": 1, "strides": [2, 2]}))
case("maxpool_dil2_9x9")(lambda small: pool("MaxPool", [1, 16, 64 if small else 256, 256], [9, 9],
                                            {"dilations": [2, 2]}))
case("lppool_16x16")(lambda small: pool("LpPool", [1, 16, 64 if small else 256, 256], [16, 16]))
case("maxpool1d_4096")(lambda small: pool("MaxPool", [1, 4, 1 << (15 if small else 17)], [4096]))
case("maxpool3d_8")(lambda small: pool("MaxPool", [1, 8, 32, 32, 32 if small else 128], [8, 8, 8]))
case("maxpool1d_4096_c64")(lambda small: pool("MaxPool", [1, 64, 1 << (13 if small else 14)], [4096]))
case("maxpool_64x64_c4")(lambda small: pool("MaxPool", [1, 4, 128 if small else 512, 512], [64, 64]))
case("averagepool1d_4096")(lambda small: pool("AveragePool", [1, 4, 1 << (13 if small else 16)], [4096]))
case("nhwc_maxpool_c1_64x64")(lambda small: pool("NhwcMaxPool", [1, 128 if small else 512, 512, 1],
                                                  [64, 64], domain="kiln"))
case("nhwc_avgpool_c16_32x32")(lambda small: pool("NhwcAveragePool", [1, 64 if small else 256, 256, 16],
                                                  [32, 32], domain="kiln"))
case("maxpool_u8_16x16")(lambda small: pool(
    "MaxPool", [1, 16, 64 if small else 256, 256], [16, 16], x_t=U8,
    inputs={"x": np.random.default_rng(3).integers(0, 255, [1, 16, 64 if small else 256, 256])
            .astype(np.uint8)}))


@case("qlinearaveragepool_16x16")
def _(small):
    shape = [1, 16, 64 if small else 256, 256]
    s, z = init("s", np.array(0.05, np.float32)), init("z", np.array(128, np.uint8))
    node = helper.make_node("QLinearAveragePool", ["x", "s", "z", "s", "z"], ["y0"],
                            domain="com.microsoft", kernel_shape=[16, 16])
    return model([node], [vi("x", shape, U8)], [vi("y0", None, U8)], [s, z],
                 domains=["com.microsoft"]), {
        "x": np.random.default_rng(3).integers(0, 255, shape).astype(np.uint8)}


@case("col2im_8x8")
def _(small):
    # [N, C * 8 * 8, L] blocks of 8x8 back into a 256x256 (64x64) image, stride 1
    hw = 64 if small else 256
    L = (hw - 7) ** 2
    node = helper.make_node("Col2Im", ["x", "is", "bs"], ["y0"])
    return model([node], [vi("x", [1, 4 * 64, L])], [vi("y0", None)],
                 [init("is", np.array([hw, hw], np.int64)), init("bs", np.array([8, 8], np.int64))],
                 opset=18), {}


# ---- recurrent ----
def rnn(op, gates, seq, batch, inp, hidden):
    w = init("w", rnd(1, gates * hidden, inp) * 0.1)
    r = init("r", rnd(1, gates * hidden, hidden) * 0.1)
    node = helper.make_node(op, ["x", "w", "r"], ["y0"], hidden_size=hidden)
    return model([node], [vi("x", [seq, batch, inp])], [vi("y0", None)], [w, r]), {}


for op, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
    case(f"{op.lower()}_h256_b1")(lambda small, op=op, g=gates:
                                   rnn(op, g, 50 if small else 1000, 1, 256, 256))
    case(f"{op.lower()}_h256_b32")(lambda small, op=op, g=gates:
                                    rnn(op, g, 20 if small else 200, 32, 256, 256))
    case(f"{op.lower()}_h8_b1")(lambda small, op=op, g=gates:
                                 rnn(op, g, 20000 if small else 200000, 1, 8, 8))
    case(f"{op.lower()}_h1_i1")(lambda small, op=op, g=gates:
                                 rnn(op, g, 100000 if small else 1000000, 1, 1, 1))


# ---- others kl_node_work counts ----
@case("det_64")
def _(small):
    return one("Det", [256 if small else 4096, 64, 64])


case("det_1024", fast=False)(lambda small: one("Det", [4, 1024, 1024]))


@case("topk_k100_random")
def _(small):
    return one("TopK", [64, 1 << (16 if small else 20)], inits=[init("k", np.array([100], np.int64))],
               extra_in=["k"], n_out=2, out_t=[F, I64])


@case("topk_k100_ascending")
def _(small):
    n = 1 << (16 if small else 20)
    x = np.tile(np.arange(n, dtype=np.float32), (16, 1))
    return one("TopK", [16, n], inits=[init("k", np.array([100], np.int64))], extra_in=["k"],
               n_out=2, inputs={"x": x}, out_t=[F, I64])


@case("topk_k4096_ascending")
def _(small):
    n = 1 << (14 if small else 18)
    x = np.tile(np.arange(n, dtype=np.float32), (4, 1))
    return one("TopK", [4, n], inits=[init("k", np.array([4096], np.int64))], extra_in=["k"],
               n_out=2, inputs={"x": x}, out_t=[F, I64])


@case("topk_k1_random")
def _(small):
    return one("TopK", [64, 1 << (16 if small else 22)], inits=[init("k", np.array([1], np.int64))],
               extra_in=["k"], n_out=2, out_t=[F, I64])


def einsum(eq, *shapes, consts=()):
    names = [f"x{k}" if k else "x" for k in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y0"], equation=eq)
    ins = [vi(nm, s) for nm, s in zip(names, shapes)]
    return model([node], ins, [vi("y0", None)], consts), {}


case("einsum_matmul")(lambda small: einsum("ij,jk->ik", [128 if small else 1024, 1024], [1024, 1024]))
case("einsum_bmm")(lambda small: einsum("bij,bjk->bik", [8, 128, 256 if small else 1024],
                                        [8, 256 if small else 1024, 256]))
case("einsum_generic_3")(lambda small: einsum("abc,cd,bd->a", [64, 64 if small else 256, 64],
                                              [64, 256], [64 if small else 256, 256]))
case("einsum_outer_sum")(lambda small: einsum("a,b,c->", [256], [256], [64 if small else 1024]))
case("einsum_attention_scores")(lambda small: einsum("bhqd,bhkd->bhqk", [1, 8, 128 if small else 512, 64],
                                                      [1, 8, 512, 64]))
case("einsum_matmul_wide")(lambda small: einsum("ij,jk->ik", [4 if small else 16, 1024], [1024, 65536]))
case("einsum_trace_like")(lambda small: einsum("ii->i", [2048 if small else 16384] * 2))


def dft(n, batch, onesided=0, prime=False):
    node = helper.make_node("DFT", ["x", "", "ax"], ["y0"], onesided=onesided)
    return model([node], [vi("x", [batch, n, 1])], [vi("y0", None)],
                 [init("ax", np.array(1, np.int64))], opset=20), {}


case("dft_4096")(lambda small: dft(4096, 256 if small else 4096))
case("dft_prime_4099")(lambda small: dft(4099, 64 if small else 1024))
case("dft_prime_100003")(lambda small: dft(100003, 4 if small else 32))
case("dft_4096_onesided")(lambda small: dft(4096, 256 if small else 4096, onesided=1))


@case("stft_512_hop128")
def _(small):
    n = 1 << (17 if small else 22)
    node = helper.make_node("STFT", ["x", "st", "win"], ["y0"])
    return model([node], [vi("x", [1, n, 1])], [vi("y0", None)],
                 [init("st", np.array(128, np.int64)), init("win", np.hanning(512).astype(np.float32))],
                 opset=17), {}


def roialign(rois, ratio, image, out=7, mode="avg"):
    r = np.random.default_rng(4)
    x0 = r.uniform(0, image / 2, rois)
    y0 = r.uniform(0, image / 2, rois)
    boxes = np.stack([x0, y0, x0 + image / 2, y0 + image / 2], 1).astype(np.float32)
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y0"], output_height=out,
                            output_width=out, sampling_ratio=ratio, mode=mode)
    return model([node], [vi("x", [1, 64, image, image])], [vi("y0", None)],
                 [init("r", boxes), init("b", np.zeros([rois], np.int64))], opset=16), {}


case("roialign_ratio2")(lambda small: roialign(100 if small else 1000, 2, 64))
case("roialign_ratio16")(lambda small: roialign(100 if small else 1000, 16, 64))
case("roialign_adaptive_big")(lambda small: roialign(4 if small else 32, 0, 256, out=4))
case("roialign_max_ratio8")(lambda small: roialign(100 if small else 1000, 8, 64, mode="max"))


def attention(b, h, s, d, kiln_mha=False):
    if kiln_mha:  # what fuse_transformer makes of a BERT's attention
        node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y0"], num_heads=h,
                                domain="kiln")
        ins = [vi(n, [b, s, h * d]) for n in "qkv"]
        return model([node], ins, [vi("y0", None)], domains=["kiln"]), {}
    node = helper.make_node("Attention", ["q", "k", "v"], ["y0"])
    ins = [vi(n, [b, h, s, d]) for n in "qkv"]
    return model([node], ins, [vi("y0", None)], opset=23), {}


case("attention_onnx_s1024")(lambda small: attention(1, 8, 256 if small else 2048, 64))
case("attention_mha_s1024")(lambda small: attention(1, 8, 256 if small else 2048, 64, True))
case("attention_kiln_s1024")(lambda small: kiln_attention(8, 256 if small else 2048, 64))
case("attention_onnx_d1")(lambda small: attention(1, 1, 1024 if small else 8192, 1))


def kiln_attention(heads, s, d):
    """kiln.Attention (Q, Kt, V): one head a batch row, K given transposed."""
    node = helper.make_node("Attention", ["q", "kt", "v"], ["y0"], domain="kiln")
    ins = [vi("q", [heads, s, d]), vi("kt", [heads, d, s]), vi("v", [heads, s, d])]
    return model([node], ins, [vi("y0", None)], domains=["kiln"]), {}


def nms(boxes, overlap):
    r = np.random.default_rng(5)
    if overlap:  # every box over every other: each candidate compared with every kept one
        b = np.tile(np.array([[0, 0, 10, 10]], np.float32), (boxes, 1))
        b += r.uniform(0, 0.01, b.shape).astype(np.float32)
    else:  # disjoint boxes: all kept
        x = np.arange(boxes, dtype=np.float32) * 20
        b = np.stack([x, np.zeros(boxes), x + 10, np.full(boxes, 10)], 1).astype(np.float32)
    sc = r.uniform(0, 1, [1, 1, boxes]).astype(np.float32)
    node = helper.make_node("NonMaxSuppression", ["x", "sc", "mo", "iou"], ["y0"])
    return model([node], [vi("x", [1, boxes, 4]), vi("sc", [1, 1, boxes])], [vi("y0", None, I64)],
                 [init("mo", np.array([boxes], np.int64)),
                  init("iou", np.array([1.0 if overlap else 0.5], np.float32))]), {
        "x": b[None], "sc": sc}


case("nms_disjoint")(lambda small: nms(3000 if small else 30000, False))
case("nms_overlap_iou1")(lambda small: nms(3000 if small else 30000, True))
case("nms_overlap_iou1_60000", fast=False)(lambda small: nms(60000, True))


@case("unique_flat")
def _(small):
    return one("Unique", [1 << (18 if small else 23)], n_out=1)


@case("unique_axis0_rows")
def _(small):
    return one("Unique", [1 << (14 if small else 19), 16], {"axis": 0}, n_out=1)


case("lrn_size5")(lambda small: one("LRN", [1, 64, 64 if small else 256, 256], {"size": 5}))
case("lrn_size63")(lambda small: one("LRN", [1, 128, 32 if small else 128, 128], {"size": 63}))

# ---- ops kl_node_work counts by their elements (inputs plus outputs) ----
case("add")(lambda small: one("Add", [1 << (20 if small else 26)], inits=[init("b", rnd(1))],
                              extra_in=["b"]))
case("erf")(lambda small: one("Erf", [1 << (20 if small else 25)]))
case("pow")(lambda small: one("Pow", [1 << (20 if small else 24)], inits=[init("e", rnd(1) + 2)],
                              extra_in=["e"]))
case("softmax")(lambda small: one("Softmax", [1024, 1024 if small else 16384]))
case("layernorm")(lambda small: one("LayerNormalization", [1024, 1024 if small else 16384],
                                    inits=[init("s", rnd(1024 if small else 16384))],
                                    extra_in=["s"]))
case("reducesum_last")(lambda small: one("ReduceSum", [1024, 1024 if small else 16384],
                                         inits=[init("a", np.array([1], np.int64))], extra_in=["a"]))
case("reducemax_first")(lambda small: one("ReduceMax", [1024 if small else 16384, 1024],
                                          inits=[init("a", np.array([0], np.int64))], extra_in=["a"],
                                          opset=18))
case("cumsum")(lambda small: one("CumSum", [1024, 1024 if small else 16384],
                                 inits=[init("a", np.array(1, np.int64))], extra_in=["a"]))
case("transpose")(lambda small: one("Transpose", [1024, 1024 if small else 16384], {"perm": [1, 0]}))
case("gather_rows")(lambda small: one("Gather", [65536, 64], inits=[init(
    "i", np.random.default_rng(6).integers(0, 65536, [1 << (16 if small else 20)]))], extra_in=["i"]))
case("gatherelements")(lambda small: one("GatherElements", [1024, 1024 if small else 8192], {"axis": 1},
                                         inits=[init("i", np.random.default_rng(6).integers(
                                             0, 1024, [1024, 1024 if small else 8192]))],
                                         extra_in=["i"]))
case("resize_cubic_x4")(lambda small: one("Resize", [1, 16, 64 if small else 512, 512],
                                          {"mode": "cubic"}, [init("sc", np.array([1, 1, 4, 4], np.float32))],
                                          ["", "sc"]))
case("resize_nearest_x4")(lambda small: one("Resize", [1, 16, 64 if small else 512, 512],
                                            {"mode": "nearest"}, [init("sc", np.array([1, 1, 4, 4], np.float32))],
                                            ["", "sc"]))
case("resize_linear_x4")(lambda small: one("Resize", [1, 16, 64 if small else 512, 512],
                                           {"mode": "linear"}, [init("sc", np.array([1, 1, 4, 4], np.float32))],
                                           ["", "sc"]))
case("resize_cubic_antialias_down8")(lambda small: one(
    "Resize", [1, 4, 512 if small else 4096, 4096], {"mode": "cubic", "antialias": 1},
    [init("sc", np.array([1, 1, 0.125, 0.125], np.float32))], ["", "sc"], opset=18))


@case("gridsample_bicubic")
def _(small):
    hw = 128 if small else 1024
    g = rnd(1, hw, hw, 2)
    node = helper.make_node("GridSample", ["x", "g"], ["y0"], mode="cubic")
    return model([node], [vi("x", [1, 16, hw, hw]), vi("g", [1, hw, hw, 2])], [vi("y0", None)],
                 opset=20), {"g": g}


@case("gridsample_bilinear")
def _(small):
    hw = 128 if small else 1024
    node = helper.make_node("GridSample", ["x", "g"], ["y0"])
    return model([node], [vi("x", [1, 16, hw, hw]), vi("g", [1, hw, hw, 2])], [vi("y0", None)],
                 opset=20), {"g": rnd(1, hw, hw, 2)}


case("pad_reflect")(lambda small: one("Pad", [1, 16, 256 if small else 2048, 2048], {"mode": "reflect"},
                                      [init("p", np.array([0, 0, 8, 8, 0, 0, 8, 8], np.int64))], ["p"]))
case("instancenorm")(lambda small: one("InstanceNormalization", [1, 64, 64 if small else 512, 512],
                                       inits=[init("s", rnd(64)), init("b", rnd(64))],
                                       extra_in=["s", "b"]))
case("groupnorm")(lambda small: one("GroupNormalization", [1, 64, 64 if small else 512, 512],
                                    {"num_groups": 8}, [init("s", rnd(64)), init("b", rnd(64))],
                                    ["s", "b"]))
case("argmax")(lambda small: one("ArgMax", [1024, 1024 if small else 16384], {"axis": 1}, out_t=[I64]))
case("nonzero")(lambda small: one("NonZero", [1 << (20 if small else 24)], out_t=[I64]))
case("trilu")(lambda small: one("Trilu", [64, 1024 if small else 4096, 1024]))
case("scatternd")(lambda small: one("ScatterND", [1 << (16 if small else 20), 64], inits=[
    init("i", np.random.default_rng(6).integers(0, 1 << (16 if small else 20), [1 << 14, 1])),
    init("u", rnd(1 << 14, 64))], extra_in=["i", "u"]))
case("mod_int")(lambda small: one("Mod", [1 << (20 if small else 24)], x_t=TP.INT64,
                                  inits=[init("d", np.array([7], np.int64))], extra_in=["d"],
                                  inputs={"x": np.arange(1 << (20 if small else 24), dtype=np.int64)}))
case("cast_f32_i64")(lambda small: one("Cast", [1 << (20 if small else 25)], {"to": I64}, out_t=[I64]))
case("reversesequence")(lambda small: one("ReverseSequence", [1024 if small else 8192, 1024],
                                          {"batch_axis": 1, "time_axis": 0},
                                          [init("l", np.full([1024], 1024 if small else 8192, np.int64))],
                                          ["l"]))


def parse(out):
    rows = []
    for line in out.splitlines():
        m = re.match(r"(\S+)\s+(.*?)\s+steps\s+(\S+)\s+weight\s+(\S+)\s+(\S+) ms\s+(\S+) ns/step\s+(\S+)",
                     line)
        if m:
            rows.append((m.group(1), m.group(2), float(m.group(3)), float(m.group(4)),
                         float(m.group(5)), float(m.group(6)), float(m.group(7))))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--only", default=".")
    ap.add_argument("--ref", action="store_true", help="the reference kernels only")
    ap.add_argument("--fast", action="store_true", help="the default kernels only")
    ap.add_argument("--seconds", default="1")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tool = os.path.join(a.build, "tools", "work_cost")
    modes = [m for m, skip in (("fast", a.ref), ("ref", a.fast)) if not skip]
    print(f"# KILN_ISA={os.environ.get('KILN_ISA', '(native)')}")
    print(f"{'case':30} {'kernel':6} {'op':20} {'steps':>10} {'weight':>7} {'ms':>9} "
          f"{'ns/step':>9} {'ns/weighed':>10}  implementation")
    for name, fn, fast, ref in CASES:
        if not re.search(a.only, name):
            continue
        # the small size first on either kernel; the large one only where the default
        # kernel is not the reference (the small run says which)
        runs = [("ref", True)] if "ref" in modes and ref else []
        if "fast" in modes and fast:
            runs.append(("fast", True))
        for mode, small in runs:
            rows, err = measure(tool, a, name, fn, mode, small)
            if mode == "fast" and rows and any(kernel != "ref" for _, kernel, *_ in rows):
                rows, err = measure(tool, a, name, fn, mode, False)
            if not rows:
                print(f"{name:30} {mode:6} FAILED: {err[:200]}")
                continue
            for op, kernel, steps, weight, ms, ns, nsw in rows:
                print(f"{name:30} {mode:6} {op:20} {steps:10.3g} {weight:7g} {ms:9.2f} {ns:9.4f} "
                      f"{nsw:10.5f}  {kernel}")
            sys.stdout.flush()


def measure(tool, a, name, fn, mode, small):
    m, inputs = fn(small)
    tag = f"{name}_{mode}{'_small' if small else ''}"
    path = os.path.join(a.out, tag + ".onnx")
    onnx.save(m, path)
    args = [tool, path, "--seconds", a.seconds] + (["--reference"] if mode == "ref" else [])
    for k, v in inputs.items():
        p = os.path.join(a.out, f"{tag}.{k}.npy")
        np.save(p, v)
        args += ["--input", f"{k}={p}"]
    r = subprocess.run(args, capture_output=True, text=True)
    return (parse(r.stdout) if r.returncode == 0 else []), r.stderr.strip()

if __name__ == "__main__":
    main()
