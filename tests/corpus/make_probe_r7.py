#!/usr/bin/env python3
"""Issue 20, round 7: FRESH hostile cases of kinds rounds 1 to 6 did not use: kiln's
training and gradient ops read from a file (SGD, Adagrad, Adam, Lamb, Lars, Loss,
LossGrad, SoftmaxGrad, ReduceGrad, SumTo, UnaryGrad, GatherGrad, SliceGrad, ResizeGrad,
MaxPoolGrad, ConvGradX, BatchNormTrain, BatchNormGrad, LayerNormGrad, DropoutTrain,
DropoutGrad, GRUGrad, LSTMGrad, QLinearMul, GradNorm, ClipCoef) with hostile attributes
and shapes; the element-wise ops no round fed (trigonometric, hyperbolic, rounding,
bitwise, logical, comparison, the activations) over empty-but-huge inputs and broadcasts;
the sequence and optional ops at their positions' edges; GRU and LSTM with Affine
activations and short or long activation_alpha / activation_beta lists; `.npz` archives
whose entries carry data descriptors (general-purpose flag bit 3) with descriptors, CRCs
and flags that lie, and data that does not match its CRC-32 (.npz and .pt); and `kiln
train` options and paths (--frozen, --no-decay, --resume, --checkpoint, --log, --curve,
-o, --eval, --schedule, --label-smoothing, --ignore-index, --betas). Same output as
make_probe.py (a scratch folder and its probe.tsv), run by the same runner:

    .venv/bin/python tests/corpus/make_probe_r7.py OUTDIR
    tests/corpus/run_probe.sh KILN OUTDIR [CAP_KB] > RESULTS

Not part of the test suite: docs/fuzzing.md ("Round 7") has the results.
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
from probe_lib import lin_module, Probe, model

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
F, I64, I32, U8, I8, BOOL = TP.FLOAT, TP.INT64, TP.INT32, TP.UINT8, TP.INT8, TP.BOOL
IMAX, IMIN = 2**63 - 1, -2**63
HUGE = [0, 2**62, 4]
P = Probe(OUT)
rows = P.rows
case, one = P.case, P.one
N = helper.make_node
y = [vi("y", None)]
f32 = lambda n, *s: init(n, (np.arange(int(np.prod(s)), dtype=np.float32) - 3).reshape(s) / 4)
i64 = lambda n, v: init(n, np.array(v, np.int64))
sc = lambda n, v: init(n, np.array(v, np.float32))
rng = np.random.default_rng(7)


def K(op_type, ins, outs, **kw):
    return N(op_type, ins, outs, domain="kiln", **kw)


def kcase(name, cls, node, inits, inputs=None, outs=None, expect="err", ins=()):
    one(name, cls, node, list(ins), outs or [vi(o, None) for o in node.output if o], inits,
        expect=expect, inputs=inputs, domains=["kiln"])


# ---- 1. element-wise ops no round fed, over empty-but-huge inputs (class 2) ----
UNARY = ["Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cos", "Cosh", "Sin", "Sinh",
         "Tan", "Ceil", "Floor", "Round", "Erf", "Exp", "Log", "Reciprocal", "Sign", "Sqrt",
         "IsNaN", "IsInf", "Sigmoid", "Softsign", "Selu", "Elu", "Celu", "HardSigmoid",
         "HardSwish", "Mish", "LeakyRelu", "Swish"]
for op in UNARY:
    outt = BOOL if op in ("IsNaN", "IsInf") else F
    opset = 24 if op == "Swish" else 21
    one(f"r7e_{op.lower()}_huge", 2, N(op, ["x"], ["y"]), [vi("x", None)], [vi("y", None, outt)],
        inputs={"x": ("hdr", HUGE)}, expect="any", opset=opset)
    one(f"r7e_{op.lower()}_huge_t", 2, N(op, ["x"], ["y"]), [vi("x", None)], [vi("y", None, outt)],
        inputs={"x": ("hdr", [2**40, 0, 2**20])}, expect="any", opset=opset)
BIN = [("Sub", F, F), ("Greater", F, BOOL), ("GreaterOrEqual", F, BOOL), ("Less", F, BOOL),
       ("LessOrEqual", F, BOOL), ("And", BOOL, BOOL), ("Or", BOOL, BOOL), ("Xor", BOOL, BOOL),
       ("BitwiseAnd", I32, I32), ("BitwiseOr", I32, I32), ("BitwiseXor", I32, I32)]
for op, it, ot in BIN:
    descr = {F: "<f4", BOOL: "|b1", I32: "<i4"}[it]
    one(f"r7e_{op.lower()}_bcast_huge", 2, N(op, ["a", "b"], ["y"]), [vi("a", None, it), vi("b", None, it)],
        [vi("y", None, ot)], inputs={"a": ("hdr", [2**62, 1, 0], descr), "b": ("hdr", [1, 4, 1], descr)},
        expect="any")
    one(f"r7e_{op.lower()}_bcast_over", 2, N(op, ["a", "b"], ["y"]), [vi("a", None, it), vi("b", None, it)],
        [vi("y", None, ot)], inputs={"a": ("hdr", [2**40, 1], descr), "b": ("hdr", [1, 2**40], descr)})
one("r7e_bitwisenot_huge", 2, N("BitwiseNot", ["x"], ["y"]), [vi("x", None, I32)], [vi("y", None, I32)],
    inputs={"x": ("hdr", HUGE, "<i4")}, expect="any")
for a, g in ((float("nan"), 1.0), (float("inf"), 1.0), (-1.0, 0.0), (1e38, 1e38)):
    one(f"r7e_selu_{a}_{g}", 6, N("Selu", ["x"], ["y"], alpha=a, gamma=g), [], y, [f32("x", 2, 3)], expect="any")
for a in (0.0, float("nan"), -1.0):
    one(f"r7e_celu_alpha_{a}", 6, N("Celu", ["x"], ["y"], alpha=a), [], y, [f32("x", 2, 3)],
        expect="err" if a == 0.0 else "any")
one("r7e_round_half", 6, N("Round", ["x"], ["y"]), [], y, [sc("x", [0.5, 1.5, 2.5, -0.5, -2.5])], expect="ok")
one("r7e_bitwise_float", 3, N("BitwiseAnd", ["a", "a"], ["y"]), [], y, [f32("a", 4)])
one("r7e_and_float", 3, N("And", ["a", "a"], ["y"]), [], y, [f32("a", 4)])
one("r7e_sign_int_min", 6, N("Sign", ["x"], ["y"]), [], [vi("y", None, I64)], [i64("x", [IMIN, -1, 0, IMAX])], expect="ok")
one("r7e_reciprocal_int", 3, N("Reciprocal", ["x"], ["y"]), [], [vi("y", None, I64)], [i64("x", [0, 1])])

# ---- 2. sequence and optional ops at their edges (classes 3, 6, 8) ----
SEQ = [N("SequenceConstruct", ["a", "b"], ["s"])]
AB = [f32("a", 2, 3), f32("b", 2, 3)]
for pos in (IMIN, IMAX, -3, 2, 3, -2**31):
    case(f"r7s_seqat_{pos}", 8, model(SEQ + [N("SequenceAt", ["s", "p"], ["y"])], [], y, AB + [i64("p", pos)]),
         expect="err" if pos not in (-2,) else "ok")
    case(f"r7s_seqerase_{pos}", 8, model(SEQ + [N("SequenceErase", ["s", "p"], ["t"]),
                                                N("SequenceLength", ["t"], ["y"])], [], [vi("y", None, I64)],
                                         AB + [i64("p", pos)]), expect="err" if pos not in (-2,) else "ok")
    case(f"r7s_seqinsert_{pos}", 8, model(SEQ + [N("SequenceInsert", ["s", "a", "p"], ["t"]),
                                                 N("SequenceLength", ["t"], ["y"])], [], [vi("y", None, I64)],
                                          AB + [i64("p", pos)]), expect="err" if pos not in (-2, 2) else "ok")
case("r7s_seqat_pos_float", 3, model(SEQ + [N("SequenceAt", ["s", "p"], ["y"])], [], y, AB + [sc("p", 0.0)]))
case("r7s_seqat_pos_vector", 3, model(SEQ + [N("SequenceAt", ["s", "p"], ["y"])], [], y, AB + [i64("p", [0, 1])]))
case("r7s_seqerase_empty", 8, model([N("SequenceEmpty", [], ["s"]), N("SequenceErase", ["s"], ["t"]),
                                     N("SequenceLength", ["t"], ["y"])], [], [vi("y", None, I64)]))
case("r7s_seqat_empty", 8, model([N("SequenceEmpty", [], ["s"]), N("SequenceAt", ["s", "p"], ["y"])], [], y, [i64("p", 0)]))
case("r7s_concatfromseq_empty", 8, model([N("SequenceEmpty", [], ["s"]), N("ConcatFromSequence", ["s"], ["y"], axis=0)], [], y))
for ax, na in ((3, 1), (-4, 1), (2, 0), (IMAX, 0), (IMIN, 1), (-3, 1), (2, 1)):
    case(f"r7s_concatfromseq_ax{ax}_new{na}", 3, model(SEQ + [N("ConcatFromSequence", ["s"], ["y"], axis=ax, new_axis=na)], [], y, AB),
         expect="ok" if (ax, na) in ((-3, 1), (2, 1)) else "err")
case("r7s_concatfromseq_new_axis_2", 3, model(SEQ + [N("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=2)], [], y, AB))
case("r7s_concatfromseq_mixed", 3, model([N("SequenceConstruct", ["a", "c"], ["s"]), N("ConcatFromSequence", ["s"], ["y"], axis=0)], [], y,
                                         [f32("a", 2, 3), f32("c", 2, 4)]))
for nm, sp, keep in (("zero", 0, 1), ("neg", -1, 1), ("huge", 2**40, 1), ("sum_short", [1, 0], 1),
                     ("sum_long", [2, 2], 1), ("sum_overflow", [IMAX, 2], 1), ("neg_parts", [3, -1], 1),
                     ("keepdims_2", None, 2), ("keepdims_0_split", 1, 0), ("empty_list", [], 1)):
    ins = ["x"] + (["sp"] if sp is not None else [])
    its = [f32("x", 2, 3)] + ([i64("sp", sp)] if sp is not None else [])
    case(f"r7s_splittoseq_{nm}", 3, model([N("SplitToSequence", ins, ["s"], axis=0, keepdims=keep),
                                          N("SequenceLength", ["s"], ["y"])], [], [vi("y", None, I64)], its),
         expect="any" if nm in ("keepdims_0_split", "empty_list", "huge") else "err")
case("r7s_splittoseq_huge_empty", 9, model([N("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
                                            N("SequenceLength", ["s"], ["y"])], [vi("x", None)], [vi("y", None, I64)]),
     inputs={"x": ("hdr", [2**40, 0])}, expect="any")
case("r7s_splittoseq_axis_huge", 9, model([N("SplitToSequence", ["x"], ["s"], axis=1, keepdims=1),
                                           N("SequenceLength", ["s"], ["y"])], [vi("x", None)], [vi("y", None, I64)]),
     inputs={"x": ("hdr", [0, 2**40])}, expect="any")
opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
case("r7o_optional_get_empty", 8, model([N("Optional", [], ["o"], type=opt_t.optional_type.elem_type),
                                         N("OptionalGetElement", ["o"], ["y"])], [], y))
case("r7o_optional_has_none", 6, model([N("OptionalHasElement", [], ["y"])], [], [vi("y", None, BOOL)]), expect="any")
case("r7o_optional_no_type", 3, model([N("Optional", [], ["o"]), N("OptionalHasElement", ["o"], ["y"])], [], [vi("y", None, BOOL)]))
case("r7o_optional_get_tensor", 6, model([N("OptionalGetElement", ["a"], ["y"])], [], y, [f32("a", 2)]), expect="ok")
case("r7o_optional_type_and_input", 3, model([N("Optional", ["a"], ["o"], type=helper.make_tensor_type_proto(I64, [3])),
                                              N("OptionalGetElement", ["o"], ["y"])], [], y, [f32("a", 2)]))

# ---- 3. GRU / LSTM Affine activations with short and long alpha / beta lists ----
def rnn(op, acts, **kw):
    H, I = 2, 3
    g = 3 if op == "GRU" else 4
    its = [init("W", rng.standard_normal([1, g * H, I]).astype(np.float32)),
           init("R", rng.standard_normal([1, g * H, H]).astype(np.float32)),
           init("X", rng.standard_normal([2, 1, I]).astype(np.float32))]
    return model([N(op, ["X", "W", "R"], ["", "y"], hidden_size=H, activations=acts, **kw)], [], y, its)


for op, n in (("GRU", 2), ("LSTM", 3)):
    for nm, kw, exp in (("alpha_short", dict(activation_alpha=[2.0]), "err"),
                        ("beta_short", dict(activation_alpha=[2.0] * n, activation_beta=[0.5]), "err"),
                        ("alpha_exact", dict(activation_alpha=[2.0] * n, activation_beta=[0.5] * n), "ok"),
                        ("alpha_long", dict(activation_alpha=[2.0] * (n + 5)), "ok"),
                        ("alpha_none", {}, "ok"), ("alpha_empty", None, "ok")):
        m = rnn(op, ["Affine"] * n, **(kw or {}))
        if kw is None:  # an activation_alpha of no values
            m.graph.node[0].attribute.append(helper.make_attribute("activation_alpha", [], attr_type=onnx.AttributeProto.FLOATS))
        case(f"r7r_{op.lower()}_affine_{nm}", 6, m, expect=exp)
    case(f"r7r_{op.lower()}_scaledtanh_one_beta", 6,
         rnn(op, ["ScaledTanh"] * n, activation_alpha=[1.0] * n, activation_beta=[1.0]))
    case(f"r7r_{op.lower()}_mixed_alpha_count", 6,
         rnn(op, ["LeakyRelu"] + ["Tanh"] * (n - 1), activation_alpha=[0.1]), expect="ok")
    case(f"r7r_{op.lower()}_bidir_one_alpha", 6,
         model(rnn(op, ["Affine"] * n * 2, activation_alpha=[1.0] * n, direction="bidirectional").graph.node, [], y), expect="err")
# the bidirectional one above has no initializers: a refusal for the missing inputs is right too

# ---- 4. kiln's training and gradient ops from a file (classes 1, 2, 3, 8, 10) ----
KD = ["kiln"]
hyp = lambda v: sc("h", v)
for op, nh, extra in (("SGD", 5, []), ("Adagrad", 5, ["acc"]), ("Adam", 7, ["m", "v"]),
                      ("Lamb", 6, ["m", "v"]), ("Lars", 6, ["mom"])):
    base = ["h", "p", "g"] + extra
    good = [hyp([0.1] * nh), f32("p", 4), f32("g", 4)] + [f32(e, 4) for e in extra]
    kcase(f"r7k_{op.lower()}_control", 6, K(op, base, ["y"]), good, expect="any")
    kcase(f"r7k_{op.lower()}_hyper_short", 3, K(op, base, ["y"]), [hyp([0.1])] + good[1:])
    kcase(f"r7k_{op.lower()}_hyper_empty", 3, K(op, base, ["y"]), [hyp(np.zeros([0], np.float32))] + good[1:])
    kcase(f"r7k_{op.lower()}_grad_shape", 3, K(op, base, ["y"]), good[:2] + [f32("g", 5)] + good[3:])
    kcase(f"r7k_{op.lower()}_state_shape", 3, K(op, base, ["y"]), good[:3] + [f32(e, 2, 2) for e in extra]) if extra else None
    kcase(f"r7k_{op.lower()}_hyper_nan", 6, K(op, base, ["y"]), [hyp([np.nan] * nh)] + good[1:], expect="any")
    kcase(f"r7k_{op.lower()}_huge", 2, K(op, base, ["y"]), [hyp([0.1] * nh)],
          inputs={k: ("hdr", HUGE) for k in base[1:]}, ins=[vi(k, None) for k in base[1:]], expect="any")
    kcase(f"r7k_{op.lower()}_gradscale_vec", 3, K(op, base + ["gs"], ["y"]), good + [f32("gs", 3)])
    kcase(f"r7k_{op.lower()}_trail_f32", 3, K(op, base + ["", "t"], ["y"]), good + [f32("t", 4)])
kcase("r7k_lamb_apex_7", 3, K("Lamb", ["h", "p", "g", "m", "v"], ["y"], apex=7), [hyp([0.1] * 6), f32("p", 4), f32("g", 4), f32("m", 4), f32("v", 4)])
kcase("r7k_lamb_max_trust_nan", 6, K("Lamb", ["h", "p", "g", "m", "v"], ["y"], max_trust=float("nan")), [hyp([0.1] * 6), f32("p", 4), f32("g", 4), f32("m", 4), f32("v", 4)], expect="any")
kcase("r7k_gradnorm_none_empty", 6, K("GradNorm", ["a"], ["y"]), [], inputs={"a": ("hdr", HUGE)}, ins=[vi("a", None)], expect="any")
kcase("r7k_gradnorm_int", 3, K("GradNorm", ["a"], ["y"]), [i64("a", [1, 2])])
kcase("r7k_clipcoef_neg", 6, K("ClipCoef", ["n"], ["y"], max_norm=-1.0), [sc("n", 2.0)], expect="any")
kcase("r7k_clipcoef_vec", 3, K("ClipCoef", ["n"], ["y"], max_norm=1.0), [f32("n", 3)])
for kind in ("bogus", "", "mse ", "CROSS_ENTROPY"):
    kcase(f"r7k_loss_kind_{kind.strip() or 'empty'}{'_sp' if kind.endswith(' ') else ''}", 3,
          K("Loss", ["x", "t"], ["y"], kind=kind), [f32("x", 2, 3), f32("t", 2, 3)])
for nm, kw, t, exp in (("ls_nan", dict(label_smoothing=float("nan")), i64("t", [0, 1]), "err"),
                       ("ls_2", dict(label_smoothing=2.0), i64("t", [0, 1]), "err"),
                       ("ls_neg", dict(label_smoothing=-0.5), i64("t", [0, 1]), "err"),
                       ("ignore_min", dict(ignore_index=IMIN), i64("t", [IMIN, 1]), "any"),
                       ("target_oob", {}, i64("t", [3, 1]), "err"), ("target_neg", {}, i64("t", [-1, 1]), "err"),
                       ("target_imax", {}, i64("t", [IMAX, 0]), "err"),
                       ("reduction_x", dict(reduction="x"), i64("t", [0, 1]), "err"),
                       ("all_ignored_mean", dict(ignore_index=0), i64("t", [0, 0]), "any"),
                       ("target_float", {}, f32("t", 2), "err"), ("target_rank", {}, i64("t", [[0, 1]]), "err")):
    kcase(f"r7k_loss_ce_{nm}", 6, K("Loss", ["x", "t"], ["y"], kind="cross_entropy", **kw), [f32("x", 2, 3), t], expect=exp)
    kcase(f"r7k_lossgrad_ce_{nm}", 6, K("LossGrad", ["d", "x", "t"], ["y"], kind="cross_entropy", **kw),
          [sc("d", 1.0), f32("x", 2, 3), t], expect=exp)
for nm, kw, exp in (("beta_0", dict(beta=0.0), "any"), ("beta_neg", dict(beta=-1.0), "err"),
                    ("beta_nan", dict(beta=float("nan")), "err")):
    kcase(f"r7k_loss_smoothl1_{nm}", 6, K("Loss", ["x", "t"], ["y"], kind="smooth_l1", **kw), [f32("x", 2, 3), f32("t", 2, 3)], expect=exp)
kcase("r7k_loss_mse_shape", 3, K("Loss", ["x", "t"], ["y"], kind="mse"), [f32("x", 2, 3), f32("t", 3, 2)])
kcase("r7k_loss_weight_short", 3, K("Loss", ["x", "t", "w"], ["y"], kind="cross_entropy"), [f32("x", 2, 3), i64("t", [0, 1]), f32("w", 2)])
kcase("r7k_loss_huge", 2, K("Loss", ["x", "t"], ["y"], kind="mse"), [], inputs={"x": ("hdr", HUGE), "t": ("hdr", HUGE)},
      ins=[vi("x", None), vi("t", None)], expect="any")
kcase("r7k_loss_ce_huge", 2, K("Loss", ["x", "t"], ["y"], kind="cross_entropy"), [],
      inputs={"x": ("hdr", [2**40, 0]), "t": ("hdr", [2**40], "<i8")}, ins=[vi("x", None), vi("t", None, I64)], expect="any")
kcase("r7k_lossgrad_dloss_vec", 3, K("LossGrad", ["d", "x", "t"], ["y"], kind="mse"), [f32("d", 3), f32("x", 2, 3), f32("t", 2, 3)])
for ax in (2, -3, IMAX, IMIN):
    kcase(f"r7k_softmaxgrad_axis_{ax}", 3, K("SoftmaxGrad", ["d", "s"], ["y"], axis=ax), [f32("d", 2, 3), f32("s", 2, 3)])
kcase("r7k_softmaxgrad_log_2", 3, K("SoftmaxGrad", ["d", "s"], ["y"], axis=1, log=2), [f32("d", 2, 3), f32("s", 2, 3)])
kcase("r7k_softmaxgrad_shape", 3, K("SoftmaxGrad", ["d", "s"], ["y"], axis=1), [f32("d", 2, 3), f32("s", 3, 2)])
kcase("r7k_softmaxgrad_huge", 2, K("SoftmaxGrad", ["d", "s"], ["y"], axis=1), [], inputs={"d": ("hdr", HUGE), "s": ("hdr", HUGE)},
      ins=[vi("d", None), vi("s", None)], expect="any")
for nm, axes in (("dup", [1, 1]), ("neg_dup", [1, -1]), ("past", [2]), ("min", [IMIN])):
    kcase(f"r7k_reducegrad_{nm}", 3, K("ReduceGrad", ["d", "x"], ["y"], axes=axes, keepdims=1), [f32("d", 2, 1), f32("x", 2, 3)])
kcase("r7k_reducegrad_keepdims_mismatch", 3, K("ReduceGrad", ["d", "x"], ["y"], axes=[1], keepdims=1), [f32("d", 2, 5), f32("x", 2, 3)])
kcase("r7k_reducegrad_huge", 2, K("ReduceGrad", ["d", "x"], ["y"], axes=[1], keepdims=1, mean=1), [],
      inputs={"d": ("hdr", [0, 1, 4]), "x": ("hdr", HUGE)}, ins=[vi("d", None), vi("x", None)], expect="any")
kcase("r7k_sumto_bigger", 3, K("SumTo", ["d", "x"], ["y"]), [f32("d", 3), f32("x", 2, 3)])
kcase("r7k_sumto_incompatible", 3, K("SumTo", ["d", "x"], ["y"]), [f32("d", 2, 3), f32("x", 4)])
kcase("r7k_sumto_huge", 2, K("SumTo", ["d", "x"], ["y"]), [f32("x", 1, 4)], inputs={"d": ("hdr", HUGE)}, ins=[vi("d", None)], expect="any")
for opn in ("Bogus", "", "relu", "Softmax", "MatMul"):
    kcase(f"r7k_unarygrad_{opn or 'empty'}", 3, K("UnaryGrad", ["d", "x"], ["y"], op=opn), [f32("d", 2, 3), f32("x", 2, 3)],
          expect="any" if opn == "relu" else "err")
kcase("r7k_unarygrad_shape", 3, K("UnaryGrad", ["d", "x"], ["y"], op="Relu"), [f32("d", 2, 3), f32("x", 3)])
kcase("r7k_unarygrad_huge", 2, K("UnaryGrad", ["d", "x"], ["y"], op="Tanh"), [], inputs={"d": ("hdr", HUGE), "x": ("hdr", HUGE)},
      ins=[vi("d", None), vi("x", None)], expect="any")
for nm, idx, exp in (("oob", [0, 5], "err"), ("neg", [-1, 0], "any"), ("min", [IMIN, 0], "err"), ("max", [IMAX, 0], "err")):
    kcase(f"r7k_gathergrad_{nm}", 3, K("GatherGrad", ["d", "i", "x"], ["y"], axis=0), [f32("d", 2, 3), i64("i", idx), f32("x", 4, 3)], expect=exp)
for ax in (2, -3, IMIN):
    kcase(f"r7k_gathergrad_axis_{ax}", 3, K("GatherGrad", ["d", "i", "x"], ["y"], axis=ax), [f32("d", 2, 3), i64("i", [0, 1]), f32("x", 4, 3)])
kcase("r7k_gathergrad_huge", 2, K("GatherGrad", ["d", "i", "x"], ["y"], axis=1), [i64("i", [0])],
      inputs={"d": ("hdr", [0, 1, 4]), "x": ("hdr", HUGE)}, ins=[vi("d", None), vi("x", None)], expect="any")
for nm, s, e, st, exp in (("step0", 0, 4, 0, "err"), ("step_min", 3, 0, IMIN, "any"), ("ends_max", 0, IMAX, 1, "any"),
                          ("starts_min", IMIN, IMAX, 2**62, "any"), ("mismatch", 0, 1, 1, "err")):
    kcase(f"r7k_slicegrad_{nm}", 3, K("SliceGrad", ["d", "x", "s", "e", "a", "st"], ["y"]),
          [f32("d", 2), f32("x", 4), i64("s", [s]), i64("e", [e]), i64("a", [0]), i64("st", [st])], expect=exp)
kcase("r7k_slicegrad_axes_dup", 3, K("SliceGrad", ["d", "x", "s", "e", "a"], ["y"]),
      [f32("d", 2, 3), f32("x", 4, 3), i64("s", [0, 0]), i64("e", [2, 2]), i64("a", [0, 0])])
kcase("r7k_resizegrad_scales_huge", 1, K("ResizeGrad", ["d", "x", "", "sc"], ["y"], mode="nearest"),
      [f32("d", 1, 1, 2, 2), f32("x", 1, 1, 2, 2), sc("sc", [1, 1, 1e9, 1e9])])
kcase("r7k_resizegrad_mismatch", 3, K("ResizeGrad", ["d", "x", "", "", "sz"], ["y"], mode="linear"),
      [f32("d", 1, 1, 3, 3), f32("x", 1, 1, 2, 2), i64("sz", [1, 1, 4, 4])])
kcase("r7k_resizegrad_mode_bad", 3, K("ResizeGrad", ["d", "x", "", "", "sz"], ["y"], mode="lanczos"),
      [f32("d", 1, 1, 4, 4), f32("x", 1, 1, 2, 2), i64("sz", [1, 1, 4, 4])])
for nm, kw in (("kernel_huge", dict(kernel_shape=[2**40, 2**40], pads=[2**40] * 4)), ("stride0", dict(kernel_shape=[2, 2], strides=[0, 0])),
               ("kernel_neg", dict(kernel_shape=[-2, 2])), ("dilation_huge", dict(kernel_shape=[2, 2], dilations=[2**62, 1]))):
    kcase(f"r7k_maxpoolgrad_{nm}", 1, K("MaxPoolGrad", ["d", "x"], ["y"], **kw), [f32("d", 1, 1, 2, 2), f32("x", 1, 1, 4, 4)])
    kcase(f"r7k_avgpoolgrad_{nm}", 1, K("AveragePoolGrad", ["d", "x"], ["y"], **kw), [f32("d", 1, 1, 2, 2), f32("x", 1, 1, 4, 4)])
kcase("r7k_maxpoolgrad_dy_wrong", 3, K("MaxPoolGrad", ["d", "x"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), [f32("d", 1, 1, 3, 3), f32("x", 1, 1, 4, 4)])
kcase("r7k_maxpoolgrad_huge", 2, K("MaxPoolGrad", ["d", "x"], ["y"], kernel_shape=[1, 1]), [],
      inputs={"d": ("hdr", [0, 2**40, 4, 4]), "x": ("hdr", [0, 2**40, 4, 4])}, ins=[vi("d", None), vi("x", None)], expect="any")
for nm, kw in (("group0", dict(group=0)), ("group3", dict(group=3)), ("stride0", dict(strides=[0, 0])),
               ("pads_neg", dict(pads=[-5, -5, -5, -5])), ("dil_huge", dict(dilations=[2**40, 1]))):
    kcase(f"r7k_convgradx_{nm}", 3, K("ConvGradX", ["d", "w", "x"], ["y"], **kw), [f32("d", 1, 2, 3, 3), f32("w", 2, 2, 2, 2), f32("x", 1, 2, 4, 4)])
    kcase(f"r7k_convgradw_{nm}", 3, K("ConvGradW", ["x", "d", "w"], ["y"], **kw), [f32("x", 1, 2, 4, 4), f32("d", 1, 2, 3, 3), f32("w", 2, 2, 2, 2)])
kcase("r7k_convgradx_huge", 2, K("ConvGradX", ["d", "w", "x"], ["y"]), [f32("w", 2, 2, 1, 1)],
      inputs={"d": ("hdr", [2**40, 2, 0, 4]), "x": ("hdr", [2**40, 2, 0, 4])}, ins=[vi("d", None), vi("x", None)], expect="any")
BN = [f32("x", 2, 3, 4), sc("s", [1, 1, 1]), sc("b", [0, 0, 0]), sc("m", [0, 0, 0]), sc("v", [1, 1, 1])]
kcase("r7k_bntrain_control", 6, K("BatchNormTrain", ["x", "s", "b", "m", "v"], ["y", "nm", "nv"]), BN, expect="any")
kcase("r7k_bntrain_scale_short", 3, K("BatchNormTrain", ["x", "s", "b", "m", "v"], ["y", "nm", "nv"]), BN[:1] + [sc("s", [1, 1])] + BN[2:])
kcase("r7k_bntrain_momentum_nan", 6, K("BatchNormTrain", ["x", "s", "b", "m", "v"], ["y", "nm", "nv"], momentum=float("nan")), BN, expect="any")
kcase("r7k_bntrain_eps_neg", 6, K("BatchNormTrain", ["x", "s", "b", "m", "v"], ["y", "nm", "nv"], epsilon=-1.0), BN, expect="any")
kcase("r7k_bntrain_batch1_spatial1", 6, K("BatchNormTrain", ["x", "s", "b", "m", "v"], ["y", "nm", "nv"]), [f32("x", 1, 3)] + BN[1:], expect="any")
kcase("r7k_bntrain_huge", 2, K("BatchNormTrain", ["x", "s", "b", "m", "v"], ["y", "nm", "nv"]), BN[1:],
      inputs={"x": ("hdr", [2**40, 3, 0])}, ins=[vi("x", None)], expect="any")
kcase("r7k_bntrain_huge_batch0", 2, K("BatchNormTrain", ["x", "s", "b", "m", "v"], ["y", "nm", "nv"]), BN[1:],
      inputs={"x": ("hdr", [0, 3, 2**60])}, ins=[vi("x", None)], expect="any")
kcase("r7k_bngrad_huge", 2, K("BatchNormGrad", ["d", "x", "s"], ["dx", "ds", "db"]), [sc("s", [1, 1, 1])],
      inputs={"d": ("hdr", [2**40, 3, 0]), "x": ("hdr", [2**40, 3, 0])}, ins=[vi("d", None), vi("x", None)], expect="any")
kcase("r7k_bngrad_shape", 3, K("BatchNormGrad", ["d", "x", "s"], ["dx", "ds", "db"]), [f32("d", 2, 3, 4), f32("x", 2, 3, 5), sc("s", [1, 1, 1])])
for ax in (3, -4, IMIN):
    kcase(f"r7k_lngrad_axis_{ax}", 3, K("LayerNormGrad", ["d", "x", "s"], ["dx", "ds", "db"], axis=ax), [f32("d", 2, 3, 4), f32("x", 2, 3, 4), f32("s", 4)])
kcase("r7k_lngrad_scale_wrong", 3, K("LayerNormGrad", ["d", "x", "s"], ["dx", "ds", "db"], axis=-1), [f32("d", 2, 3, 4), f32("x", 2, 3, 4), f32("s", 3)])
kcase("r7k_lngrad_huge", 2, K("LayerNormGrad", ["d", "x", "s"], ["dx", "ds", "db"], axis=-1), [f32("s", 4)],
      inputs={"d": ("hdr", [2**40, 0, 4]), "x": ("hdr", [2**40, 0, 4])}, ins=[vi("d", None), vi("x", None)], expect="any")
for nm, r, exp in (("ratio_1", 1.0, "any"), ("ratio_nan", float("nan"), "err"), ("ratio_neg", -0.5, "err"), ("ratio_2", 2.0, "err")):
    kcase(f"r7k_dropouttrain_{nm}", 6, K("DropoutTrain", ["x", "r", "sd"], ["y", "mk"]), [f32("x", 2, 3), sc("r", r), i64("sd", 3)], expect=exp)
    kcase(f"r7k_dropoutgrad_{nm}", 6, K("DropoutGrad", ["d", "mk", "r"], ["y"]),
          [f32("d", 2, 3), init("mk", np.ones([2, 3], bool)), sc("r", r)], expect=exp)
kcase("r7k_dropoutgrad_mask_shape", 3, K("DropoutGrad", ["d", "mk"], ["y"]), [f32("d", 2, 3), init("mk", np.ones([3, 2], bool))])
kcase("r7k_dropoutgrad_mask_float", 3, K("DropoutGrad", ["d", "mk"], ["y"]), [f32("d", 2, 3), f32("mk", 2, 3)])
kcase("r7k_dropouttrain_seed_float", 3, K("DropoutTrain", ["x", "r", "sd"], ["y", "mk"]), [f32("x", 2, 3), sc("r", 0.5), sc("sd", 3.0)])
kcase("r7k_dropouttrain_huge", 2, K("DropoutTrain", ["x", "r", "sd"], ["y", "mk"]), [sc("r", 0.5), i64("sd", 1)],
      inputs={"x": ("hdr", HUGE)}, ins=[vi("x", None)], expect="any")


def rnn_grad(op, **kw):
    H, I = 2, 3
    g = 3 if op == "GRUGrad" else 4
    its = [init("X", rng.standard_normal([2, 1, I]).astype(np.float32)),
           init("W", rng.standard_normal([1, g * H, I]).astype(np.float32)),
           init("R", rng.standard_normal([1, g * H, H]).astype(np.float32))]
    nouts = 5 if op == "GRUGrad" else 6
    outs = ["dx", "dw", "dr", "db", "dh", "dc"][:nouts]
    ins = kw.pop("ins", ["X", "W", "R"])
    its += kw.pop("its", [])
    return outs, ins, its, kw


for op in ("GRUGrad", "LSTMGrad"):
    for nm, kw, exp in (("control", dict(hidden_size=2), "any"), ("hidden_0", dict(hidden_size=0), "err"),
                        ("hidden_max", dict(hidden_size=IMAX), "err"), ("clip", dict(hidden_size=2, clip=1.0), "err"),
                        ("acts_affine", dict(hidden_size=2, activations=["Affine"] * (2 if op == "GRUGrad" else 3)), "err"),
                        ("layout_1", dict(hidden_size=2, layout=1), "err"), ("direction_x", dict(hidden_size=2, direction="x"), "err"),
                        ("seq_lens_big", dict(hidden_size=2, ins=["X", "W", "R", "", "sl"], its=[init("sl", np.array([9], np.int32))]), "err")):
        outs, ins, its, kw = rnn_grad(op, **kw)
        kcase(f"r7k_{op.lower()}_{nm}", 3, K(op, ins, outs, **kw), its, expect=exp)
outs, ins, its, kw = rnn_grad("LSTMGrad", hidden_size=2, ins=["X", "W", "R", "", "", "", "", "p"], its=[f32("p", 1, 6)])
kcase("r7k_lstmgrad_with_p", 3, K("LSTMGrad", ins, outs, **kw), its)
Q8 = [init("a", np.array([1, 2], np.uint8)), sc("as", 0.5), init("az", np.uint8(0)),
      init("b", np.array([3, 4], np.uint8)), sc("bs", 0.5), init("bz", np.uint8(0)), sc("ys", 0.1), init("yz", np.uint8(0))]
QI = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
kcase("r7k_qlinearmul_control", 6, K("QLinearMul", QI, ["y"]), Q8, outs=[vi("y", None, U8)], expect="any")
kcase("r7k_qlinearmul_scale_0", 6, K("QLinearMul", QI, ["y"]), Q8[:6] + [sc("ys", 0.0)] + Q8[7:], outs=[vi("y", None, U8)], expect="any")
kcase("r7k_qlinearmul_scale_nan", 6, K("QLinearMul", QI, ["y"]), Q8[:1] + [sc("as", np.nan)] + Q8[2:], outs=[vi("y", None, U8)], expect="any")
kcase("r7k_qlinearmul_zp_int8", 3, K("QLinearMul", QI, ["y"]), Q8[:2] + [init("az", np.int8(0))] + Q8[3:], outs=[vi("y", None, U8)])
kcase("r7k_qlinearmul_scale_vec", 3, K("QLinearMul", QI, ["y"]), Q8[:1] + [sc("as", [0.5, 0.5, 0.5])] + Q8[2:], outs=[vi("y", None, U8)])
kcase("r7k_qlinearmul_huge", 2, K("QLinearMul", QI, ["y"]), Q8[1:3] + Q8[4:], outs=[vi("y", None, U8)],
      inputs={"a": ("hdr", HUGE, "|u1"), "b": ("hdr", [1, 1, 4], "|u1")}, ins=[vi("a", None, U8), vi("b", None, U8)], expect="any")

# ---- 5. .npz archives with data descriptors, and CRCs that lie (classes 6, 8) ----
class Stream(io.RawIOBase):
    """A stream zipfile cannot seek in: it writes each entry's sizes and CRC-32 in a data
    descriptor after the data (general-purpose flag bit 3)."""

    def __init__(self, f):
        self.f = f

    def writable(self):
        return True

    def write(self, b):
        return self.f.write(b)


def dd_npz(arrays, method=zipfile.ZIP_STORED):
    out = io.BytesIO()
    with zipfile.ZipFile(Stream(out), "w", compression=method) as z:
        for k, a in arrays.items():
            with z.open(k + ".npy", "w") as f:
                np.save(f, a)
    return bytearray(out.getvalue())


def npz_plain(arrays, method=zipfile.ZIP_STORED):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as z:
        for k, a in arrays.items():
            b = io.BytesIO()
            np.save(b, a)
            z.writestr(k + ".npy", b.getvalue())
    return bytearray(out.getvalue())


trn = model([N("MatMul", ["x", "w"], ["y"])], [vi("x", ["b", 4])], [vi("y", ["b", 3])], [sc("w", rng.random([4, 3]))])
with open(os.path.join(OUT, "r7_train.onnx"), "wb") as f:
    f.write(trn.SerializeToString())
T = "train r7_train.onnx --epochs 1 --loss mse --no-shuffle -o r7_trained.onnx --data"
D = {"x": np.arange(64, dtype=np.float32).reshape(16, 4) / 64, "target": np.zeros([16, 3], np.float32)}


def tcase(nm, data, cls, exp="err", more=""):
    with open(os.path.join(OUT, f"r7_{nm}.npz"), "wb") as f:
        f.write(bytes(data))
    rows.append((f"r7z_train_{nm}", cls, exp, f"{T} r7_{nm}.npz {more}".strip()))


def find_all(b, sig):
    out, i = [], b.find(sig)
    while i >= 0:
        out.append(i)
        i = b.find(sig, i + 1)
    return out


def data_start(b, lh):
    return lh + 30 + sum(struct.unpack_from("<HH", b, lh + 26))


def mut(b, fn):
    b = bytearray(b)
    fn(b)
    return b


dd = dd_npz(D)
ddd = dd_npz(D, zipfile.ZIP_DEFLATED)
desc, cds = find_all(dd, b"PK\x07\x08"), find_all(dd, b"PK\x01\x02")
tcase("dd_stored", dd, 6, "ok")
tcase("dd_deflated", ddd, 6, "ok")
tcase("dd_desc_sizes_lie", mut(dd, lambda b: struct.pack_into("<II", b, desc[0] + 8, 1, 1)), 6, "any")
tcase("dd_desc_crc_lies", mut(dd, lambda b: struct.pack_into("<I", b, desc[0] + 4, 0xDEADBEEF)), 6, "any")
tcase("dd_desc_sig_gone", mut(dd, lambda b: b.__setitem__(slice(desc[0], desc[0] + 4), b"XXXX")), 6, "any")
tcase("dd_cd_flag_cleared", mut(dd, lambda b: struct.pack_into("<H", b, cds[0] + 8, struct.unpack_from("<H", b, cds[0] + 8)[0] & ~8)), 6, "any")
tcase("dd_local_flag_cleared", mut(dd, lambda b: struct.pack_into("<H", b, 6, struct.unpack_from("<H", b, 6)[0] & ~8)), 6)
tcase("dd_cd_crc_wrong", mut(dd, lambda b: struct.pack_into("<I", b, cds[0] + 16, 0x12345678)), 6)
tcase("dd_data_flipped", mut(dd, lambda b: b.__setitem__(data_start(b, 0) + 200, b[data_start(b, 0) + 200] ^ 0x40)), 6)
tcase("dd_deflated_cd_crc_wrong", mut(ddd, lambda b: struct.pack_into("<I", b, find_all(b, b"PK\x01\x02")[0] + 16, 0)), 6)
tcase("dd_cd_size_short", mut(dd, lambda b: struct.pack_into("<II", b, cds[0] + 20, 100, 100)), 8)
tcase("dd_cd_size_long", mut(dd, lambda b: struct.pack_into("<II", b, cds[0] + 20, 400, 400)), 8)
tcase("dd_local_sizes_nonzero_lie", mut(dd, lambda b: struct.pack_into("<II", b, 18, 7, 7)), 8, "any")
tcase("dd_cut_in_descriptor", dd[:desc[0] + 6] + dd[desc[0] + 16:], 8)
pl = npz_plain(D)
pcd = find_all(pl, b"PK\x01\x02")
tcase("plain_data_flipped", mut(pl, lambda b: b.__setitem__(data_start(b, 0) + 200, b[data_start(b, 0) + 200] ^ 0x40)), 6)
tcase("plain_both_crcs_wrong", mut(pl, lambda b: (struct.pack_into("<I", b, 14, 7), struct.pack_into("<I", b, pcd[0] + 16, 7))), 6)
tcase("plain_header_flipped", mut(pl, lambda b: b.__setitem__(data_start(b, 0) + 20, ord("x"))), 6)
pd = npz_plain(D, zipfile.ZIP_DEFLATED)
tcase("deflated_both_crcs_wrong", mut(pd, lambda b: (struct.pack_into("<I", b, 14, 7),
                                                     struct.pack_into("<I", b, find_all(b, b"PK\x01\x02")[0] + 16, 7))), 6)
tcase("plain_eval_flipped", pl, 6, "err", "--eval r7_plain_data_flipped.npz")
# the same for quantize --calibrate (a .npz of one array)
cal = npz_plain({"x": np.ones([4, 4], np.float32)})
cal_bad = mut(cal, lambda b: b.__setitem__(data_start(b, 0) + 100, b[data_start(b, 0) + 100] ^ 1))
for nm, data in (("cal_dd", dd_npz({"x": np.ones([4, 4], np.float32)})), ("cal_flipped", cal_bad)):
    with open(os.path.join(OUT, f"r7_{nm}.npz"), "wb") as f:
        f.write(bytes(data))
q = model([N("MatMul", ["x", "w"], ["y"])], [vi("x", ["b", 4])], [vi("y", ["b", 3])], [sc("w", rng.random([4, 3]))])
with open(os.path.join(OUT, "r7_q.onnx"), "wb") as f:
    f.write(q.SerializeToString())
rows.append(("r7z_quantize_cal_dd", 6, "ok", "quantize r7_q.onnx -o r7_q8.onnx --calibrate r7_cal_dd.npz"))
rows.append(("r7z_quantize_cal_flipped", 6, "err", "quantize r7_q.onnx -o r7_q8.onnx --calibrate r7_cal_flipped.npz"))

# a TorchScript archive whose storage does not match its CRC-32
import torch  # noqa: E402
import warnings  # noqa: E402
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ts = torch.jit.trace(lin_module(), (torch.ones(2, 3),))
buf = io.BytesIO()
torch.jit.save(ts, buf)
pt = bytearray(buf.getvalue())
np.save(os.path.join(OUT, "r7_x23.npy"), np.ones([2, 3], np.float32))
zf = zipfile.ZipFile(io.BytesIO(bytes(pt)))
for info in zf.infolist():
    if info.filename.endswith("/data/0") or info.filename.endswith("/data.pkl") or info.filename.endswith("constants.pkl"):
        nm = info.filename.rsplit("/", 1)[1].replace(".", "_")
        b = bytearray(pt)
        b[data_start(b, info.header_offset) + 1] ^= 0x04
        with open(os.path.join(OUT, f"r7_pt_flip_{nm}.pt"), "wb") as f:
            f.write(bytes(b))
        rows.append((f"r7z_pt_flip_{nm}", 6, "err", f"run r7_pt_flip_{nm}.pt --input x=r7_x23.npy"))
        b2 = bytearray(pt)
        cd = [c for c in find_all(b2, b"PK\x01\x02") if b2[c + 46:c + 46 + len(info.filename)] == info.filename.encode()][0]
        struct.pack_into("<I", b2, cd + 16, struct.unpack_from("<I", b2, cd + 16)[0] ^ 1)
        with open(os.path.join(OUT, f"r7_pt_crc_{nm}.pt"), "wb") as f:
            f.write(bytes(b2))
        rows.append((f"r7z_pt_crc_{nm}", 6, "err", f"run r7_pt_crc_{nm}.pt --input x=r7_x23.npy"))
with open(os.path.join(OUT, "r7_pt_ok.pt"), "wb") as f:
    f.write(bytes(pt))
rows.append(("r7z_pt_control", 6, "ok", "run r7_pt_ok.pt --input x=r7_x23.npy"))

# ---- 6. kiln train options and paths (classes 5, 7, 11) ----
with open(os.path.join(OUT, "r7_good.npz"), "wb") as f:
    f.write(bytes(npz_plain(D)))
G = "train r7_train.onnx --loss mse --data r7_good.npz"
os.makedirs(os.path.join(OUT, "r7_dir"), exist_ok=True)
# never a link to a system file: a kiln that writes through links would overwrite it (the
# first run of this probe had r7_link_passwd -> /etc/passwd, which `--log` replaced as
# root; restored from /etc/passwd-). The victim is the probe's own file.
os.makedirs(os.path.join(OUT, "r7_victim_dir"), exist_ok=True)
with open(os.path.join(OUT, "r7_victim_dir", "victim.txt"), "w") as f:
    f.write("victim\n")
VICTIM = os.path.abspath(os.path.join(OUT, "r7_victim_dir", "victim.txt"))
for p, t in (("r7_link_victim", VICTIM), ("r7_link_dangling", "/nonexistent/x"), ("r7_link_self", "r7_link_self")):
    if not os.path.lexists(os.path.join(OUT, p)):
        os.symlink(t, os.path.join(OUT, p))
if not os.path.exists(os.path.join(OUT, "r7_fifo")):
    os.mkfifo(os.path.join(OUT, "r7_fifo"))
os.makedirs(os.path.join(OUT, "r7_ck_link"), exist_ok=True)
if not os.path.lexists(os.path.join(OUT, "r7_ck_link", "state.bin")):
    os.symlink(VICTIM, os.path.join(OUT, "r7_ck_link", "checkpoint.json"))
TRAIN_OPTS = [
    ("frozen_unknown", 11, "err", "--steps 1 --frozen nosuchweight"),
    ("frozen_all", 11, "any", "--steps 1 --frozen w"),
    ("frozen_empty", 11, "any", "--steps 1 --frozen ''"),
    ("frozen_commas", 11, "any", "--steps 1 --frozen ,,,"),
    ("no_decay_glob_star", 11, "any", "--steps 1 --no-decay '*' --weight-decay 0.1"),
    ("no_decay_unknown", 11, "any", "--steps 1 --no-decay 'zzz*'"),
    ("betas_one", 11, "usage", "--steps 1 --optimizer adam --betas 0.9"),
    ("betas_three", 11, "usage", "--steps 1 --optimizer adam --betas 0.9,0.9,0.9"),
    ("betas_1", 11, "err", "--steps 1 --optimizer adam --betas 1,1"),
    ("betas_nan", 11, "err", "--steps 1 --optimizer adam --betas nan,0.9"),
    ("eps_neg", 11, "err", "--steps 1 --optimizer adam --eps -1"),
    ("momentum_neg", 11, "err", "--steps 1 --momentum -1"),
    ("nesterov_no_momentum", 11, "err", "--steps 1 --nesterov"),
    ("label_smoothing_2", 11, "err", "--steps 1 --loss cross_entropy --label-smoothing 2"),
    ("ignore_index_huge", 11, "any", "--steps 1 --ignore-index 99999999999999999999"),
    ("schedule_step0", 11, "err", "--steps 3 --schedule step:0:0.5"),
    ("schedule_step_neg", 11, "err", "--steps 3 --schedule step:-1:0.5"),
    ("schedule_cosine0", 11, "any", "--steps 3 --schedule cosine:0"),
    ("schedule_warmup0", 11, "err", "--steps 3 --schedule warmup:0"),
    ("schedule_warmup_huge", 11, "any", "--steps 3 --schedule warmup:9223372036854775807"),
    ("schedule_trailing", 11, "err", "--steps 3 --schedule step:2:0.5:junk"),
    ("clip_norm_neg", 11, "err", "--steps 1 --clip-norm -1"),
    ("clip_norm_nan", 11, "err", "--steps 1 --clip-norm nan"),
    ("batch_huge_steps", 11, "any", "--steps 3 --batch 9223372036854775807"),
    ("seed_neg", 11, "any", "--steps 1 --seed -1"),
    ("seed_huge", 11, "usage", "--steps 1 --seed 99999999999999999999"),
    ("log_link_victim", 5, "err", "--steps 1 --log r7_link_victim"),
    ("curve_link_victim", 5, "err", "--steps 1 --curve r7_link_victim"),
    ("log_dir", 5, "err", "--steps 1 --log r7_dir"),
    ("log_fifo", 1, "err", "--steps 1 --log r7_fifo"),
    ("curve_fifo", 1, "err", "--steps 1 --curve r7_fifo"),
    ("curve_dangling", 5, "any", "--steps 1 --curve r7_link_dangling"),
    ("curve_self_link", 5, "any", "--steps 1 --curve r7_link_self"),
    ("out_dir", 5, "err", "--steps 1 -o r7_dir"),
    ("out_model_itself", 5, "any", "--steps 1 -o r7_train.onnx"),
    ("out_proc", 5, "err", "--steps 1 -o /proc/self/mem"),
    ("checkpoint_file", 5, "err", "--epochs 1 --checkpoint r7_train.onnx"),
    ("checkpoint_fifo", 1, "err", "--epochs 1 --checkpoint r7_fifo"),
    ("resume_empty_dir", 8, "err", "--steps 1 --resume r7_dir"),
    ("resume_fifo", 1, "err", "--steps 1 --resume r7_fifo"),
    ("resume_proc", 5, "err", "--steps 1 --resume /proc/self"),
    ("resume_link_dir", 5, "err", "--steps 1 --resume r7_ck_link"),
    ("checkpoint_over_link", 5, "any", "--epochs 1 --checkpoint r7_ck_link"),
    ("eval_fifo", 1, "err", "--steps 1 --eval r7_fifo"),
    ("eval_dev_zero", 1, "err", "--steps 1 --eval /dev/zero"),
    ("data_twice", 11, "any", "--steps 1 --data r7_good.npz"),
    ("steps_and_epochs", 11, "usage", "--steps 1 --epochs 1"),
    ("max_tensor_bytes_1", 4, "err", "--steps 1 --max-tensor-bytes 1"),
    ("max_work_1", 4, "any", "--steps 1 --max-work 1"),
    ("memory_limit_1", 4, "err", "--steps 1 --memory-limit 1"),
    ("threads_huge", 11, "usage", "--steps 1 --threads 4294967297"),
    ("bf16_lars_nan_lr", 11, "err", "--steps 1 --bf16 --optimizer lars --lr nan"),
]
for nm, cls, exp, a in TRAIN_OPTS:
    rows.append((f"r7t_train_{nm}", cls, exp, f"{G} {a}"))
rows.append(("r7t_inspect_dot_link_victim", 5, "err", "inspect r7_train.onnx --dot r7_link_victim"))
rows.append(("r7t_quantize_csv_link_victim", 5, "err", "quantize r7_q.onnx -o r7_q8b.onnx --calibrate r7_cal_dd.npz --report-csv r7_link_victim"))
rows.append(("r7t_inspect_dot_fifo", 1, "err", "inspect r7_train.onnx --dot r7_fifo"))
rows.append(("r7t_quantize_csv_fifo", 1, "err", "quantize r7_q.onnx -o r7_q8c.onnx --calibrate r7_cal_dd.npz --report-csv r7_fifo"))
rows.append(("r7t_train_log_dev_null", 11, "ok", f"{G} --steps 1 --log /dev/null"))
rows.append(("r7t_train_log_proc_fd1", 11, "ok", f"{G} --steps 1 --log /proc/self/fd/1"))

with open(os.path.join(OUT, "probe.tsv"), "w") as f:
    for r in rows:
        f.write("\t".join(str(c) for c in r) + "\n")
print(len(rows), "cases")
