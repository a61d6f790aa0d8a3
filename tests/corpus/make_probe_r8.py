#!/usr/bin/env python3
"""Issue 20, round 8: FRESH hostile cases of kinds rounds 1 to 7 did not use: kiln's own
int8 kernels (kiln_qgemm behind MatMulInteger, the qgemv behind QLinearGemm, the uint8
depthwise convolution, the AVX2 QLinearAdd / QLinearMul loops) fed codes, zero points
and scales at their edges (weights of -128 and 127 beside 7-bit ones, K of 1 to 65,536,
rows past a panel, denormal, huge, zero, NaN and inf scales) and compared with
onnxruntime (`cmp:ort`); kiln's int8 ops read from a file (QLinearGemm, QLinearLookup,
QLinearAdd, QLinearMul, QLinearAveragePool, QLinearGlobalAveragePool,
MatMulIntegerToFloat) with tables, scales and zero points of other lengths, dtypes and
ranks, given at run time; control flow (Loops without a trip count whose condition stays
true, nested Loops whose trips multiply, Scans over empty-but-huge inputs, bodies whose
outputs disagree with their node); the OpenCL backend (PoCL) fed the same hostile
shapes and values, each compared with the CPU's outputs (`cmp:cpu`); `kiln quantize`
(--exclude patterns that match nothing, calibration data of NaN, inf, zeros and no
rows, weights of NaN, inf, 3e38, zeros and no elements, --dynamic on models without a
product); `kiln check` folders with test data of other dtypes, names and shapes; and
ONNX external data not probed before (a sparse initializer's values, strings, a
location through a folder link inside the model's folder, 4,000-character locations).
Same output as make_probe.py (a scratch folder and its probe.tsv), run by the same
runner; the comparisons by tests/corpus/probe_cmp_r8.py:

    .venv/bin/python tests/corpus/make_probe_r8.py /tmp/p8
    tests/corpus/run_probe.sh KILN /tmp/p8 [CAP_KB] > RESULTS
    .venv/bin/python tests/corpus/probe_cmp_r8.py /tmp/p8 KILN RESULTS

Every file, link and output of the cases lies inside the scratch folder (which should
be under /tmp): no case names a system file as something kiln writes.

Not part of the test suite: docs/fuzzing.md ("Round 8") has the results.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP, helper, numpy_helper

from make_probe import init, vi
from probe_lib import Probe, model

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
F, I64, I32, U8, I8, BOOL = TP.FLOAT, TP.INT64, TP.INT32, TP.UINT8, TP.INT8, TP.BOOL
IMAX, IMIN = 2**63 - 1, -2**63
P = Probe(OUT)
rows = P.rows
case, one = P.case, P.one
N = helper.make_node
y = [vi("y", None)]
rng = np.random.default_rng(8)
sc = lambda n, v: init(n, np.array(v, np.float32))
i64 = lambda n, v: init(n, np.array(v, np.int64))
q8 = lambda n, v, t=np.uint8: init(n, np.array(v, t))


def K(op_type, ins, outs, **kw):
    return N(op_type, ins, outs, domain="kiln", **kw)


def save_inputs(name, inputs):
    """--input arguments for arrays saved beside the case (np.save keeps the dtype)."""
    extra = ""
    for k, v in inputs.items():
        p = f"{name}.{k}.npy"
        np.save(os.path.join(OUT, p), v)
        extra += f" --input {k}={p}"
    return extra


def raw(name, cls, m, expect, cmd):
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())
    rows.append((name, cls, expect, cmd))


# ---- 1. kiln's int8 kernels against onnxruntime (class 6) ----
# MatMulInteger of uint8 A (an input) and a constant int8 B: kiln_qgemm where every
# |B| <= 64 and K < 65536, oneDNN's or the reference otherwise. The shapes cross the
# panel (8 columns), the pair of panels (16), the 4-row block and groups of 4 codes.
def mmint(name, m_, k_, n_, bvals, az=None, bz=None, avals=None, expect="cmp:ort"):
    a = avals if avals is not None else rng.integers(0, 256, [m_, k_]).astype(np.uint8)
    b = bvals(k_, n_) if callable(bvals) else bvals
    ins, inits = ["a", "b"], [init("b", b.astype(np.int8))]
    if az is not None or bz is not None:
        ins.append("az")
        inits.append(q8("az", az if az is not None else 0))
    if bz is not None:
        ins.append("bz")
        inits.append(q8("bz", bz, np.int8))
    m = model([N("MatMulInteger", ins, ["y"])], [vi("a", list(a.shape), U8)], [vi("y", None, I32)],
              inits)
    raw(name, 6, m, expect, f"run {name}.onnx" + save_inputs(name, {"a": a}))


seven = lambda k, n: rng.integers(-64, 65, [k, n])
full = lambda k, n: rng.integers(-128, 128, [k, n])
edge = lambda k, n: np.where(rng.random([k, n]) < 0.5, -128, 127)
for m_, k_, n_ in ((1, 1, 1), (1, 3, 7), (3, 4, 8), (4, 5, 15), (5, 17, 16), (7, 33, 17),
                   (9, 64, 33), (2, 1023, 40), (1, 4095, 3)):
    mmint(f"r8i_mmint_7bit_{m_}x{k_}x{n_}", m_, k_, n_, seven)
    mmint(f"r8i_mmint_full_{m_}x{k_}x{n_}", m_, k_, n_, full)
    mmint(f"r8i_mmint_edge_{m_}x{k_}x{n_}_az255", m_, k_, n_, edge, az=255,
          avals=np.full([m_, k_], 255, np.uint8))
mmint("r8i_mmint_b64_a255", 4, 64, 16, np.full([64, 16], -64), az=0,
      avals=np.full([4, 64], 255, np.uint8))
mmint("r8i_mmint_b65_a255", 4, 64, 16, np.full([64, 16], 65), avals=np.full([4, 64], 255, np.uint8))
mmint("r8i_mmint_one_m128", 4, 64, 16, np.where(np.arange(64 * 16).reshape(64, 16) == 77, -128, 3),
      avals=np.full([4, 64], 255, np.uint8))
mmint("r8i_mmint_k65535", 2, 65535, 2, np.full([65535, 2], -64), az=0, avals=np.full([2, 65535], 255, np.uint8))
mmint("r8i_mmint_k65536_overflow", 1, 65536, 1, np.full([65536, 1], -128), avals=np.full([1, 65536], 255, np.uint8))
mmint("r8i_mmint_k70000_wrap", 1, 70000, 2, np.full([70000, 2], 127), avals=np.full([1, 70000], 255, np.uint8))
mmint("r8i_mmint_bz_nonzero", 4, 8, 16, seven, bz=3)
mmint("r8i_mmint_bz_cols", 4, 8, 16, seven, bz=list(range(16)))
mmint("r8i_mmint_az_rows", 4, 8, 16, seven, az=[0, 1, 254, 255])
mmint("r8i_mmint_rows0", 0, 8, 16, seven, expect="any")
mmint("r8i_mmint_k0", 3, 0, 16, lambda k, n: np.zeros([0, n]), expect="any")
# rank 3 A (rows of several batches), a batch of 0 and one of 2^40 x 0 given at run time
for nm, shp in (("batch3", [3, 5, 8]), ("batch0", [0, 5, 8])):
    a = rng.integers(0, 256, shp).astype(np.uint8)
    mmint(f"r8i_mmint_{nm}", 0, 8, 16, seven, avals=a)

# QLinearMatMul (the reference, or oneDNN's) and QDQ MatMul folded into kiln.QLinearGemm
# (the qgemv for few rows): scales at their edges
def qdq_matmul(name, x, w, xs, xz, ws, wz, ys, yz, bias=None, relu=False, expect="cmp:ort", ydt=np.uint8):
    nodes = [N("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             N("DequantizeLinear", ["wq", "ws", "wz"], ["wf"]),
             N("MatMul", ["xf", "wf"], ["mm"])]
    last = "mm"
    inits = [sc("xs", xs), q8("xz", xz), init("wq", w.astype(np.int8)), sc("ws", ws),
             q8("wz", wz, np.int8), sc("ys", ys), q8("yz", yz, ydt)]
    if bias is not None:
        nodes.append(N("Add", ["mm", "bias"], ["mb"]))
        inits.append(init("bias", np.asarray(bias, np.float32)))
        last = "mb"
    if relu:
        nodes.append(N("Relu", [last], ["r"]))
        last = "r"
    nodes += [N("QuantizeLinear", [last, "ys", "yz"], ["yq"]), N("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    m = model(nodes, [vi("xq", list(x.shape), U8)], [vi("y", None)], inits)
    raw(name, 6, m, expect, f"run {name}.onnx" + save_inputs(name, {"xq": x}))


for nm, xs, ws, ys in (("denorm_x", 1e-45, 0.02, 0.1), ("denorm_y", 0.05, 0.02, 1e-45),
                       ("huge_y", 0.05, 0.02, 3e38), ("huge_x", 3e38, 0.02, 0.1),
                       ("tiny_prod", 1e-30, 1e-30, 1e-3), ("nan_w", 0.05, np.nan, 0.1),
                       ("inf_w", 0.05, np.inf, 0.1), ("zero_w", 0.05, 0.0, 0.1), ("neg_w", 0.05, -0.02, 0.1),
                       ("plain", 0.05, 0.02, 0.1)):
    for rws in (1, 5):
        for wk, wf in (("7bit", seven), ("edge", edge)):
            x = rng.integers(0, 256, [rws, 24]).astype(np.uint8)
            qdq_matmul(f"r8i_qgemm_{nm}_{wk}_r{rws}", x, wf(24, 20), xs, 128, ws, 0, ys, 7,
                       expect="cmp:ort" if nm in ("plain", "denorm_x", "huge_y", "tiny_prod", "neg_w") else "any")
# K of 140,000 codes of 255 against weights of 64: past int32 (kiln_qgemv and oneDNN wrapped)
for rws in (1, 5):
    qdq_matmul(f"r8i_qgemm_k140000_r{rws}", np.full([rws, 140000], 255, np.uint8), np.full([140000, 3], 64), 1.0, 0,
               1.0, 0, 1e6, 0)
x = rng.integers(0, 256, [3, 24]).astype(np.uint8)
qdq_matmul("r8i_qgemm_bias_relu_edge", x, edge(24, 20), 0.05, 255, 0.02, 0, 0.1, 0,
           bias=rng.integers(-100, 100, [20]) * 1.0, relu=True)
qdq_matmul("r8i_qgemm_bias_huge", x, seven(24, 20), 0.05, 0, 0.02, 0, 0.1, 0, bias=np.full([20], 3e9))
qdq_matmul("r8i_qgemm_w_perchannel", x, seven(24, 20), 0.05, 3, (rng.random(20) * 0.1).astype(np.float32),
           np.zeros(20), 0.1, 128)
qdq_matmul("r8i_qgemm_w_zp_nonzero", x, seven(24, 20), 0.05, 3, 0.02, 5, 0.1, 128)
qdq_matmul("r8i_qgemm_int8_out", x, edge(24, 20), 0.05, 3, 0.02, 0, 0.1, -128, ydt=np.int8)

# QLinearConv depthwise (group = C): kiln's uint8 depthwise for C >= 16; weights of full range
def qconv(name, c, w, xs, xz, ws, wz, ys, yz, group=None, expect="cmp:ort", hw=6, bias=None, **kw):
    x = rng.integers(0, 256, [1, c, hw, hw]).astype(np.uint8)
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    inits = [sc("xs", xs), q8("xz", xz), init("w", w.astype(np.int8)), sc("ws", ws),
             q8("wz", wz, np.int8), sc("ys", ys), q8("yz", yz)]
    if bias is not None:
        ins.append("b")
        inits.append(init("b", np.asarray(bias, np.int32)))
    m = model([N("QLinearConv", ins, ["y"], group=group or c, **kw)], [vi("x", list(x.shape), U8)],
              [vi("y", None, U8)], inits)
    raw(name, 6, m, expect, f"run {name}.onnx" + save_inputs(name, {"x": x}))


for c in (15, 16, 17, 32, 33):
    qconv(f"r8i_qdw_edge_c{c}", c, edge(c, 9).reshape(c, 1, 3, 3), 0.05, 255, 0.02, 0, 0.1, 3, pads=[1, 1, 1, 1])
    qconv(f"r8i_qdw_7bit_c{c}", c, seven(c, 9).reshape(c, 1, 3, 3), 0.05, 0, 0.02, 0, 0.1, 3)
    qconv(f"r8i_qdw_pc_c{c}", c, edge(c, 9).reshape(c, 1, 3, 3), 0.05, 7,
          (rng.random(c) * 0.05).astype(np.float32), np.zeros(c), 0.1, 250, strides=[2, 2], pads=[1, 1, 1, 1],
          bias=rng.integers(-5000, 5000, [c]))
qconv("r8i_qdw_k5_dil2", 16, edge(16, 25).reshape(16, 1, 5, 5), 0.05, 128, 0.01, 0, 0.3, 128, hw=9, dilations=[2, 2],
      pads=[4, 4, 4, 4])
qconv("r8i_qdw_bias_int32_max", 16, seven(16, 9).reshape(16, 1, 3, 3), 0.05, 0, 0.02, 0, 0.1, 3,
      bias=np.full([16], 2**31 - 1))
qconv("r8i_qdw_bias_int32_min", 16, seven(16, 9).reshape(16, 1, 3, 3), 0.05, 0, 0.02, 0, 0.1, 3,
      bias=np.full([16], -2**31))
qconv("r8i_qconv_dense_edge", 8, edge(16, 8 * 9).reshape(16, 8, 3, 3), 0.05, 255, 0.02, 0, 0.1, 3, group=1)
qconv("r8i_qconv_wzp_nonzero_dw", 16, seven(16, 9).reshape(16, 1, 3, 3), 0.05, 0, 0.02, 3, 0.1, 3)
qconv("r8i_qdw_ys_denorm", 16, seven(16, 9).reshape(16, 1, 3, 3), 0.05, 0, 0.02, 0, 1e-45, 3, expect="any")
qconv("r8i_qdw_xs_nan", 16, seven(16, 9).reshape(16, 1, 3, 3), np.nan, 0, 0.02, 0, 0.1, 3, expect="any")

# QDQ Add / Mul (kiln.QLinearAdd / QLinearMul, AVX2 loops), broadcasting
def qdq_bin(name, op, sa, sb, as_, bs, cs, az=128, bz=128, cz=128, expect="cmp:ort", dt=np.uint8):
    a = rng.integers(0, 256, sa).astype(dt) if dt == np.uint8 else rng.integers(-128, 128, sa).astype(dt)
    b = rng.integers(0, 256, sb).astype(dt) if dt == np.uint8 else rng.integers(-128, 128, sb).astype(dt)
    t = U8 if dt == np.uint8 else I8
    nodes = [N("DequantizeLinear", ["aq", "as", "az"], ["af"]), N("DequantizeLinear", ["bq", "bs", "bz"], ["bf"]),
             N(op, ["af", "bf"], ["c"]), N("QuantizeLinear", ["c", "cs", "cz"], ["cq"]),
             N("DequantizeLinear", ["cq", "cs", "cz"], ["y"])]
    inits = [sc("as", as_), q8("az", az, dt), sc("bs", bs), q8("bz", bz, dt), sc("cs", cs), q8("cz", cz, dt)]
    m = model(nodes, [vi("aq", list(a.shape), t), vi("bq", list(b.shape), t)], [vi("y", None)], inits)
    raw(name, 6, m, expect, f"run {name}.onnx" + save_inputs(name, {"aq": a, "bq": b}))


for op in ("Add", "Mul"):
    for nm, sa, sb in (("same33", [4, 33], [4, 33]), ("row", [4, 33], [1, 33]), ("col", [4, 33], [4, 1]),
                       ("scalar", [5, 40], []), ("outer", [7, 1], [1, 35]), ("rank4", [2, 3, 1, 40], [3, 1, 40])):
        qdq_bin(f"r8i_q{op.lower()}_{nm}", op, sa, sb, 0.05, 0.07, 0.1)
    qdq_bin(f"r8i_q{op.lower()}_int8", op, [4, 64], [1, 64], 0.05, 0.07, 0.1, 0, 0, 0, dt=np.int8)
    qdq_bin(f"r8i_q{op.lower()}_cs_denorm", op, [4, 64], [4, 64], 0.05, 0.07, 1e-45, expect="cmp:ort")
    qdq_bin(f"r8i_q{op.lower()}_cs_huge", op, [4, 64], [4, 64], 0.05, 0.07, 3e38)
    qdq_bin(f"r8i_q{op.lower()}_as_huge", op, [4, 64], [4, 64], 3e38, 3e38, 0.1)
    qdq_bin(f"r8i_q{op.lower()}_zp_edges", op, [4, 64], [4, 64], 0.05, 0.07, 0.1, 0, 255, 255)
    qdq_bin(f"r8i_q{op.lower()}_cs_nan", op, [4, 64], [4, 64], 0.05, 0.07, np.nan, expect="any")

# ---- 2. kiln's int8 ops read from a file, hostile (classes 3, 5, 6, 8) ----
xu = lambda n, s: q8(n, rng.integers(0, 256, s))
QG = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
def qg_inits(b=None, bs=0.02, bz=0, az=128, ys=0.1, yz=3, yzt=np.uint8, bias=None, a_shape=(3, 8)):
    its = [xu("a", list(a_shape)), sc("as", 0.05), q8("az", az),
           init("b", (b if b is not None else rng.integers(-64, 65, [8, 16])).astype(np.int8)),
           sc("bs", bs), q8("bz", bz, np.int8), sc("ys", ys), q8("yz", yz, yzt)]
    if bias is not None:
        its.append(bias)
    return its


def kq(name, cls, node, inits, expect="err", ins=(), inputs=None, outs=None):
    one(name, cls, node, list(ins), outs or [vi("y", None, U8)], inits, expect=expect, inputs=inputs,
        domains=["kiln"])


kq("r8k_qgemm_ok", 6, K("QLinearGemm", QG, ["y"]), qg_inits(), expect="any")
kq("r8k_qgemm_edge_weights", 6, K("QLinearGemm", QG, ["y"]), qg_inits(b=edge(8, 16)), expect="any")
kq("r8k_qgemm_bs_len3", 3, K("QLinearGemm", QG, ["y"]), qg_inits(bs=[0.1, 0.2, 0.3]))
kq("r8k_qgemm_bs_len16_ok", 6, K("QLinearGemm", QG, ["y"]), qg_inits(bs=np.full(16, 0.02)), expect="any")
kq("r8k_qgemm_bs_rank2", 3, K("QLinearGemm", QG, ["y"]), qg_inits(bs=np.full([1, 16], 0.02)), expect="any")
kq("r8k_qgemm_bz_nonzero_vec", 6, K("QLinearGemm", QG, ["y"]), qg_inits(bz=list(range(16))), expect="any")
kq("r8k_qgemm_yz_vec", 3, K("QLinearGemm", QG, ["y"]), qg_inits(yz=[1, 2, 3]))
kq("r8k_qgemm_yz_int8_out_u8", 3, K("QLinearGemm", QG, ["y"]), qg_inits(yz=-3, yzt=np.int8))
kq("r8k_qgemm_bias_len3", 3, K("QLinearGemm", QG + ["bias"], ["y"]), qg_inits(bias=init("bias", np.ones(3, np.int32))))
kq("r8k_qgemm_bias_float", 3, K("QLinearGemm", QG + ["bias"], ["y"]), qg_inits(bias=sc("bias", np.ones(16))))
kq("r8k_qgemm_bias_rank2", 3, K("QLinearGemm", QG + ["bias"], ["y"]), qg_inits(bias=init("bias", np.ones([1, 16], np.int32))),
   expect="any")
kq("r8k_qgemm_bias_int64", 3, K("QLinearGemm", QG + ["bias"], ["y"]), qg_inits(bias=i64("bias", np.ones(16))))
for act in ("Sigmoid", "relu", "", "Relu\x00x"):
    kq(f"r8k_qgemm_act_{act.replace(chr(0), '0') or 'empty'}", 3, K("QLinearGemm", QG, ["y"], activation=act), qg_inits(),
       expect="any" if act == "Relu\x00x" else "err")
kq("r8k_qgemm_k_mismatch", 3, K("QLinearGemm", QG, ["y"]), qg_inits(a_shape=(3, 9)))
kq("r8k_qgemm_b_rank3", 3, K("QLinearGemm", QG, ["y"]), qg_inits(b=rng.integers(-5, 5, [2, 8, 16])), expect="any")
kq("r8k_qgemm_b_runtime", 6, K("QLinearGemm", QG, ["y"]), [i for i in qg_inits() if i.name != "b"],
   ins=[vi("b", [8, 16], I8)], inputs={"b": rng.integers(-128, 128, [8, 16]).astype(np.int8)}, expect="any")
kq("r8k_qgemm_a_runtime_huge", 2, K("QLinearGemm", QG, ["y"]), [i for i in qg_inits() if i.name != "a"],
   ins=[vi("a", None, U8)], inputs={"a": ("hdr", [2**40, 0, 8], "|u1")}, expect="any")
kq("r8k_qgemm_a_runtime_k_huge", 2, K("QLinearGemm", QG, ["y"]), [i for i in qg_inits() if i.name != "a"],
   ins=[vi("a", None, U8)], inputs={"a": ("hdr", [0, 2**62], "|u1")}, expect="err")
kq("r8k_qgemm_int8_a", 3, K("QLinearGemm", QG, ["y"]), [i if i.name != "a" else q8("a", np.ones([3, 8]), np.int8) for i in qg_inits()],
   expect="any")
kq("r8k_qgemm_scales_nan", 6, K("QLinearGemm", QG, ["y"]), qg_inits(bs=np.nan, ys=np.nan), expect="any")
kq("r8k_qgemm_k0", 6, K("QLinearGemm", QG, ["y"]), qg_inits(b=np.zeros([0, 16]), a_shape=(3, 0)), expect="any")
kq("r8k_qgemm_n0", 6, K("QLinearGemm", QG, ["y"]), qg_inits(b=np.zeros([8, 0])), expect="any")
# QLinearMatMul and QLinearConv: y_zero_point (input 7) of three values, of none, of
# another shape than y_scale; zero points and scales with no values
QM = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
qm = lambda yz=3, az=1, bs=0.02: [xu("a", [3, 8]), sc("as", 0.05), q8("az", az), xu("b", [8, 5]), sc("bs", bs),
                                  q8("bz", 2), sc("ys", 0.1), q8("yz", yz)]
QC = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
qc = lambda yz=3, xz=1, ws=0.02: [xu("x", [1, 2, 5, 5]), sc("xs", 0.05), q8("xz", xz), q8("w", rng.integers(-5, 5, [4, 2, 3, 3]), np.int8),
                                  sc("ws", ws), q8("wz", 0, np.int8), sc("ys", 0.1), q8("yz", yz)]
for nm, kw, exp in (("yz_three", dict(yz=[3, 4, 5]), "err"), ("yz_empty", dict(yz=np.zeros([0])), "err"),
                    ("yz_rank2", dict(yz=[[3]]), "err"), ("yz_five", dict(yz=[3, 4, 5, 6, 7]), "err"),
                    ("az_empty", dict(az=np.zeros([0])), "err")):
    one(f"r8k_qlinearmatmul_{nm}", 6, N("QLinearMatMul", QM, ["y"]), [], [vi("y", None, U8)], qm(**kw), expect=exp)
for nm, kw, exp in (("yz_three", dict(yz=[3, 4, 5]), "err"), ("yz_empty", dict(yz=np.zeros([0])), "err"),
                    ("yz_four", dict(yz=[3, 4, 5, 6]), "err"), ("xz_empty", dict(xz=np.zeros([0])), "err"),
                    ("ws_empty", dict(ws=np.zeros([0], np.float32)), "err")):
    one(f"r8k_qlinearconv_{nm}", 6, N("QLinearConv", QC, ["y"]), [], [vi("y", None, U8)], qc(**kw), expect=exp)
one("r8k_qlinearmatmul_yz_runtime_empty", 8, N("QLinearMatMul", QM, ["y"]), [vi("yz", None, U8)], [vi("y", None, U8)],
    [i for i in qm() if i.name != "yz"], inputs={"yz": np.zeros([0], np.uint8)})
one("r8k_qlinearconv_yz_runtime_empty", 8, N("QLinearConv", QC, ["y"]), [vi("yz", None, U8)], [vi("y", None, U8)],
    [i for i in qc() if i.name != "yz"], inputs={"yz": np.zeros([0], np.uint8)})
kq("r8k_qgemm_yz_runtime_empty", 8, K("QLinearGemm", QG, ["y"]), [i for i in qg_inits() if i.name != "yz"],
   ins=[vi("yz", None, U8)], inputs={"yz": np.zeros([0], np.uint8)})
one("r8k_matmulinteger_az_runtime_empty", 8, N("MatMulInteger", ["a", "b", "az"], ["y"]), [vi("az", None, U8)],
    [vi("y", None, I32)], [xu("a", [3, 8]), xu("b", [8, 5])], inputs={"az": np.zeros([0], np.uint8)})
one("r8k_convinteger_xz_runtime_empty", 8, N("ConvInteger", ["x", "w", "xz"], ["y"]), [vi("xz", None, U8)],
    [vi("y", None, I32)], [xu("x", [1, 2, 5, 5]), xu("w", [4, 2, 3, 3])], inputs={"xz": np.zeros([0], np.uint8)})
one("r8k_dq_zp_runtime_empty", 8, N("DequantizeLinear", ["x", "s", "z"], ["y"]), [vi("z", None, U8)], y,
    [xu("x", [3, 4]), sc("s", 0.1)], inputs={"z": np.zeros([0], np.uint8)})
one("r8k_q_zp_runtime_empty", 8, N("QuantizeLinear", ["x", "s", "z"], ["y"]), [vi("z", None, U8)], [vi("y", None, U8)],
    [sc("x", np.ones([3, 4])), sc("s", 0.1)], inputs={"z": np.zeros([0], np.uint8)})
one("r8k_q_scale_runtime_empty", 8, N("QuantizeLinear", ["x", "s"], ["y"]), [vi("s", None)], [vi("y", None, U8)],
    [sc("x", np.ones([3, 4]))], inputs={"s": np.zeros([0], np.float32)})
# QLinearLookup: tables not 256, not 8-bit, not 1-D, given at run time without a shape
tab = rng.integers(0, 256, [256]).astype(np.uint8)
for nm, t, exp in (("t255", tab[:255], "err"), ("t257", np.concatenate([tab, tab[:1]]), "err"),
                   ("t16x16", tab.reshape(16, 16), "err"), ("tf32", tab.astype(np.float32), "err"),
                   ("ti8", tab.astype(np.int8), "any"), ("tu16", tab.astype(np.uint16), "err")):
    tt = {np.uint8: U8, np.int8: I8, np.float32: F, np.uint16: TP.UINT16}[t.dtype.type]
    kq(f"r8k_lookup_init_{nm}", 3, K("QLinearLookup", ["x", "t"], ["y"]), [xu("x", [4, 5]), init("t", t)],
       outs=[vi("y", None, tt)], expect=exp)
    kq(f"r8k_lookup_runtime_{nm}", 5, K("QLinearLookup", ["x", "t"], ["y"]), [xu("x", [4, 5])],
       ins=[vi("t", None, tt)], inputs={"t": t}, outs=[vi("y", None, tt)], expect=exp)
    kq(f"r8k_lookup_symdim_{nm}", 5, K("QLinearLookup", ["x", "t"], ["y"]), [xu("x", [4, 5])],
       ins=[vi("t", ["n"], tt)], inputs={"t": t.ravel()}, outs=[vi("y", None, tt)],
       expect="any" if nm == "t16x16" else exp)  # raveled: 256 values
kq("r8k_lookup_runtime_t4_x255", 5, K("QLinearLookup", ["x", "t"], ["y"]), [q8("x", [255, 255, 0])],
   ins=[vi("t", None, U8)], inputs={"t": tab[:4]})
kq("r8k_lookup_x_float", 3, K("QLinearLookup", ["x", "t"], ["y"]), [sc("x", [1.0, 300.0]), init("t", tab)])
kq("r8k_lookup_x_int32", 3, K("QLinearLookup", ["x", "t"], ["y"]), [init("x", np.array([1, 300], np.int32)), init("t", tab)])
kq("r8k_lookup_x_runtime_int16", 5, K("QLinearLookup", ["x", "t"], ["y"]), [init("t", tab)],
   ins=[vi("x", None, TP.INT16)], inputs={"x": np.array([1, 3000, -3000], np.int16)})
kq("r8k_lookup_x_huge", 2, K("QLinearLookup", ["x", "t"], ["y"]), [init("t", tab)],
   ins=[vi("x", None, U8)], inputs={"x": ("hdr", [2**40, 0, 2**20], "|u1")}, expect="any")
# QLinearAdd / QLinearMul from a file
QA = ["a", "as", "az", "b", "bs", "bz", "cs", "cz"]
def qa_inits(a=(4, 8), b=(4, 8), az=1, bz=2, cz=3, as_=0.1, bs=0.1, cs=0.2, at=np.uint8, bt=np.uint8, ct=np.uint8):
    return [q8("a", rng.integers(0, 100, a), at), sc("as", as_), q8("az", az, at),
            q8("b", rng.integers(0, 100, b), bt), sc("bs", bs), q8("bz", bz, bt), sc("cs", cs), q8("cz", cz, ct)]


for op in ("QLinearAdd", "QLinearMul"):
    o = op[7:].lower()
    kq(f"r8k_q{o}_ok", 6, K(op, QA, ["y"]), qa_inits(), expect="any")
    kq(f"r8k_q{o}_mixed_dtypes", 3, K(op, QA, ["y"]), qa_inits(bt=np.int8))
    kq(f"r8k_q{o}_c_int8", 3, K(op, QA, ["y"]), qa_inits(ct=np.int8))
    kq(f"r8k_q{o}_zp_vec", 3, K(op, QA, ["y"]), [i if i.name != "az" else q8("az", [1, 2, 3, 4]) for i in qa_inits()], expect="any")
    kq(f"r8k_q{o}_scale_vec", 3, K(op, QA, ["y"]), [i if i.name != "cs" else sc("cs", [0.1] * 8) for i in qa_inits()], expect="any")
    kq(f"r8k_q{o}_scale_empty", 3, K(op, QA, ["y"]), [i if i.name != "cs" else sc("cs", np.zeros([0])) for i in qa_inits()])
    kq(f"r8k_q{o}_zp_empty", 3, K(op, QA, ["y"]), [i if i.name != "bz" else q8("bz", np.zeros([0])) for i in qa_inits()])
    kq(f"r8k_q{o}_no_bcast", 3, K(op, QA, ["y"]), qa_inits(a=(4, 8), b=(3, 8)))
    kq(f"r8k_q{o}_bcast_huge", 2, K(op, QA, ["y"]), [i for i in qa_inits() if i.name != "a"], ins=[vi("a", None, U8)],
       inputs={"a": ("hdr", [2**62, 1, 0], "|u1")}, expect="any")
    kq(f"r8k_q{o}_bcast_over", 2, K(op, QA, ["y"]), [i for i in qa_inits() if i.name not in ("a", "b")],
       ins=[vi("a", None, U8), vi("b", None, U8)],
       inputs={"a": ("hdr", [2**40, 1], "|u1"), "b": ("hdr", [1, 2**40], "|u1")})
    kq(f"r8k_q{o}_scales_inf", 6, K(op, QA, ["y"]), qa_inits(as_=np.inf, cs=np.inf), expect="any")
    kq(f"r8k_q{o}_scale_runtime_nan", 6, K(op, QA, ["y"]), [i for i in qa_inits() if i.name != "cs"],
       ins=[vi("cs", [], F)], inputs={"cs": np.array(np.nan, np.float32)}, expect="any")
# QLinearGlobalAveragePool / QLinearAveragePool: empty planes, huge kernels, scales
QP = ["x", "xs", "xz", "ys", "yz"]
qp = lambda x, xs=0.1, ys=0.1: [x, sc("xs", xs), q8("xz", 3), sc("ys", ys), q8("yz", 5)]
kq("r8k_qgap_empty_plane", 6, K("QLinearGlobalAveragePool", QP, ["y"]), qp(xu("x", [1, 4, 0, 5])), expect="any")
kq("r8k_qgap_runtime_empty_huge", 2, K("QLinearGlobalAveragePool", QP, ["y"]), qp(sc("xs_", 0))[1:],
   ins=[vi("x", None, U8)], inputs={"x": ("hdr", [2**40, 4, 0], "|u1")}, expect="any")
kq("r8k_qgap_runtime_c_huge", 2, K("QLinearGlobalAveragePool", QP, ["y"]), qp(sc("xs_", 0))[1:],
   ins=[vi("x", None, U8)], inputs={"x": ("hdr", [2**31, 2**31, 0], "|u1")}, expect="any")
kq("r8k_qgap_rank2", 3, K("QLinearGlobalAveragePool", QP, ["y"]), qp(xu("x", [4, 5])))
kq("r8k_qgap_ys0", 6, K("QLinearGlobalAveragePool", QP, ["y"]), qp(xu("x", [1, 4, 3, 3]), ys=0.0), expect="any")
kq("r8k_qgap_ys_nan", 6, K("QLinearGlobalAveragePool", QP, ["y"]), qp(xu("x", [1, 4, 3, 3]), ys=np.nan), expect="any")
kq("r8k_qgap_int8_x_u8_zp", 3, K("QLinearGlobalAveragePool", QP, ["y"]), qp(q8("x", np.ones([1, 4, 3, 3]), np.int8)))
for nm, kw, exp in (("k2p40", dict(kernel_shape=[2**40, 2**40], pads=[2**40] * 4), "err"),
                    ("k1_s0", dict(kernel_shape=[1, 1], strides=[0, 0]), "err"),
                    ("k0", dict(kernel_shape=[0, 0]), "err"),
                    ("pad_ge_kernel", dict(kernel_shape=[2, 2], pads=[3, 3, 3, 3]), "any"),
                    ("ceil_huge_stride", dict(kernel_shape=[2, 2], strides=[2**40, 2**40], ceil_mode=1), "any"),
                    ("cip", dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2], count_include_pad=1), "any"),
                    ("dil_2p40", dict(kernel_shape=[2, 2], dilations=[2**40, 2**40]), "err"),
                    ("no_kernel", dict(), "err")):
    kq(f"r8k_qpool_{nm}", 1 if "2p40" in nm else 3, K("QLinearAveragePool", QP, ["y"], **kw), qp(xu("x", [1, 4, 5, 5])), expect=exp)
kq("r8k_qpool_runtime_empty_huge", 1, K("QLinearAveragePool", QP, ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
   qp(sc("xs_", 0))[1:], ins=[vi("x", None, U8)], inputs={"x": ("hdr", [2**40, 3, 0, 5], "|u1")}, expect="any")
# MatMulIntegerToFloat (kiln's): scales of the wrong length, no zero points, empty rows
MIF = ["a", "b", "as", "bs", "az", "bz"]
mif = lambda **o: [xu("a", o.get("a", [3, 8])), q8("b", rng.integers(-64, 64, o.get("b", [8, 5])), np.int8),
                   sc("as", o.get("as_", 0.1)), sc("bs", o.get("bs", 0.2)), q8("az", o.get("az", 3)),
                   q8("bz", o.get("bz", 0), np.int8)]
kq("r8k_mif_ok", 6, K("MatMulIntegerToFloat", MIF, ["y"]), mif(), outs=y, expect="any")
kq("r8k_mif_bs_len3", 3, K("MatMulIntegerToFloat", MIF, ["y"]), mif(bs=[0.1, 0.2, 0.3]), outs=y)
kq("r8k_mif_as_vec", 3, K("MatMulIntegerToFloat", MIF, ["y"]), mif(as_=[0.1, 0.2, 0.3]), outs=y, expect="any")
kq("r8k_mif_bz_vec5", 6, K("MatMulIntegerToFloat", MIF, ["y"]), mif(bz=[0, 1, 2, 3, 4]), outs=y, expect="any")
kq("r8k_mif_az_vec2", 3, K("MatMulIntegerToFloat", MIF, ["y"]), mif(az=[1, 2]), outs=y)
kq("r8k_mif_k_mismatch", 3, K("MatMulIntegerToFloat", MIF, ["y"]), mif(b=[9, 5]), outs=y)
kq("r8k_mif_two_inputs", 3, K("MatMulIntegerToFloat", ["a", "b"], ["y"]), mif()[:2], outs=y)
kq("r8k_mif_scale_nan", 6, K("MatMulIntegerToFloat", MIF, ["y"]), mif(bs=np.nan), outs=y, expect="any")

# ---- 3. control flow (classes 1, 3, 6) ----
def body(nodes, outs, ins=()):
    return helper.make_graph(nodes, "b", list(ins), outs)


cin = [vi("i", [], I64), vi("cond", [], BOOL)]
# a Loop with no trip count whose condition never turns false, bodies of almost no work
lb_true = body([N("Identity", ["cond"], ["co"]), N("Identity", ["v"], ["vo"])], [vi("co", [], BOOL), vi("vo", None)],
               cin + [vi("v", None)])
case("r8c_loop_forever_identity", 1, model([N("Loop", ["", "c", "x"], ["y"], body=lb_true)], [vi("x", [2])], y,
                                           [init("c", np.array(True))]), inputs={"x": np.ones(2, np.float32)})
lb_empty = body([N("Identity", ["cond"], ["co"])], [vi("co", [], BOOL)], cin)
case("r8c_loop_forever_nothing", 1, model([N("Loop", ["", "c"], [], body=lb_empty)], [], [],
                                          [init("c", np.array(True))]), expect="any")
case("r8c_loop_forever_nothing_out", 1, model([N("Loop", ["", "c", "x"], ["y"], body=lb_true)], [], y,
                                              [init("c", np.array(True)), sc("x", np.zeros([0]))]))
case("r8c_loop_2p62_empty_carried", 1, model([N("Loop", ["m", "", "x"], ["y"], body=lb_true)], [vi("x", None)], y,
                                             [i64("m", 2**62)]), inputs={"x": ("hdr", [2**40, 0])})
lb_cond_runtime = body([N("Greater", ["i", "lim"], ["co"]), N("Identity", ["v"], ["vo"])],
                       [vi("co", [], BOOL), vi("vo", None)], cin + [vi("v", None)])
case("r8c_loop_cond_outer_huge", 1, model([N("Loop", ["", "c", "x"], ["y"], body=lb_cond_runtime)], [vi("x", [2])], y,
                                          [init("c", np.array(True)), i64("lim", -1)]),
     inputs={"x": np.ones(2, np.float32)})


def nested_loops(depth, trips):
    inner = body([N("Identity", ["cond"], ["co"]), N("Identity", ["v"], ["vo"])], [vi("co", [], BOOL), vi("vo", None)],
                 cin + [vi("v", None)])
    for d in range(depth - 1):
        inner = body([N("Identity", ["cond"], ["co"]), N("Loop", [f"m{d}", "", "v"], ["vo"], body=inner)],
                     [vi("co", [], BOOL), vi("vo", None)], cin + [vi("v", None)])
    return model([N("Loop", ["m", "", "x"], ["y"], body=inner)], [vi("x", [2])], y,
                 [i64("m", trips)] + [i64(f"m{d}", trips) for d in range(depth - 1)])


for depth, trips in ((2, 10**6), (3, 10**4), (4, 2**16), (8, 100), (24, 4)):
    case(f"r8c_loop_nested_{depth}x{trips}", 1, nested_loops(depth, trips), inputs={"x": np.ones(2, np.float32)})
# Scan over empty-but-huge inputs: 2^40 iterations of an empty slice
sb = body([N("Add", ["st", "xi"], ["so"]), N("Identity", ["so"], ["yo"])], [vi("so", None), vi("yo", None)],
          [vi("st", None), vi("xi", None)])
for nm, shp, kw in (("2p40x0", [2**40, 0], {}), ("0x2p40_axis1", [0, 2**40], dict(scan_input_axes=[1])),
                    ("2p62x0x4", [2**62, 0, 4], {}), ("2p31x0_rev", [2**31, 0], dict(scan_input_directions=[1]))):
    st = [0] if "0x2p40" not in nm else [0]
    case(f"r8c_scan_{nm}", 1, model([N("Scan", ["s0", "xs"], ["yf", "ys"], body=sb, num_scan_inputs=1, **kw)],
                                    [vi("s0", None), vi("xs", None)], [vi("yf", None), vi("ys", None)], opset=16),
         inputs={"s0": np.zeros([0] if "2p62" not in nm else [0, 4], np.float32), "xs": ("hdr", shp)}, expect="any")
sb_empty = body([N("Identity", ["st"], ["so"])], [vi("so", None)], [vi("st", None), vi("xi", None)])
case("r8c_scan_no_scan_outputs_2p40", 1, model([N("Scan", ["s0", "xs"], ["yf"], body=sb_empty, num_scan_inputs=1)],
                                              [vi("s0", None), vi("xs", None)], [vi("yf", None)], opset=16),
     inputs={"s0": np.zeros([2], np.float32), "xs": ("hdr", [2**40, 0])}, expect="any")
sb_scan_out_axis = body([N("Identity", ["st"], ["so"]), N("Identity", ["xi"], ["yo"])], [vi("so", None), vi("yo", None)],
                        [vi("st", None), vi("xi", None)])
for nm, kw in (("out_axis_5", dict(scan_output_axes=[5])), ("out_axis_-9", dict(scan_output_axes=[-9])),
               ("out_dir_2", dict(scan_output_directions=[2])), ("in_dir_-1", dict(scan_input_directions=[-1])),
               ("in_axes_two", dict(scan_input_axes=[0, 1])), ("out_axis_imax", dict(scan_output_axes=[IMAX]))):
    case(f"r8c_scan_{nm}", 3, model([N("Scan", ["s0", "xs"], ["yf", "ys"], body=sb_scan_out_axis, num_scan_inputs=1, **kw)],
                                    [], [vi("yf", None), vi("ys", None)],
                                    [sc("s0", [1.0]), sc("xs", np.ones([3, 2]))], opset=16))
# bodies that disagree with their node
lb_two_out = body([N("Identity", ["cond"], ["co"]), N("Identity", ["v"], ["vo"]), N("Identity", ["v"], ["extra"])],
                  [vi("co", [], BOOL), vi("vo", None), vi("extra", None)], cin + [vi("v", None)])
case("r8c_loop_scan_output_unused", 6, model([N("Loop", ["m", "", "x"], ["y"], body=lb_two_out)], [], y,
                                             [i64("m", 3), sc("x", [1.0, 2.0])]), expect="any")
case("r8c_loop_more_outputs_than_body", 3, model([N("Loop", ["m", "", "x"], ["y", "s", "t"], body=lb_two_out)], [],
                                                 [vi("y", None), vi("s", None), vi("t", None)],
                                                 [i64("m", 3), sc("x", [1.0, 2.0])]))
lb_no_cond_out = body([N("Identity", ["v"], ["vo"])], [vi("vo", None)], cin + [vi("v", None)])
case("r8c_loop_body_no_cond_out", 3, model([N("Loop", ["m", "", "x"], ["y"], body=lb_no_cond_out)], [], y,
                                           [i64("m", 3), sc("x", [1.0, 2.0])]))
lb_cond_float = body([N("Cast", ["cond"], ["co"], to=F), N("Identity", ["v"], ["vo"])], [vi("co", [], F), vi("vo", None)],
                     cin + [vi("v", None)])
case("r8c_loop_body_cond_float", 3, model([N("Loop", ["m", "", "x"], ["y"], body=lb_cond_float)], [], y,
                                          [i64("m", 3), sc("x", [1.0, 2.0])]), expect="any")
lb_cond_vec = body([N("Concat", ["cu", "cu"], ["co"], axis=0), N("Identity", ["v"], ["vo"])],
                   [vi("co", [2], BOOL), vi("vo", None)], cin + [vi("v", None)])
case("r8c_loop_body_cond_two", 3, model([N("Unsqueeze", ["c", "ax"], ["cu"]),
                                         N("Loop", ["m", "", "x"], ["y"], body=lb_cond_vec)], [], y,
                                        [i64("m", 3), sc("x", [1.0, 2.0]), init("c", np.array(True)), i64("ax", [0])]))
lb_grow_dtype = body([N("Identity", ["cond"], ["co"]), N("Cast", ["v"], ["vo"], to=I64)], [vi("co", [], BOOL), vi("vo", None, I64)],
                     cin + [vi("v", None)])
case("r8c_loop_carried_dtype_changes", 3, model([N("Loop", ["m", "", "x"], ["y"], body=lb_grow_dtype)], [], [vi("y", None, I64)],
                                                [i64("m", 3), sc("x", [1.0, 2.0])]))
lb_shape = body([N("Identity", ["cond"], ["co"]), N("Concat", ["v", "v"], ["vo"], axis=0)], [vi("co", [], BOOL), vi("vo", None)],
                cin + [vi("v", None)])
case("r8c_loop_carried_shape_grows_ok", 6, model([N("Loop", ["m", "", "x"], ["y"], body=lb_shape)], [], y,
                                                 [i64("m", 3), sc("x", [1.0, 2.0])]), expect="any")
lb_scan_shape = body([N("Identity", ["cond"], ["co"]), N("Identity", ["v"], ["vo"]), N("Range", ["z0", "i", "one"], ["so"])],
                     [vi("co", [], BOOL), vi("vo", None), vi("so", None, I64)], cin + [vi("v", None)])
case("r8c_loop_scan_out_ragged", 3, model([N("Loop", ["m", "", "x"], ["y", "s"], body=lb_scan_shape)], [],
                                          [vi("y", None), vi("s", None, I64)],
                                          [i64("m", 4), sc("x", [1.0]), i64("z0", 0), i64("one", 1)]))
ib_then = body([N("Identity", ["x"], ["o"])], [vi("o", None)])
ib_else2 = body([N("Identity", ["x"], ["o"]), N("Identity", ["x"], ["o2"])], [vi("o", None), vi("o2", None)])
case("r8c_if_runtime_else_more_outputs", 3, model([N("If", ["c"], ["y"], then_branch=ib_then, else_branch=ib_else2)],
                                                  [vi("c", [], BOOL)], y, [sc("x", [1.0])]),
     inputs={"c": np.array(False)})
ib_else_i64 = body([N("Cast", ["x"], ["o"], to=I64)], [vi("o", None, I64)])
case("r8c_if_runtime_else_dtype", 3, model([N("If", ["c"], ["y"], then_branch=ib_then, else_branch=ib_else_i64)],
                                           [vi("c", [], BOOL)], y, [sc("x", [1.0])]),
     inputs={"c": np.array(False)})
ib_else_rank = body([N("Unsqueeze", ["x", "ax"], ["o"])], [vi("o", None)])
case("r8c_if_runtime_else_rank", 6, model([N("If", ["c"], ["y"], then_branch=ib_then, else_branch=ib_else_rank)],
                                          [vi("c", [], BOOL)], y, [sc("x", [1.0]), i64("ax", [0])]),
     inputs={"c": np.array(False)}, expect="any")
# deep nesting: 30 levels of If (a recursion in import, inference and the passes), and
# 16 levels that each hold the level below twice (2^16 bodies in a 13 MB file)
g = body([N("Identity", ["x"], ["o"])], [vi("o", None)])
leaf = body([N("Identity", ["x"], ["o"])], [vi("o", None)])
for d in range(30):
    g = body([N("If", ["c"], ["o"], then_branch=g, else_branch=leaf)], [vi("o", None)])
case("r8c_if_30_deep", 1, model([N("If", ["c"], ["y"], then_branch=g, else_branch=leaf)], [], y,
                                 [init("c", np.array(True)), sc("x", [1.0])]), expect="any")
g = body([N("Identity", ["x"], ["o"])], [vi("o", None)])
for d in range(16):
    g = body([N("If", ["c"], ["o"], then_branch=g, else_branch=g)], [vi("o", None)])
case("r8c_if_16_deep_doubling", 1, model([N("If", ["c"], ["y"], then_branch=g, else_branch=g)], [], y,
                                         [init("c", np.array(True)), sc("x", [1.0])]), expect="any")
rows.append(("r8c_if_16_deep_doubling_inspect", 1, "any", "inspect r8c_if_16_deep_doubling.onnx"))
rows.append(("r8c_if_16_deep_doubling_optimize", 1, "any", "optimize r8c_if_16_deep_doubling.onnx -o r8c_opt.onnx"))
# a Loop inside a Scan inside a Loop, each 2^20: the bound must see the product
inner = body([N("Identity", ["cond"], ["co"]), N("Identity", ["v"], ["vo"])], [vi("co", [], BOOL), vi("vo", None)],
             cin + [vi("v", None)])
scan_b = body([N("Loop", ["m2", "", "st"], ["so"], body=inner), N("Identity", ["xi"], ["yo"])],
              [vi("so", None), vi("yo", None)], [vi("st", None), vi("xi", None)])
outer = body([N("Identity", ["cond"], ["co"]), N("Scan", ["v", "xs"], ["vo", "ys"], body=scan_b, num_scan_inputs=1)],
             [vi("co", [], BOOL), vi("vo", None)], cin + [vi("v", None)])
case("r8c_loop_scan_loop_2p20", 1, model([N("Loop", ["m", "", "x"], ["y"], body=outer)], [], y,
                                         [i64("m", 2**20), i64("m2", 2**20), sc("x", [1.0]), sc("xs", np.ones([2**10, 1]))],
                                         opset=16))

# ---- 4. the OpenCL backend (PoCL) on hostile shapes and values, against the CPU (class 6) ----
D = "--device opencl"
def dcase(name, cls, nodes, ins, outs, inits=(), inputs=None, expect="cmp:cpu", opset=21):
    m = model(nodes, ins, outs, inits, opset)
    raw(name, cls, m, expect, f"run {name}.onnx" + (save_inputs(name, inputs) if inputs else "") + f" {D}")


xf = rng.standard_normal([3, 4, 5]).astype(np.float32)
for nm, idx in (("in_range", [0, 3, -4]), ("past", [4]), ("imin", [IMIN]), ("imax", [IMAX]), ("neg_past", [-5]),
                ("empty", np.zeros([0], np.int64))):
    dcase(f"r8g_gather_{nm}", 5, [N("Gather", ["x", "i"], ["y"], axis=1)], [vi("x", None), vi("i", None, I64)], y,
          inputs={"x": xf, "i": np.array(idx, np.int64)}, expect="cmp:cpu" if nm in ("in_range", "empty") else "err")
dcase("r8g_gather_axis_last_neg", 5, [N("Gather", ["x", "i"], ["y"], axis=-1)], [vi("x", None), vi("i", None, I64)], y,
      inputs={"x": xf, "i": np.array([[-1, -5], [4, 0]], np.int64)}, expect="cmp:cpu")
for nm, a, b, t in (("i64_div0", [7, -7, 0], [0, 0, 0], np.int64), ("i64_min_m1", [IMIN, IMIN], [-1, 1], np.int64),
                    ("i64_mod0", [7, -7], [0, 0], np.int64)):
    op = "Mod" if "mod" in nm else "Div"
    dcase(f"r8g_{op.lower()}_{nm}", 8, [N("Relu", ["x"], ["xr"]), N(op, ["a", "b"], ["y"])],
          [vi("x", None), vi("a", None, I64), vi("b", None, I64)], [vi("y", None, I64), vi("xr", None)],
          inputs={"x": np.ones([2], np.float32), "a": np.array(a, t), "b": np.array(b, t)}, expect="any")
for nm, v in (("nan", np.nan), ("inf", np.inf), ("big", 1e30), ("neg", -1e30), ("half", 2.5)):
    for to in (I64, I32, U8, I8, BOOL):
        dcase(f"r8g_cast_{nm}_to_{to}", 6, [N("Relu", ["x"], ["r"]), N("Cast", ["r"], ["y"], to=to)], [vi("x", None)],
              [vi("y", None, to)], inputs={"x": np.array([v, -v, 1.5, -0.5], np.float32)},
              expect="cmp:cpu" if nm in ("half",) else "any")
for nm, shp in (("0x2p62", [0, 2**62]), ("2p40x0x4", [2**40, 0, 4]), ("0x2p62x4", [0, 2**62, 4])):
    for op, kw in (("Softmax", dict(axis=-1)), ("LogSoftmax", dict(axis=0)), ("Relu", {}), ("Transpose", dict(perm=[1, 0] if len(shp) == 2 else [2, 1, 0])),
                   ("ReduceSum", dict(keepdims=1)), ("ReduceMax", dict(keepdims=0)), ("Neg", {})):
        dcase(f"r8g_{op.lower()}_{nm}", 2, [N(op, ["x"], ["y"], **kw)], [vi("x", None)], y,
              inputs=None, expect="any", opset=18)
        rows[-1] = (rows[-1][0], rows[-1][1], rows[-1][2],
                    rows[-1][3].replace(f" {D}", "") + f" --input x={rows[-1][0]}.x.npy {D}")
        from probe_lib import npy_header_only
        npy_header_only(os.path.join(OUT, f"{rows[-1][0]}.x.npy"), shp)
    dcase(f"r8g_layernorm_{nm}", 1, [N("LayerNormalization", ["x", "s"], ["y"], axis=-1)], [vi("x", None)], y,
          [sc("s", np.ones([shp[-1] if shp[-1] < 10 else 1]))], expect="any")
    rows[-1] = (rows[-1][0], rows[-1][1], rows[-1][2], rows[-1][3].replace(f" {D}", "") + f" --input x={rows[-1][0]}.x.npy {D}")
    npy_header_only(os.path.join(OUT, f"{rows[-1][0]}.x.npy"), shp)
    dcase(f"r8g_concat_{nm}", 2, [N("Concat", ["x", "x"], ["y"], axis=0)], [vi("x", None)], y, expect="any")
    rows[-1] = (rows[-1][0], rows[-1][1], rows[-1][2], rows[-1][3].replace(f" {D}", "") + f" --input x={rows[-1][0]}.x.npy {D}")
    npy_header_only(os.path.join(OUT, f"{rows[-1][0]}.x.npy"), shp)
    dcase(f"r8g_add_bcast_{nm}", 2, [N("Add", ["x", "b"], ["y"])], [vi("x", None)], y, [sc("b", np.ones([1] * len(shp)))],
          expect="any")
    rows[-1] = (rows[-1][0], rows[-1][1], rows[-1][2], rows[-1][3].replace(f" {D}", "") + f" --input x={rows[-1][0]}.x.npy {D}")
    npy_header_only(os.path.join(OUT, f"{rows[-1][0]}.x.npy"), shp)
# Slice, Pad, Expand, Tile, Split with hostile host-side operands
for nm, st, en, ax, sp in (("imin_imax", [IMIN], [IMAX], [1], [1]), ("rev_all", [IMAX], [IMIN], [1], [-1]),
                           ("step_imin", [IMAX], [IMIN], [1], [IMIN]), ("step_big", [0], [IMAX], [2], [2**40]),
                           ("axes_dup", [0, 1], [2, 2], [1, 1], [1, 1]), ("axis_past", [0], [1], [3], [1])):
    dcase(f"r8g_slice_{nm}", 6, [N("Slice", ["x", "s", "e", "a", "p"], ["y"])], [vi("x", None)], y,
          [i64("s", st), i64("e", en), i64("a", ax), i64("p", sp)], inputs={"x": xf},
          expect="err" if nm in ("axes_dup", "axis_past") else "cmp:cpu")
for mode in ("constant", "reflect", "edge", "wrap"):
    for nm, pads in (("neg", [0, -2, 0, 0, -2, 0]), ("big", [0, 9, 0, 0, 9, 0]), ("negall", [0, -4, 0, 0, -4, 0]),
                     ("mixed", [1, -1, 2, 0, 3, -2])):
        dcase(f"r8g_pad_{mode}_{nm}", 6, [N("Pad", ["x", "p", "v"], ["y"], mode=mode)], [vi("x", None)], y,
              [i64("p", pads), sc("v", 7.0)], inputs={"x": xf}, expect="err" if nm == "negall" else "cmp:cpu" if not (mode != "constant" and nm == "big") else "any")
for nm, shp in (("zero", [3, 0, 5]), ("bcast", [2, 3, 4, 5]), ("huge_empty", [0, 2**40, 4, 5]), ("huge", [2**20, 2**20, 4, 5])):
    dcase(f"r8g_expand_{nm}", 2, [N("Expand", ["x", "s"], ["y"])], [vi("x", None)], y, [i64("s", shp)], inputs={"x": xf},
          expect="err" if nm == "zero" else "cmp:cpu" if nm == "bcast" else "any")
for nm, reps in (("ok", [2, 1, 3]), ("zero", [0, 1, 1]), ("huge", [2**40, 1, 1]), ("neg", [-1, 1, 1])):
    dcase(f"r8g_tile_{nm}", 2, [N("Tile", ["x", "r"], ["y"])], [vi("x", None)], y, [i64("r", reps)], inputs={"x": xf},
          expect="cmp:cpu" if nm in ("ok", "zero") else "err")
for nm, sp in (("ok", [1, 3]), ("zero", [0, 4]), ("neg", [-1, 5]), ("sum_short", [1, 1]), ("overflow", [IMAX, IMAX - 2])):
    dcase(f"r8g_split_{nm}", 6, [N("Split", ["x", "s"], ["y", "z"], axis=1)], [vi("x", None)], [vi("y", None), vi("z", None)],
          [i64("s", sp)], inputs={"x": xf}, expect="cmp:cpu" if nm in ("ok", "zero") else "err", opset=18)
# products: K = 0, empty rows, NaN, huge
for nm, a, b in (("k0", [3, 0], [0, 4]), ("m0", [0, 5], [5, 4]), ("nan", [3, 5], [5, 4]), ("big", [64, 300], [300, 70])):
    av = np.full(a, np.nan, np.float32) if nm == "nan" else rng.standard_normal(a).astype(np.float32)
    dcase(f"r8g_matmul_{nm}", 6, [N("MatMul", ["a", "b"], ["y"])], [vi("a", None), vi("b", None)], y,
          inputs={"a": av, "b": rng.standard_normal(b).astype(np.float32)})
dcase("r8g_gemm_transB_alpha_nan", 6, [N("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=float("nan"), beta=2.0)],
      [vi("a", None), vi("b", None)], y, [sc("c", np.ones([4]))],
      inputs={"a": np.ones([3, 5], np.float32), "b": np.ones([4, 5], np.float32)})
for nm, kw, xs in (("group2", dict(group=2), [1, 4, 6, 6]), ("dil3_pad", dict(dilations=[3, 3], pads=[3, 3, 3, 3]), [1, 4, 6, 6]),
                   ("stride5", dict(strides=[5, 5]), [1, 4, 6, 6]), ("empty_batch", {}, [0, 4, 6, 6]),
                   ("k_bigger", dict(pads=[0, 0, 0, 0]), [1, 4, 2, 2]), ("same_lower", dict(auto_pad="SAME_LOWER", strides=[2, 2]), [1, 4, 7, 7])):
    grp = kw.get("group", 1)
    dcase(f"r8g_conv_{nm}", 6, [N("Conv", ["x", "w", "b"], ["y"], **kw)], [vi("x", None)], y,
          [init("w", rng.standard_normal([6, 4 // grp, 3, 3]).astype(np.float32)), sc("b", np.arange(6))],
          inputs={"x": rng.standard_normal(xs).astype(np.float32)}, expect="err" if nm == "k_bigger" else "cmp:cpu")
for nm, kw in (("max_pad", dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2])), ("avg_cip", dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2], count_include_pad=1)),
               ("max_ceil", dict(kernel_shape=[2, 2], strides=[3, 3], ceil_mode=1)), ("max_dil", dict(kernel_shape=[2, 2], dilations=[3, 3])),
               ("max_k2p40", dict(kernel_shape=[2**40, 2**40], pads=[2**40] * 4))):
    op = "AveragePool" if "avg" in nm else "MaxPool"
    dcase(f"r8g_pool_{nm}", 1 if "2p40" in nm else 6, [N(op, ["x"], ["y"], **kw)], [vi("x", None)], y,
          inputs={"x": rng.standard_normal([1, 3, 5, 5]).astype(np.float32)}, expect="err" if "2p40" in nm else "cmp:cpu")
dcase("r8g_batchnorm_var_neg", 6, [N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=-1.0)], [vi("x", None)], y,
      [sc("s", np.ones(4)), sc("b", np.zeros(4)), sc("m", np.zeros(4)), sc("v", [-1.0, 0.5, 0, np.inf])],
      inputs={"x": rng.standard_normal([2, 4, 3]).astype(np.float32)}, expect="any")
dcase("r8g_softmax_inf_rows", 6, [N("Softmax", ["x"], ["y"], axis=-1)], [vi("x", None)], y,
      inputs={"x": np.array([[np.inf, 1, 2], [-np.inf] * 3, [np.nan, 0, 0], [3e38, 3e38, -3e38]], np.float32)})
dcase("r8g_layernorm_const_row", 6, [N("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=0.0)], [vi("x", None)], y,
      [sc("s", np.ones(4)), sc("b", np.zeros(4))], inputs={"x": np.ones([3, 4], np.float32) * 3e38})
dcase("r8g_reduce_axes_dup", 3, [N("ReduceSum", ["x", "a"], ["y"])], [vi("x", None)], y, [i64("a", [1, 1])], inputs={"x": xf},
      expect="err")
dcase("r8g_reduce_empty_axes_noop", 6, [N("ReduceMax", ["x", "a"], ["y"], noop_with_empty_axes=1)], [vi("x", None)], y,
      [i64("a", np.zeros([0]))], inputs={"x": xf})
dcase("r8g_reduce_max_empty_dim", 6, [N("ReduceMax", ["x", "a"], ["y"], keepdims=0)], [vi("x", None)], y,
      [i64("a", [1])], inputs={"x": np.zeros([3, 0, 2], np.float32)}, expect="any")
dcase("r8g_reduce_logsumexp_inf", 6, [N("ReduceLogSumExp", ["x", "a"], ["y"])], [vi("x", None)], y,
      [i64("a", [1])], inputs={"x": np.array([[np.inf, 1], [-np.inf, -np.inf], [3e38, 3e38]], np.float32)})
dcase("r8g_where_bcast", 6, [N("Where", ["c", "a", "b"], ["y"])], [vi("c", None, BOOL), vi("a", None), vi("b", None)], y,
      inputs={"c": rng.random([4, 1, 5]) < 0.5, "a": np.ones([3, 1], np.float32), "b": np.zeros([1, 5], np.float32)})
dcase("r8g_bitshift_64", 6, [N("Relu", ["x"], ["xr"]), N("BitShift", ["a", "b"], ["y"], direction="LEFT")],
      [vi("x", None), vi("a", None, TP.UINT64), vi("b", None, TP.UINT64)], [vi("y", None, TP.UINT64), vi("xr", None)],
      inputs={"x": np.ones(2, np.float32), "a": np.array([1, 1, 1], np.uint64), "b": np.array([63, 64, 2**63], np.uint64)},
      expect="any")
dcase("r8g_pow_int", 6, [N("Pow", ["a", "b"], ["y"])], [vi("a", None, I64), vi("b", None, I64)], [vi("y", None, I64)],
      inputs={"a": np.array([2, -2, 0, 3], np.int64), "b": np.array([62, 63, -1, 40], np.int64)}, expect="any")
dcase("r8g_mha_heads_huge", 3, [K("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=2**40)],
      [vi("q", None), vi("k", None), vi("v", None)], y,
      inputs={"q": np.ones([1, 2, 8], np.float32), "k": np.ones([1, 2, 8], np.float32), "v": np.ones([1, 2, 8], np.float32)},
      expect="err")
rows[-1] = (rows[-1][0], rows[-1][1], rows[-1][2], rows[-1][3])
m = model([K("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=2)], [vi("q", None), vi("k", None), vi("v", None)], y,
          domains=["kiln"])
raw("r8g_mha_kv_len0", 6, m, "cmp:cpu", "run r8g_mha_kv_len0.onnx" + save_inputs(
    "r8g_mha_kv_len0", {"q": np.ones([1, 2, 8], np.float32), "k": np.ones([1, 0, 8], np.float32),
                        "v": np.ones([1, 0, 8], np.float32)}) + f" {D}")
# device options
for i, opt in enumerate(("opencl:9.9", "opencl:0.99999999999999999999", "opencl:-1.0", "opencl:0.0:x", "OPENCL",
                         "opencl:", "opencl:0", "level_zero", "cuda", "opencl,cpu")):
    rows.append((f"r8g_device_opt_{i:02d}", 11, "any", f"run r8g_gather_in_range.onnx --input x=r8g_gather_in_range.x.npy "
                                                    f"--input i=r8g_gather_in_range.i.npy --device {opt}"))
rows.append(("r8g_bench_opencl_huge_work", 1, "any", f"bench r8g_matmul_big.onnx --shape a=64x300 --shape b=300x70 {D} --time 0.5"))
rows.append(("r8g_inspect_opencl", 6, "any", f"inspect r8g_gather_imin.onnx {D}"))

# ---- 5. kiln quantize (classes 5, 6, 11) ----
def wmodel(name, w, extra_nodes=(), x_shape=(2, 4), more_inits=()):
    m = model([N("MatMul", ["x", "w"], ["m"]), N("Relu", ["m"], ["y"])] + list(extra_nodes), [vi("x", list(x_shape))], y,
              [init("w", np.asarray(w, np.float32))] + list(more_inits))
    m.graph.node[0].name = "mm0"
    m.graph.node[1].name = "relu0"
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(m.SerializeToString())


def tpb(path, arr, name="x"):
    with open(os.path.join(OUT, path), "wb") as f:
        f.write(numpy_helper.from_array(arr, name).SerializeToString())


def calib(folder, arrays):
    for i, a in enumerate(arrays):
        os.makedirs(os.path.join(OUT, folder, f"test_data_set_{i}"), exist_ok=True)
        tpb(f"{folder}/test_data_set_{i}/input_0.pb", a)


wmodel("r8_q.onnx", rng.standard_normal([4, 3]))
calib("r8_cal_ok", [rng.standard_normal([2, 4]).astype(np.float32) for _ in range(3)])
Q = "quantize r8_q.onnx -o r8_q_out.onnx --calibrate r8_cal_ok"
for nm, pat, cls, exp in (("nosuch", "nosuch", 6, "err"), ("typo", "mm1", 6, "err"), ("empty", "''", 11, "any"),
                          ("commas", "',,,'", 11, "any"), ("long300", "m" * 300, 6, "err"), ("star", "'*'", 6, "err"),
                          ("bracket", "'[mm]*'", 6, "any"), ("exact", "mm0", 6, "err"), ("one_of_two", "mm0,nosuch", 6, "any"),
                          ("backslash", "'mm\\0'", 6, "any"), ("space", "' mm0'", 6, "err")):
    rows.append((f"r8q_exclude_{nm}", cls, exp, f"{Q} --exclude {pat}"))
    rows.append((f"r8q_dyn_exclude_{nm}", cls, exp, f"quantize r8_q.onnx -o r8_qd_out.onnx --dynamic --exclude {pat}"))
for nm, arrs, exp in (("nan", [np.full([2, 4], np.nan, np.float32)], "err"),
                      ("inf", [np.full([2, 4], np.inf, np.float32)], "err"),
                      ("mixed_nan", [np.array([[1, np.nan, 2, 3]] * 2, np.float32)], "err"),
                      ("zeros", [np.zeros([2, 4], np.float32)], "any"),
                      ("huge", [np.full([2, 4], 3e38, np.float32)], "any"),
                      ("denorm", [np.full([2, 4], 1e-45, np.float32)], "any"),
                      ("rows0", [np.zeros([0, 4], np.float32)], "err"),
                      ("i64", [np.ones([2, 4], np.int64)], "err"),
                      ("f64", [np.ones([2, 4], np.float64)], "any"),
                      ("rank3", [np.ones([1, 2, 4], np.float32)], "err"),
                      ("cols5", [np.ones([2, 5], np.float32)], "err")):
    calib(f"r8_cal_{nm}", arrs)
    for meth in ("minmax", "entropy", "percentile"):
        rows.append((f"r8q_cal_{nm}_{meth}", 6, exp, f"quantize r8_q.onnx -o r8_q_{nm}.onnx --calibrate r8_cal_{nm} --method {meth}"))
for nm, w, exp in (("nan", np.full([4, 3], np.nan), "err"), ("inf", np.full([4, 3], np.inf), "err"),
                   ("one_nan", np.where(np.eye(4, 3) > 0, np.nan, 0.5), "err"), ("big", np.full([4, 3], 3e38), "any"),
                   ("zeros", np.zeros([4, 3]), "any"), ("denorm", np.full([4, 3], 1e-45), "any"),
                   ("empty", np.zeros([4, 0]), "any"), ("neg_zero", np.full([4, 3], -0.0), "any")):
    wmodel(f"r8_qw_{nm}.onnx", w)
    rows.append((f"r8q_weights_{nm}_static", 6, exp, f"quantize r8_qw_{nm}.onnx -o r8_qw_{nm}_s.onnx --calibrate r8_cal_ok"))
    rows.append((f"r8q_weights_{nm}_dynamic", 6, exp, f"quantize r8_qw_{nm}.onnx -o r8_qw_{nm}_d.onnx --dynamic"))
    rows.append((f"r8q_weights_{nm}_static_run", 6, "any", f"run r8_qw_{nm}_s.onnx --input x=r8_cal_ok/test_data_set_0/input_0.pb"))
# a model with no product, a product in a subgraph, a weight shared by two products, int weights
m = model([N("Relu", ["x"], ["y"])], [vi("x", [2, 4])], y)
with open(os.path.join(OUT, "r8_qnone.onnx"), "wb") as f:
    f.write(m.SerializeToString())
rows.append(("r8q_no_product_dynamic", 11, "err", "quantize r8_qnone.onnx -o r8_qn.onnx --dynamic"))
rows.append(("r8q_no_product_static", 11, "err", "quantize r8_qnone.onnx -o r8_qn.onnx --calibrate r8_cal_ok"))
thb = body([N("MatMul", ["x", "w"], ["o"])], [vi("o", None)])
m = model([N("If", ["c"], ["y"], then_branch=thb, else_branch=thb)], [vi("x", [2, 4]), vi("c", [], BOOL)], y,
          [init("w", rng.standard_normal([4, 3]).astype(np.float32))])
with open(os.path.join(OUT, "r8_qif.onnx"), "wb") as f:
    f.write(m.SerializeToString())
rows.append(("r8q_product_in_if_dynamic", 6, "any", "quantize r8_qif.onnx -o r8_qif_d.onnx --dynamic"))
m = model([N("MatMul", ["x", "w"], ["a"]), N("MatMul", ["x", "w"], ["b"]), N("Add", ["a", "b"], ["y"])], [vi("x", [2, 4])], y,
          [init("w", rng.standard_normal([4, 3]).astype(np.float32))])
with open(os.path.join(OUT, "r8_qshared.onnx"), "wb") as f:
    f.write(m.SerializeToString())
rows.append(("r8q_shared_weight_dynamic", 6, "any", "quantize r8_qshared.onnx -o r8_qs_d.onnx --dynamic"))
rows.append(("r8q_shared_weight_static", 6, "any", "quantize r8_qshared.onnx -o r8_qs_s.onnx --calibrate r8_cal_ok"))
m = model([N("MatMul", ["x", "w"], ["y"])], [vi("x", [2, 4], I64)], [vi("y", None, I64)], [i64("w", np.ones([4, 3]))])
with open(os.path.join(OUT, "r8_qint.onnx"), "wb") as f:
    f.write(m.SerializeToString())
rows.append(("r8q_int_weights_dynamic", 11, "err", "quantize r8_qint.onnx -o r8_qi.onnx --dynamic"))
m = model([N("Gemm", ["x", "w", "b"], ["y"], transB=1, alpha=float("nan"))], [vi("x", [2, 4])], y,
          [init("w", rng.standard_normal([3, 4]).astype(np.float32)), sc("b", np.ones(3))])
with open(os.path.join(OUT, "r8_qgemm_alpha_nan.onnx"), "wb") as f:
    f.write(m.SerializeToString())
rows.append(("r8q_gemm_alpha_nan_static", 6, "any", "quantize r8_qgemm_alpha_nan.onnx -o r8_qga.onnx --calibrate r8_cal_ok"))
rows.append(("r8q_gemm_alpha_nan_dynamic", 6, "any", "quantize r8_qgemm_alpha_nan.onnx -o r8_qgd.onnx --dynamic"))
for i, opt in enumerate(("--percentile 1e-300 --method percentile", "--percentile nan", "--batch-size 2147483647",
                         "--max-samples 9223372036854775807", "--per-channel --per-tensor", "--symmetric --full-range",
                         "--method entropy --percentile 50", "--array x=nosuch", "--array =x", "--array x=")):
    rows.append((f"r8q_opt_{i:02d}", 11, "any", f"{Q} {opt}"))

# ---- 6. kiln check folders with odd test data (classes 5, 6) ----
def tcase(folder, sets, model_bytes=None):
    d = os.path.join(OUT, folder)
    os.makedirs(d, exist_ok=True)
    mb = model_bytes or model([N("Add", ["x", "one"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])],
                              [sc("one", 1.0)]).SerializeToString()
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(mb)
    for i, files in enumerate(sets):
        sd = os.path.join(d, f"test_data_set_{i}")
        os.makedirs(sd, exist_ok=True)
        for fn, content in files.items():
            with open(os.path.join(sd, fn), "wb") as f:
                f.write(content if isinstance(content, bytes) else
                        numpy_helper.from_array(content[1], content[0]).SerializeToString())


x23 = np.arange(6, dtype=np.float32).reshape(2, 3)
okset = {"input_0.pb": ("x", x23), "output_0.pb": ("y", x23 + 1)}
checks = [
    ("ok", [okset], 6, "ok"),
    ("input_f64", [{"input_0.pb": ("x", x23.astype(np.float64)), "output_0.pb": ("y", x23 + 1)}], 6, "err"),
    ("input_i64", [{"input_0.pb": ("x", x23.astype(np.int64)), "output_0.pb": ("y", x23 + 1)}], 6, "err"),
    ("output_f64", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", (x23 + 1).astype(np.float64))}], 6, "any"),
    ("output_i64_equal", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", (x23 + 1).astype(np.int64))}], 6, "err"),
    ("output_shape_flat", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", (x23 + 1).ravel())}], 6, "err"),
    ("output_shape_t", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", (x23 + 1).T.copy())}], 6, "err"),
    ("output_scalar_bcast", [{"input_0.pb": ("x", np.zeros([2, 3], np.float32)), "output_0.pb": ("y", np.array(1.0, np.float32))}], 6, "err"),
    ("output_empty", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", np.zeros([0], np.float32))}], 6, "err"),
    ("output_nan_expected", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", np.full([2, 3], np.nan, np.float32))}], 6, "err"),
    ("output_inf_expected", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", np.full([2, 3], np.inf, np.float32))}], 6, "err"),
    ("output_name_other", [{"input_0.pb": ("x", x23), "output_0.pb": ("zz", x23 + 1)}], 6, "any"),
    ("input_name_other", [{"input_0.pb": ("zz", x23), "output_0.pb": ("y", x23 + 1)}], 6, "any"),
    ("output_missing", [{"input_0.pb": ("x", x23)}], 6, "any"),
    ("input_missing", [{"output_0.pb": ("y", x23 + 1)}], 6, "err"),
    ("output_extra", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", x23 + 1), "output_1.pb": ("w", x23)}], 6, "any"),
    ("input_extra", [{"input_0.pb": ("x", x23), "input_1.pb": ("w", x23), "output_0.pb": ("y", x23 + 1)}], 6, "err"),
    ("output_npy", [{"input_0.pb": ("x", x23), "output_0.npy": b"\x93NUMPY"}], 6, "any"),
    ("output_junk", [{"input_0.pb": ("x", x23), "output_0.pb": b"\xff" * 64}], 6, "err"),
    ("output_empty_file", [{"input_0.pb": ("x", x23), "output_0.pb": b""}], 6, "err"),
    ("second_set_wrong", [okset, {"input_0.pb": ("x", x23), "output_0.pb": ("y", x23 + 2)}], 6, "err"),
    ("second_set_input_shape", [okset, {"input_0.pb": ("x", np.ones([4, 3], np.float32)), "output_0.pb": ("y", np.ones([4, 3], np.float32) * 2)}], 6, "any"),
    ("output_f16_close", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", (x23 + 1).astype(np.float16))}], 6, "any"),
    ("output_bool", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", np.ones([2, 3], bool))}], 6, "err"),
]
for nm, sets, cls, exp in checks:
    tcase(f"r8_chk_{nm}", sets)
    rows.append((f"r8k_check_{nm}", cls, exp, f"check r8_chk_{nm}"))
# test_data_set names: -1, 00, 1 without 0, with a suffix, a file named like a set
tcase("r8_chk_names", [okset])
os.makedirs(os.path.join(OUT, "r8_chk_names", "test_data_set_"), exist_ok=True)
os.makedirs(os.path.join(OUT, "r8_chk_names", "test_data_set_-1"), exist_ok=True)
os.makedirs(os.path.join(OUT, "r8_chk_names", "test_data_set_1x"), exist_ok=True)
open(os.path.join(OUT, "r8_chk_names", "test_data_set_2"), "wb").close()
rows.append(("r8k_check_set_names", 6, "any", "check r8_chk_names"))
tcase("r8_chk_gap", [okset])
os.rename(os.path.join(OUT, "r8_chk_gap", "test_data_set_0"), os.path.join(OUT, "r8_chk_gap", "test_data_set_7"))
rows.append(("r8k_check_only_set_7", 6, "any", "check r8_chk_gap"))
tcase("r8_chk_wrong_in_00", [okset])
os.makedirs(os.path.join(OUT, "r8_chk_wrong_in_00", "test_data_set_00"), exist_ok=True)
for fn, (n_, a) in {"input_0.pb": ("x", x23), "output_0.pb": ("y", x23 + 5)}.items():
    tpb(f"r8_chk_wrong_in_00/test_data_set_00/{fn}", a, n_)
rows.append(("r8k_check_set_00_wrong", 6, "err", "check r8_chk_wrong_in_00"))
tcase("r8_chk_two_models", [okset])
with open(os.path.join(OUT, "r8_chk_two_models", "model.pt"), "wb") as f:
    f.write(b"PK\x05\x06" + b"\0" * 18)
rows.append(("r8k_check_onnx_and_pt", 6, "any", "check r8_chk_two_models"))
# a folder link inside the case: test_data_set_1 -> test_data_set_0 (inside, allowed?) and -> ../other case
tcase("r8_chk_set_link_inside", [okset])
os.symlink("test_data_set_0", os.path.join(OUT, "r8_chk_set_link_inside", "test_data_set_1"))
rows.append(("r8k_check_set_link_inside", 5, "any", "check r8_chk_set_link_inside"))
tcase("r8_chk_model_link_out", [okset])
os.remove(os.path.join(OUT, "r8_chk_model_link_out", "model.onnx"))
os.symlink("../r8_chk_ok/model.onnx", os.path.join(OUT, "r8_chk_model_link_out", "model.onnx"))
rows.append(("r8k_check_model_link_outside", 5, "err", "check r8_chk_model_link_out"))
tcase("r8_chk_ext_link_out", [okset], model([N("Add", ["x", "one"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])],
                                            []).SerializeToString())
# the case's model with its constant in external data, the file a link to another folder's file
ext_m = model([N("Add", ["x", "one"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])], [sc("one", 1.0)])
t = ext_m.graph.initializer[0]
t.ClearField("raw_data")
t.ClearField("float_data")
t.data_location = TP.EXTERNAL
for k_, v_ in (("location", "one.bin"), ("offset", "0"), ("length", "4")):
    e = t.external_data.add()
    e.key, e.value = k_, v_
with open(os.path.join(OUT, "r8_chk_ext_link_out", "model.onnx"), "wb") as f:
    f.write(ext_m.SerializeToString())
with open(os.path.join(OUT, "r8_ext_one_outside.bin"), "wb") as f:
    f.write(np.array([1.0], np.float32).tobytes())
os.symlink("../r8_ext_one_outside.bin", os.path.join(OUT, "r8_chk_ext_link_out", "one.bin"))
rows.append(("r8k_check_external_link_outside", 5, "err", "check r8_chk_ext_link_out"))
# many outputs files, huge index
tcase("r8_chk_out_index_huge", [{"input_0.pb": ("x", x23), "output_0.pb": ("y", x23 + 1),
                                 "output_99999999999999999999.pb": ("q", x23)}])
rows.append(("r8k_check_output_index_huge", 6, "any", "check r8_chk_out_index_huge"))

# ---- 7. ONNX external data not probed before (classes 1, 5, 6) ----
def ext_case(name, cls, tensor_setup, expect="err", files=(), nodes=None, outs=None, inits_extra=()):
    d = os.path.join(OUT, f"{name}_d")
    os.makedirs(d, exist_ok=True)
    for fn, content in files:
        p = os.path.join(d, fn)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        if isinstance(content, tuple) and content[0] == "link":
            if os.path.lexists(p):
                os.remove(p)
            os.symlink(content[1], p)
        elif isinstance(content, tuple) and content[0] == "dir":
            os.makedirs(p, exist_ok=True)
        else:
            with open(p, "wb") as f:
                f.write(content)
    m = tensor_setup()
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    rows.append((name, cls, expect, f"run {name}_d/model.onnx"))


def ext_tensor(name, dims, dt, loc, offset=None, length=None, extra=()):
    t = TP()
    t.name = name
    t.data_type = dt
    t.dims.extend(dims)
    t.data_location = TP.EXTERNAL
    kv = [("location", loc)]
    if offset is not None:
        kv.append(("offset", str(offset)))
    if length is not None:
        kv.append(("length", str(length)))
    for k_, v_ in kv + list(extra):
        e = t.external_data.add()
        e.key, e.value = k_, v_
    return t


w4 = np.arange(4, dtype=np.float32).tobytes()
def simple_ext(loc, **kw):
    return lambda: model([N("Add", ["x", "w"], ["y"])], [], y, [sc("x", [1, 1, 1, 1]), ext_tensor("w", [4], F, loc, **kw)])


os.makedirs(os.path.join(OUT, "r8_ext_elsewhere"), exist_ok=True)
with open(os.path.join(OUT, "r8_ext_elsewhere", "w.bin"), "wb") as f:
    f.write(w4)
ext_case("r8e_dir_link_inside_to_outside", 5, simple_ext("sub/w.bin"), files=[("sub", ("link", "../r8_ext_elsewhere"))])
ext_case("r8e_dir_link_inside_to_inside", 5, simple_ext("sub/w.bin"), expect="any",
         files=[("real/w.bin", w4), ("sub", ("link", "real"))])
ext_case("r8e_file_link_to_inside", 5, simple_ext("w.bin"), expect="any", files=[("real.bin", w4), ("w.bin", ("link", "real.bin"))])
ext_case("r8e_loc_4000", 8, simple_ext("a" * 4000), files=[])
ext_case("r8e_loc_deep_dirs", 8, simple_ext("/".join(["d"] * 200) + "/w.bin"), files=[])
ext_case("r8e_loc_dot_slash_many", 6, simple_ext("./" * 500 + "w.bin"), expect="any", files=[("w.bin", w4)])
ext_case("r8e_loc_trailing_slash_dot", 8, simple_ext("w.bin/."), files=[("w.bin", w4)])
ext_case("r8e_loc_nul_inside", 5, simple_ext("w.bin\x00../../etc/hostname"), expect="any", files=[("w.bin", w4)])
ext_case("r8e_loc_newline", 6, simple_ext("w\n.bin"), expect="any", files=[("w\n.bin", w4)])
ext_case("r8e_loc_dir", 8, simple_ext("dd"), files=[("dd", ("dir",))])
ext_case("r8e_loc_dotdot_back_in", 5, simple_ext("../r8e_loc_dotdot_back_in_d/w.bin"), files=[("w.bin", w4)])
ext_case("r8e_offset_neg_zero", 6, simple_ext("w.bin", offset="-0"), expect="any", files=[("w.bin", w4)])
ext_case("r8e_length_neg", 6, simple_ext("w.bin", length="-16"), files=[("w.bin", w4)])
ext_case("r8e_length_2p64_plus16", 6, simple_ext("w.bin", length=str(2**64 + 16)), files=[("w.bin", w4)])
ext_case("r8e_offset_2p64", 6, simple_ext("w.bin", offset=str(2**64)), files=[("w.bin", w4)])
ext_case("r8e_checksum_wrong", 6, lambda: model([N("Add", ["x", "w"], ["y"])], [], y,
                                                [sc("x", [1, 1, 1, 1]), ext_tensor("w", [4], F, "w.bin", extra=[("checksum", "00" * 20)])]),
         expect="any", files=[("w.bin", w4)])
ext_case("r8e_key_unknown", 6, lambda: model([N("Add", ["x", "w"], ["y"])], [], y,
                                             [sc("x", [1, 1, 1, 1]), ext_tensor("w", [4], F, "w.bin", extra=[("basepath", "/etc")])]),
         expect="any", files=[("w.bin", w4)])
ext_case("r8e_key_empty", 6, lambda: model([N("Add", ["x", "w"], ["y"])], [], y,
                                           [sc("x", [1, 1, 1, 1]), ext_tensor("w", [4], F, "w.bin", extra=[("", "x")])]),
         expect="any", files=[("w.bin", w4)])
ext_case("r8e_location_twice_other", 5, lambda: model([N("Add", ["x", "w"], ["y"])], [], y,
                                                      [sc("x", [1, 1, 1, 1]), ext_tensor("w", [4], F, "w.bin", extra=[("location", "../../x")])]),
         files=[("w.bin", w4)])
def sparse_ext():
    vals = ext_tensor("w_values", [2], F, "v.bin")
    idx = numpy_helper.from_array(np.array([0, 3], np.int64), "w_indices")
    sp = helper.make_sparse_tensor(vals, idx, [4])
    g = helper.make_graph([N("Add", ["x", "w"], ["y"])], "g", [], y, [sc("x", [1, 1, 1, 1])], sparse_initializer=[sp])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m
ext_case("r8e_sparse_values_external", 6, sparse_ext, expect="any", files=[("v.bin", np.array([5, 6], np.float32).tobytes())])
ext_case("r8e_sparse_values_external_link_out", 5, sparse_ext, files=[("v.bin", ("link", "../r8_ext_elsewhere/w.bin"))])
def sparse_idx_ext():
    vals = numpy_helper.from_array(np.array([5, 6], np.float32), "w_values")
    idx = ext_tensor("w_indices", [2], I64, "i.bin")
    sp = helper.make_sparse_tensor(vals, idx, [4])
    g = helper.make_graph([N("Add", ["x", "w"], ["y"])], "g", [], y, [sc("x", [1, 1, 1, 1])], sparse_initializer=[sp])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m
ext_case("r8e_sparse_indices_external_past", 6, sparse_idx_ext, files=[("i.bin", np.array([0, 2**40], np.int64).tobytes())])
ext_case("r8e_sparse_indices_external_ok", 6, sparse_idx_ext, expect="any", files=[("i.bin", np.array([0, 3], np.int64).tobytes())])
ext_case("r8e_string_external", 6, lambda: model([N("Identity", ["w"], ["y"])], [], [vi("y", None, TP.STRING)],
                                                 [ext_tensor("w", [2], TP.STRING, "s.bin")]), files=[("s.bin", b"abcdefgh")])
ext_case("r8e_int4_external_odd", 6, lambda: model([N("Cast", ["w"], ["y"], to=F)], [], y, [ext_tensor("w", [3], TP.INT4, "s.bin")]),
         expect="any", files=[("s.bin", b"\x12\x34")])
ext_case("r8e_int4_external_short", 6, lambda: model([N("Cast", ["w"], ["y"], to=F)], [], y, [ext_tensor("w", [5], TP.INT4, "s.bin")]),
         files=[("s.bin", b"\x12\x34")])
ext_case("r8e_bool_external_bytes", 6, lambda: model([N("Not", ["w"], ["y"])], [], [vi("y", None, BOOL)],
                                                     [ext_tensor("w", [3], BOOL, "s.bin")]), expect="any", files=[("s.bin", b"\x00\x07\xff")])
ext_case("r8e_empty_huge_external", 2, lambda: model([N("Identity", ["w"], ["y"])], [], y, [ext_tensor("w", [0, 2**62], F, "s.bin")]),
         expect="any", files=[("s.bin", b"")])
ext_case("r8e_huge_external_small_file", 1, lambda: model([N("Identity", ["w"], ["y"])], [], y,
                                                          [ext_tensor("w", [2**28], F, "s.bin")]), files=[("s.bin", b"\0" * 16)])
ext_case("r8e_loop_body_ext_link_out", 5, lambda: model(
    [N("Loop", ["m", "", "x"], ["y"], body=body([N("Identity", ["cond"], ["co"]), N("Add", ["v", "w"], ["vo"])],
                                                 [vi("co", [], BOOL), vi("vo", None)], cin + [vi("v", None)]))],
    [], y, [i64("m", 2), sc("x", [1, 1, 1, 1]), ext_tensor("w", [4], F, "sub/w.bin")]),
    files=[("sub", ("link", "../r8_ext_elsewhere"))])
# optimize writing a model whose constants were external: does -o write beside itself only?
ext_case("r8e_optimize_src", 6, simple_ext("w.bin"), expect="any", files=[("w.bin", w4)])
os.makedirs(os.path.join(OUT, "r8_optout"), exist_ok=True)
rows.append(("r8e_optimize_external_out", 5, "any", "optimize r8e_optimize_src_d/model.onnx -o r8_optout/m.onnx"))

with open(os.path.join(OUT, "probe.tsv"), "w") as f:
    for r in rows:
        f.write("\t".join(str(x) for x in r) + "\n")
print(len(rows), "cases in", OUT)
