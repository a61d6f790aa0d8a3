"""Control-flow fixtures: ONNX models with If, Loop and Scan that exercise what a
single-op node test does not (bodies reading values two graphs up, branches of
different shapes, loops whose carried values grow, scans along other axes in reverse,
zero-trip loops, convolutions inside a loop body), each with data sets whose outputs
onnxruntime computed.

    .venv/bin/python tests/models/make_control_fixtures.py   # writes tests/models/control/
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "control")
rng = np.random.default_rng(7)


def vi(name, dtype, shape):
    return h.make_tensor_value_info(name, dtype, shape)


def init(name, array):
    return nh.from_array(np.asarray(array), name)


def scalar(name, dtype, value):
    return h.make_node("Constant", [], [name], value=h.make_tensor(name + "_v", dtype, [], [value]))


def save(name, graph, feeds_list):
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model) if os.environ.get("KILN_CHECK_FIXTURES") else None
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for k, feeds in enumerate(feeds_list):
        ds = os.path.join(folder, "test_data_set_%d" % k)
        os.makedirs(ds, exist_ok=True)
        for i, (iname, x) in enumerate(feeds.items()):
            onnx.save_tensor(nh.from_array(x, iname), os.path.join(ds, "input_%d.pb" % i))
        outs = sess.run(None, feeds)
        for i, (o, y) in enumerate(zip(sess.get_outputs(), outs)):
            onnx.save_tensor(nh.from_array(y, o.name), os.path.join(ds, "output_%d.pb" % i))
        print(name, k, [tuple(y.shape) for y in outs])


def if_shapes():
    """cond from the data; the branches give different shapes; else_branch holds an If
    whose then_branch reads x and w, two graphs up, and an initializer of the model."""
    inner_then = h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["it_mm"]), h.make_node("Add", ["it_mm", "bias"], ["it_out"])],
        "inner_then", [], [vi("it_out", TP.FLOAT, None)])
    inner_else = h.make_graph(
        [h.make_node("Neg", ["xs"], ["ie_out"])], "inner_else", [], [vi("ie_out", TP.FLOAT, None)])
    then_b = h.make_graph(
        [h.make_node("Mul", ["x", "x"], ["t_sq"]), h.make_node("ReduceSum", ["t_sq"], ["t_out"], keepdims=1)],
        "then", [], [vi("t_out", TP.FLOAT, None)])
    else_b = h.make_graph(
        [h.make_node("ReduceMax", ["x"], ["e_max"], keepdims=0),
         h.make_node("Greater", ["e_max", "zero"], ["e_pos"]),
         h.make_node("If", ["e_pos"], ["e_out"], then_branch=inner_then, else_branch=inner_else)],
        "else", [], [vi("e_out", TP.FLOAT, None)])
    nodes = [
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "limit"], ["cond"]),
        h.make_node("Mul", ["x", "two"], ["xs"]),
        h.make_node("If", ["cond"], ["y"], then_branch=then_b, else_branch=else_b),
        h.make_node("Shape", ["y"], ["y_shape"]),
    ]
    g = h.make_graph(nodes, "if_shapes", [vi("x", TP.FLOAT, [3, 4])],
                     [vi("y", TP.FLOAT, None), vi("y_shape", TP.INT64, None)],
                     [init("w", rng.standard_normal((4, 5)).astype(np.float32)),
                      init("bias", rng.standard_normal(5).astype(np.float32)),
                      init("limit", np.float32(6.0)), init("zero", np.float32(0.0)),
                      init("two", np.float32(2.0))])
    x = rng.standard_normal((3, 4)).astype(np.float32)
    save("if_shapes", g, [{"x": np.abs(x) + 1.0}, {"x": x * 0.1 + 0.05}, {"x": -np.abs(x) - 0.1}])


def loop_grow():
    """A while loop (M and a cond the body computes) whose carried value grows by one
    row an iteration, with a scan output, a capture of an intermediate value and of an
    initializer, and an If in the body."""
    b_then = h.make_graph([h.make_node("Relu", ["row"], ["b_r"])], "bt", [], [vi("b_r", TP.FLOAT, None)])
    b_else = h.make_graph([h.make_node("Sigmoid", ["row"], ["b_s"])], "be", [], [vi("b_s", TP.FLOAT, None)])
    body = h.make_graph(
        [
            h.make_node("MatMul", ["last", "w"], ["mm"]),
            h.make_node("Add", ["mm", "shift"], ["row"]),
            h.make_node("Mod", ["i", "two_i"], ["parity"]),
            h.make_node("Equal", ["parity", "zero_i"], ["even"]),
            h.make_node("If", ["even"], ["act"], then_branch=b_then, else_branch=b_else),
            h.make_node("Concat", ["acc", "act"], ["acc_out"], axis=0),
            h.make_node("Gather", ["acc_out", "minus_one"], ["last_row"], axis=0),
            h.make_node("Unsqueeze", ["last_row", "axes0"], ["last_out"]),
            h.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            h.make_node("Less", ["total", "stop_at"], ["cond_out"]),
            h.make_node("ReduceMean", ["act"], ["mean_out"], keepdims=0),
        ],
        "body",
        # acc declared with its first iteration's shape, as torch.onnx declares a list that
        # grows (maskrcnn's pasted masks): the declaration must not hold it to one row
        [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("acc", TP.FLOAT, [1, 6]),
         vi("last", TP.FLOAT, None)],
        [vi("cond_out", TP.BOOL, []), vi("acc_out", TP.FLOAT, None), vi("last_out", TP.FLOAT, None),
         vi("mean_out", TP.FLOAT, None)],
        [init("two_i", np.int64(2)), init("zero_i", np.int64(0)), init("minus_one", np.int64(-1)),
         init("axes0", np.array([0], np.int64))])
    nodes = [
        h.make_node("Mul", ["x", "half"], ["shift"]),
        h.make_node("Constant", [], ["true"], value=h.make_tensor("t", TP.BOOL, [], [True])),
        h.make_node("Loop", ["M", "true", "x", "x"], ["acc_final", "last_final", "means"], body=body),
    ]
    g = h.make_graph(nodes, "loop_grow", [vi("x", TP.FLOAT, [1, 6]), vi("M", TP.INT64, [])],
                     [vi("acc_final", TP.FLOAT, None), vi("last_final", TP.FLOAT, None),
                      vi("means", TP.FLOAT, None)],
                     [init("w", (rng.standard_normal((6, 6)) * 0.5).astype(np.float32)),
                      init("half", np.float32(0.5)), init("stop_at", np.float32(40.0))])
    x = rng.standard_normal((1, 6)).astype(np.float32)
    save("loop_grow", g, [{"x": x, "M": np.array(7, np.int64)}, {"x": np.abs(x) + 2.0, "M": np.array(9, np.int64)},
                          {"x": x, "M": np.array(0, np.int64)}])


def scan_axes():
    """Two states and two scanned inputs, one along axis 1 in reverse; scan outputs
    along axis 1 (one reversed) and axis -1; the body reads an outer value."""
    body = h.make_graph(
        [
            h.make_node("Add", ["s0", "a"], ["s0_out"]),
            h.make_node("Mul", ["b", "scale"], ["bs"]),
            h.make_node("Add", ["s1", "bs"], ["s1_out"]),
            h.make_node("Mul", ["s0_out", "s1_out"], ["prod"]),
            h.make_node("Identity", ["s0_out"], ["y0"]),
        ],
        "body",
        [vi("s0", TP.FLOAT, [3]), vi("s1", TP.FLOAT, [3]), vi("a", TP.FLOAT, [3]), vi("b", TP.FLOAT, [3])],
        [vi("s0_out", TP.FLOAT, [3]), vi("s1_out", TP.FLOAT, [3]), vi("prod", TP.FLOAT, [3]),
         vi("y0", TP.FLOAT, [3])])
    nodes = [
        h.make_node("Exp", ["k"], ["scale"]),
        h.make_node("Scan", ["init0", "init1", "A", "B"], ["f0", "f1", "P", "Y"], body=body,
                    num_scan_inputs=2, scan_input_axes=[0, 1], scan_input_directions=[0, 1],
                    scan_output_axes=[1, -1], scan_output_directions=[1, 0]),
    ]
    g = h.make_graph(nodes, "scan_axes",
                     [vi("init0", TP.FLOAT, [3]), vi("init1", TP.FLOAT, [3]), vi("A", TP.FLOAT, [5, 3]),
                      vi("B", TP.FLOAT, [3, 5]), vi("k", TP.FLOAT, [3])],
                     [vi("f0", TP.FLOAT, [3]), vi("f1", TP.FLOAT, [3]), vi("P", TP.FLOAT, None),
                      vi("Y", TP.FLOAT, None)])
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    save("scan_axes", g, [{"init0": f(3), "init1": f(3), "A": f(5, 3), "B": f(3, 5), "k": f(3)}])


def loop_conv():
    """Conv + BatchNormalization + Relu in a Loop body (fused there at -O2 and -O3), on
    weights of the enclosing graph, for a trip count from the input."""
    c = 8
    body = h.make_graph(
        [
            h.make_node("Conv", ["feat", "cw", "cb"], ["cv"], pads=[1, 1, 1, 1]),
            h.make_node("BatchNormalization", ["cv", "g", "bb", "mu", "var"], ["bn"], epsilon=1e-5),
            h.make_node("Relu", ["bn"], ["r"]),
            h.make_node("Add", ["r", "feat"], ["feat_out"]),
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("feat", TP.FLOAT, [1, c, 9, 7])],
        [vi("cond_out", TP.BOOL, []), vi("feat_out", TP.FLOAT, [1, c, 9, 7])])
    nodes = [h.make_node("Loop", ["M", "", "x"], ["y"], body=body)]
    g = h.make_graph(nodes, "loop_conv", [vi("x", TP.FLOAT, [1, c, 9, 7]), vi("M", TP.INT64, [])],
                     [vi("y", TP.FLOAT, [1, c, 9, 7])],
                     [init("cw", (rng.standard_normal((c, c, 3, 3)) * 0.2).astype(np.float32)),
                      init("cb", rng.standard_normal(c).astype(np.float32) * 0.1),
                      init("g", (rng.random(c) + 0.5).astype(np.float32)),
                      init("bb", rng.standard_normal(c).astype(np.float32) * 0.1),
                      init("mu", rng.standard_normal(c).astype(np.float32) * 0.1),
                      init("var", (rng.random(c) + 0.5).astype(np.float32))])
    x = rng.standard_normal((1, c, 9, 7)).astype(np.float32)
    save("loop_conv", g, [{"x": x, "M": np.array(3, np.int64)}, {"x": x, "M": np.array(0, np.int64)}])


def if_static():
    """An If on a condition constant folding settles (the batch size of a static input is
    1): from -O1 on the branch it takes replaces it (pass inline_if), and the Conv and
    Relu of that branch fuse with the graph around them."""
    then_b = h.make_graph(
        [h.make_node("Conv", ["x", "cw"], ["t_conv"], pads=[1, 1, 1, 1]),
         h.make_node("Relu", ["t_conv"], ["t_out"])],
        "then", [], [vi("t_out", TP.FLOAT, None)])
    else_b = h.make_graph([h.make_node("Sigmoid", ["x"], ["e_out"])], "else", [],
                          [vi("e_out", TP.FLOAT, None)])
    nodes = [
        h.make_node("Shape", ["x"], ["shape"]),
        h.make_node("Gather", ["shape", "zero_i"], ["batch"], axis=0),
        h.make_node("Equal", ["batch", "one_i"], ["single"]),
        h.make_node("If", ["single"], ["y"], then_branch=then_b, else_branch=else_b),
        h.make_node("ReduceMean", ["y"], ["z"], axes=[2, 3], keepdims=0),
    ]
    g = h.make_graph(nodes, "if_static", [vi("x", TP.FLOAT, [1, 3, 8, 8])], [vi("z", TP.FLOAT, None)],
                     [init("cw", (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)),
                      init("zero_i", np.int64(0)), init("one_i", np.int64(1))])
    save("if_static", g, [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}])


def gpt_greedy():
    """Greedy decoding with a GPT-2 (two blocks of GPT-2's architecture: learned
    positions, pre-LayerNorm causal self-attention with one QKV projection, a tanh-GELU
    MLP, the LM head tied to the token embedding; random weights of std 0.3 so that the
    tokens vary) as a Loop, exported by torch.onnx (TorchScript) from a scripted loop
    whose carried token ids grow by one an iteration. The tokens must be PyTorch's."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.ln1, s.attn, s.proj = nn.LayerNorm(64), nn.Linear(64, 192), nn.Linear(64, 64)
            s.ln2, s.fc, s.out = nn.LayerNorm(64), nn.Linear(64, 256), nn.Linear(256, 64)

        def forward(s, x):
            t = x.shape[1]
            q, k, v = s.attn(s.ln1(x)).split(64, dim=2)
            q = q.view(1, t, 4, 16).transpose(1, 2)
            k = k.view(1, t, 4, 16).transpose(1, 2)
            v = v.view(1, t, 4, 16).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / 4.0
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            x = x + s.proj((att @ v).transpose(1, 2).reshape(1, t, 64))
            return x + s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(s):
            super().__init__()
            s.wte, s.wpe = nn.Embedding(512, 64), nn.Embedding(64, 64)
            s.blocks = nn.ModuleList([Block() for _ in range(2)])
            s.ln = nn.LayerNorm(64)

        def forward(s, ids):
            x = s.wte(ids) + s.wpe(torch.arange(ids.shape[1]).unsqueeze(0))
            for b in s.blocks:
                x = b(x)
            return s.ln(x) @ s.wte.weight.t()

    class Greedy(nn.Module):
        def __init__(s):
            super().__init__()
            s.gpt = GPT()

        def forward(s, ids, steps: torch.Tensor):
            for _ in range(int(steps)):
                nxt = torch.argmax(s.gpt(ids)[:, -1, :], dim=-1, keepdim=True)
                ids = torch.cat([ids, nxt], dim=1)
            return ids

    g = Greedy().eval()
    with torch.no_grad():
        for p in g.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    scripted = torch.jit.script(g)
    folder = os.path.join(OUT, "gpt_greedy")
    os.makedirs(folder, exist_ok=True)
    ids = torch.tensor([[3, 77, 200, 5, 411]])
    steps = torch.tensor(8)
    torch.onnx.export(scripted, (ids, steps), os.path.join(folder, "model.onnx"),
                      input_names=["ids", "steps"], output_names=["out"],
                      dynamic_axes={"ids": {1: "seq"}, "out": {1: "total"}}, opset_version=17,
                      dynamo=False)
    sess = ort.InferenceSession(os.path.join(folder, "model.onnx"), providers=["CPUExecutionProvider"])
    sets = [(ids, steps), (torch.tensor([[9, 500, 31]]), torch.tensor(12)),
            (torch.tensor([[42]]), torch.tensor(0))]
    for k, (x, n) in enumerate(sets):
        with torch.no_grad():
            want = g(x, n).numpy()
        got = sess.run(None, {"ids": x.numpy(), "steps": n.numpy()})[0]
        assert np.array_equal(got, want), (got, want)
        ds = os.path.join(folder, "test_data_set_%d" % k)
        os.makedirs(ds, exist_ok=True)
        onnx.save_tensor(nh.from_array(x.numpy(), "ids"), os.path.join(ds, "input_0.pb"))
        onnx.save_tensor(nh.from_array(n.numpy(), "steps"), os.path.join(ds, "input_1.pb"))
        onnx.save_tensor(nh.from_array(want, "out"), os.path.join(ds, "output_0.pb"))
        print("gpt_greedy", k, want.tolist())


def seq_loop():
    """Sequences inside and out: a Loop that grows a sequence (SequenceInsert) of rows it
    computes, stacked after the loop (ConcatFromSequence new_axis=1); the input split into
    a sequence of uneven chunks (SplitToSequence with sizes), one taken back
    (SequenceAt, negative position) and one erased; the sequence and an optional given
    out as they are."""
    tseq = h.make_sequence_type_proto(h.make_tensor_type_proto(TP.FLOAT, None))
    body = h.make_graph(
        [h.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT),
         h.make_node("Mul", ["x_row", "fi"], ["row"]),
         h.make_node("SequenceInsert", ["acc", "row"], ["acc_out"]),
         h.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), h.make_value_info("acc", tseq)],
        [vi("c_out", TP.BOOL, []), h.make_value_info("acc_out", tseq)])
    nodes = [
        h.make_node("ReduceMean", ["x"], ["x_row"], axes=[0], keepdims=0),
        h.make_node("SequenceEmpty", [], ["empty"], dtype=TP.FLOAT),
        h.make_node("Loop", ["M", "", "empty"], ["rows"], body=body),
        h.make_node("ConcatFromSequence", ["rows"], ["stacked"], axis=0, new_axis=1),
        h.make_node("SplitToSequence", ["x", "sizes"], ["chunks"], axis=0),
        h.make_node("SequenceAt", ["chunks", "minus_one"], ["last_chunk"]),
        h.make_node("SequenceErase", ["chunks", "zero_i"], ["rest"]),
        h.make_node("SequenceLength", ["rest"], ["n_rest"]),
        h.make_node("Optional", ["last_chunk"], ["maybe"]),
        h.make_node("OptionalHasElement", ["maybe"], ["has"]),
    ]
    g = h.make_graph(nodes, "seq_loop", [vi("x", TP.FLOAT, [5, 3]), vi("M", TP.INT64, [])],
                     [vi("stacked", TP.FLOAT, ["rows", 3]), h.make_value_info("rest", tseq),
                      vi("last_chunk", TP.FLOAT, [2, 3]), vi("n_rest", TP.INT64, []),
                      vi("has", TP.BOOL, [])],
                     [init("sizes", np.array([2, 1, 2], np.int64)), init("minus_one", np.int64(-1)),
                      init("zero_i", np.int64(0))])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    folder = os.path.join(OUT, "seq_loop")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = rng.standard_normal((5, 3)).astype(np.float32)
    for k, m in enumerate([np.array(4, np.int64), np.array(1, np.int64)]):
        ds = os.path.join(folder, "test_data_set_%d" % k)
        os.makedirs(ds, exist_ok=True)
        onnx.save_tensor(nh.from_array(x, "x"), os.path.join(ds, "input_0.pb"))
        onnx.save_tensor(nh.from_array(m, "M"), os.path.join(ds, "input_1.pb"))
        outs = sess.run(None, {"x": x, "M": m})
        for i, (o, y) in enumerate(zip(sess.get_outputs(), outs)):
            f = os.path.join(ds, "output_%d.pb" % i)
            if isinstance(y, list):
                with open(f, "wb") as fh:
                    fh.write(nh.from_list(y, o.name).SerializeToString())
            else:
                onnx.save_tensor(nh.from_array(y, o.name), f)
        print("seq_loop", k, [len(y) if isinstance(y, list) else y.shape for y in outs])


if __name__ == "__main__":
    if_shapes()
    loop_grow()
    scan_axes()
    loop_conv()
    if_static()
    gpt_greedy()
    seq_loop()
    sys.exit(0)
