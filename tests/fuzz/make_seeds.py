#!/usr/bin/env python3
"""Write the seed corpora of the fuzz targets (tests/fuzz/seeds/<target>/).

    .venv/bin/python tests/fuzz/make_seeds.py

fuzz_onnx: the bundled models, plus ONNX node-test models from the onnx wheel that kiln
passes (tests/conformance/expected_failures.txt lists the others), the smallest one for
each set of op types, so that the fuzzer starts from every op kiln can run.
fuzz_tensorfile: the bundled models' test inputs and outputs (.pb), the smallest node-test
tensor of each dtype, and small .npy files of every dtype and format version kiln reads.
fuzz_onnx.dict: a libFuzzer dictionary of the op names of src/ir/ops.def and the
attribute names the sources read, bare and as protobuf fields (NodeProto.op_type,
AttributeProto.name), so that mutations turn one op or attribute into another.
fuzz_torchscript: every fixture of tests/models/ts and a few tiny traced modules (the
ATen calls the fixtures do not make), each as the .pt archive and as a bundle (the
archive's entries as plain bytes, the form fuzz_torchscript.c packs into an archive
itself; .debug_pkl files left out), a hand-made bundle of a module with attributes of
every pickled kind, and bare pickles as bundles of data.pkl alone; the scripted
fixtures of tests/models/ts/script as bundles with a traced_inputs.pkl of their first
test case's inputs added (a scripted archive records none, and without input types
their code stops at the first op that needs a rank).
fuzz_torchscript.dict: pickle opcodes, the globals pickle.c accepts, the ATen names of
src/import/aten.c and the tokens of traced code.
Optimized models (with --kiln PATH, a kiln binary): models/digits_cnn and the
transformer and tiny_gpt fixtures' ONNX twins as `kiln optimize` writes them (kiln's
fused ops in the domain "kiln") go to seeds/fuzz_onnx as kiln_opt_*.onnx.
The folders are emptied first; the output is the same on every run, except the
serialization id torch.jit.save writes into the tiny traced modules' archives.

    .venv/bin/python tests/fuzz/make_seeds.py [onnx] [tensorfile] [torchscript] \
        [--kiln build/tools/kiln]

writes the named parts only (all of them when none is named and no --kiln is given);
--kiln PATH alone writes only the optimized models, into seeds/fuzz_onnx without
emptying it.
"""
import argparse
import glob
import io
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")
NODE_TESTS = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
MAX_NODE_MODEL_BYTES = 2048


def fresh(target):
    path = os.path.join(SEEDS, target)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def copy(src, dst_dir, name):
    shutil.copyfile(src, os.path.join(dst_dir, name))


def failing_node_tests():
    failing = set()
    with open(os.path.join(ROOT, "tests", "conformance", "expected_failures.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                failing.add(line.split("\t")[0])
    return failing


def node_models():
    """(test name, path) of the node tests kiln passes, in name order."""
    failing = failing_node_tests()
    for test in sorted(os.listdir(NODE_TESTS)):
        path = os.path.join(NODE_TESTS, test, "model.onnx")
        if test not in failing and os.path.isfile(path):
            yield test, path


def onnx_seeds():
    out = fresh("fuzz_onnx")
    for model in sorted(os.listdir(os.path.join(ROOT, "models"))):
        path = os.path.join(ROOT, "models", model, "model.onnx")
        if os.path.isfile(path):
            copy(path, out, model + ".onnx")
    best = {}  # op type set -> (size, test, path)
    for test, path in node_models():
        size = os.path.getsize(path)
        if size > MAX_NODE_MODEL_BYTES:
            continue
        ops = tuple(sorted({n.op_type for n in onnx.load(path).graph.node}))
        if ops not in best or size < best[ops][0]:
            best[ops] = (size, test, path)
    for _, test, path in sorted(best.values(), key=lambda x: x[1]):
        copy(path, out, test + ".onnx")


def npy_bytes(array, version):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, version=version)
    return buf.getvalue()


def tensorfile_seeds():
    out = fresh("fuzz_tensorfile")
    for model in sorted(os.listdir(os.path.join(ROOT, "models"))):
        data = os.path.join(ROOT, "models", model, "test_data_set_1")
        for f in sorted(os.listdir(data)) if os.path.isdir(data) else []:
            copy(os.path.join(data, f), out, "%s_%s" % (model, f))
    smallest = {}  # dtype -> (size, path)
    for test, _ in node_models():
        data = os.path.join(NODE_TESTS, test, "test_data_set_0")
        for f in sorted(os.listdir(data)):
            path = os.path.join(data, f)
            t = onnx.TensorProto()
            try:
                t.ParseFromString(open(path, "rb").read())
            except Exception:  # a sequence or optional, not a tensor
                continue
            size = os.path.getsize(path)
            if t.data_type not in smallest or size < smallest[t.data_type][0]:
                smallest[t.data_type] = (size, path)
    for dtype, (_, path) in sorted(smallest.items()):
        copy(path, out, "node_%s.pb" % onnx.TensorProto.DataType.Name(dtype).lower())
    rng = np.random.default_rng(0)
    for dtype in ["<f4", "<f8", "<f2", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8",
                  "|b1"]:
        a = (rng.standard_normal((2, 3)) * 4).astype(np.dtype(dtype))
        with open(os.path.join(out, "npy_%s.npy" % np.dtype(dtype).name), "wb") as f:
            f.write(npy_bytes(a, (1, 0)))
    a = np.arange(6, dtype="<f4").reshape(3, 2)
    for version in [(2, 0), (3, 0)]:
        with open(os.path.join(out, "npy_v%d.npy" % version[0]), "wb") as f:
            f.write(npy_bytes(a, version))
    with open(os.path.join(out, "npy_scalar.npy"), "wb") as f:
        f.write(npy_bytes(np.array(1.5, dtype="<f4"), (1, 0)))
    with open(os.path.join(out, "npy_empty.npy"), "wb") as f:
        f.write(npy_bytes(np.zeros((0, 4), dtype="<i8"), (1, 0)))


def dict_entry(raw):
    return '"%s"' % "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "\\x%02x" % ord(c)
                           for c in raw)


def onnx_dictionary():
    src = os.path.join(ROOT, "src")
    with open(os.path.join(src, "ir", "ops.def")) as f:
        ops = sorted(set(re.findall(r'^KL_OP\(\w+, *"(\w+)"', f.read(), re.M)))
    attrs = set()
    for path in glob.glob(os.path.join(src, "**", "*.c"), recursive=True):
        with open(path) as f:
            attrs.update(re.findall(r'kl_attr_\w+\([\w>-]+, *"(\w+)"', f.read()))
    lines = ["# written by tests/fuzz/make_seeds.py: op and attribute names"]
    for op in ops:  # NodeProto.op_type is field 4, a string: tag 0x22
        lines += [dict_entry(op), dict_entry("\x22%c%s" % (len(op), op))]
    for name in sorted(attrs):  # AttributeProto.name is field 1: tag 0x0a
        lines += [dict_entry(name), dict_entry("\x0a%c%s" % (len(name), name))]
    with open(os.path.join(ROOT, "tests", "fuzz", "fuzz_onnx.dict"), "w") as f:
        f.write("\n".join(lines) + "\n")


# ---- fuzz_torchscript ----

TS_FIXTURES = os.path.join(ROOT, "tests", "models", "ts")
BUNDLE_SEP = b"\n@@"  # fuzz_torchscript.c: "\n@@<name>\n" starts an entry


def ts_bundle(pt_path):
    """The entries of a .pt archive as a bundle: data.pkl first, then "\n@@name\n" and
    the bytes of every other entry (names relative to the archive's folder)."""
    with zipfile.ZipFile(pt_path) as z:
        names = z.namelist()
        data_pkl = next(n for n in names if n.endswith("/data.pkl") and n.count("/") == 1)
        prefix = data_pkl[:-len("data.pkl")]
        parts = [z.read(data_pkl)]
        for name in names:
            rel = name[len(prefix):]
            if (not name.startswith(prefix) or name == data_pkl or rel.endswith(".debug_pkl")
                    or rel.startswith(".data/") or name.endswith("/")):
                continue
            assert re.fullmatch(r"[A-Za-z0-9_./-]{1,200}", rel), rel
            parts.append(BUNDLE_SEP + rel.encode() + b"\n" + z.read(name))
    for p in parts:  # an entry's bytes must not look like the next header
        assert not re.search(rb"\n@@[A-Za-z0-9_./-]{1,200}\n", p[3:] if p.startswith(BUNDLE_SEP) else p)
    return b"".join(parts)


def tiny_modules():
    """Small traced modules making the ATen calls of src/import/aten.c that the fixtures
    of tests/models/ts do not make. Returns [(name, traced module)]."""
    import warnings

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    warnings.filterwarnings("ignore")

    class Elementwise(nn.Module):
        def forward(self, x):
            a = torch.sin(x) + torch.cos(x) * torch.exp(-x.abs())
            b = torch.log(x.abs() + 1.0) - torch.tanh(x) + torch.sigmoid(x) * torch.erf(x)
            c = torch.sign(x) * torch.reciprocal(x.abs() + 2.0) + torch.rsqrt(x.abs() + 1.0)
            d = torch.ceil(x) - torch.floor(x) + F.mish(x) + torch.neg(x)
            e = torch.clamp_min(x, -0.5) + torch.clamp_max(x, 0.5) + torch.clip(x, -1, 1)
            f = torch.remainder(x, 1.5) + torch.floor_divide(x, 2.0)
            return F.softmax(a + b + c + d + e + f, dim=-1)

    class Shapes(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.arange(12, dtype=torch.float32).reshape(4, 3) / 10)

        def forward(self, x):  # x: [2, 3, 4]
            y = torch.bmm(x, x.transpose(1, 2))
            z = torch.mm(x[0].t(), self.w.t())
            e = torch.einsum("bij,jk->bik", x, self.w)
            a, b = torch.split(torch.roll(x, 1, 2), 2, dim=2)
            c, d = torch.split_with_sizes(x, [1, 3], dim=2)
            s = torch.swapaxes(a, 1, 2).clone().detach()
            idx = torch.tensor([1, 0])
            g = x[idx]
            n = torch.linalg.vector_norm(x, 2, dim=-1) + torch.amin(x, dim=-1)
            k = torch.zeros_like(a) + torch.ones_like(a).type_as(a) + b.expand_as(a).to(torch.float32)
            return y, z, e, s, c + d.sum(-1, keepdim=True), g, n, k, x.size(0) * x.numel()

    class Conv1d3d(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv1d(2, 2, 3)
            self.t1 = nn.ConvTranspose1d(2, 2, 2, stride=2)
            self.c3 = nn.Conv3d(1, 2, 2)
            self.t3 = nn.ConvTranspose3d(2, 1, 2)

        def forward(self, x, v):  # x: [1, 2, 8], v: [1, 1, 4, 4, 4]
            y = F.max_pool1d(self.c1(F.pad(x, (1, 1), mode="reflect")), 2)
            y = F.avg_pool1d(self.t1(F.pad(y, (1, 0), mode="replicate")), 2)
            y = F.adaptive_avg_pool1d(y, 3) + F.adaptive_max_pool1d(y, 5)[..., 1:4]
            w = self.c3(F.pad(v, (1, 1, 1, 1, 1, 1), mode="replicate"))
            w = F.max_pool3d(w, 2) + F.avg_pool3d(w, 2)
            w = self.t3(F.adaptive_avg_pool3d(w, 2) + F.adaptive_max_pool3d(w, 2))
            return y, w

    torch.manual_seed(0)
    mods = [("elementwise", Elementwise(), (torch.randn(2, 5),)),
            ("shapes", Shapes(), (torch.randn(2, 3, 4),)),
            ("conv1d3d", Conv1d3d(), (torch.randn(1, 2, 8), torch.randn(1, 1, 4, 4, 4)))]
    out = []
    for name, m, example in mods:
        with torch.no_grad():
            out.append((name, torch.jit.trace(m.eval(), example, check_trace=False)))
    return out


def bare_pickles():
    """Pickles of the kinds data.pkl and constants.pkl hold, as protocol 2 writes them
    (Python's pickler writes the opcodes pickle.c reads for these types)."""
    return {
        "pickle_nested": pickle.dumps(((1, -2, 3.5, None, True), [["a", "b"], {"k": 7}],
                                       (2 ** 40, -(2 ** 63), 1e-300)), protocol=2),
        "pickle_memo": pickle.dumps([[1, 2]] * 3 + [{"x": (1,) * 4}] * 2, protocol=2),
        "pickle_strings": pickle.dumps({"forward": ("x", "y" * 40, ""), "s": 0}, protocol=2),
    }


def module_attrs_bundle():
    """A hand-made bundle: data.pkl an object __torch__.M whose state holds attributes of
    every pickled kind (Python's pickler writes the dict), code that reads them into
    ATen calls, constants.pkl left to the target's default."""
    state = {"training": False, "shape": [-1, 2, 4], "alpha": 0.5, "k": 3,
             "pair": (1, -2), "name": "m", "none": None, "flags": [True, False]}
    data = b"\x80\x02c__torch__\nM\n)\x81" + pickle.dumps(state, protocol=2)[2:-1] + b"b."
    code = b"""class M(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  def forward(self: __torch__.M,
    x: Tensor) -> Tensor:
    shape = self.shape
    alpha = self.alpha
    k = self.k
    y = torch.view(x, shape)
    z = torch.mul(torch.add(y, y, alpha=alpha), k)
    _0, _1, = self.pair
    return torch.transpose(torch.relu(z), _0, _1)
"""
    return data + BUNDLE_SEP + b"code/__torch__.py\n" + code


def traced_inputs_pkl(folder):
    """The traced_inputs.pkl torch.jit.save writes for a trace on the inputs of folder's
    test_data_set_0 (kiln reads their dtypes and shapes only)."""
    import io
    import zipfile

    import torch
    from onnx import TensorProto, numpy_helper

    class Inputs(torch.nn.Module):
        def forward(self, *xs):
            return xs[0]

    xs = []
    for k in range(8):
        path = os.path.join(folder, "test_data_set_0", "input_%d.pb" % k)
        if not os.path.isfile(path):
            break
        t = TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        xs.append(torch.from_numpy(numpy_helper.to_array(t).copy()))
    buf = io.BytesIO()
    torch.jit.save(torch.jit.trace(Inputs(), tuple(xs), check_trace=False), buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/traced_inputs.pkl")))


def torchscript_seeds():
    import torch

    out = fresh("fuzz_torchscript")
    for name in sorted(os.listdir(TS_FIXTURES)):
        path = os.path.join(TS_FIXTURES, name, "model.pt")
        if os.path.isfile(path):
            copy(path, out, name + ".pt")
            with open(os.path.join(out, name + ".bundle"), "wb") as f:
                f.write(ts_bundle(path))
    with tempfile.TemporaryDirectory() as tmp:
        for name, traced in tiny_modules():
            path = os.path.join(tmp, name + ".pt")
            torch.jit.save(traced, path)
            copy(path, out, "tiny_%s.pt" % name)
            with open(os.path.join(out, "tiny_%s.bundle" % name), "wb") as f:
                f.write(ts_bundle(path))
    for name in sorted(os.listdir(os.path.join(TS_FIXTURES, "script"))):
        folder = os.path.join(TS_FIXTURES, "script", name)
        with open(os.path.join(out, "script_%s.bundle" % name), "wb") as f:
            f.write(ts_bundle(os.path.join(folder, "model.pt")) +
                    b"\n@@traced_inputs.pkl\n" + traced_inputs_pkl(folder))
    with open(os.path.join(out, "module_attrs.bundle"), "wb") as f:
        f.write(module_attrs_bundle())
    for name, data in sorted(bare_pickles().items()):
        assert data[:1] != b"P"  # not the ZIP magic: the target reads it as a bundle
        with open(os.path.join(out, name + ".bundle"), "wb") as f:
            f.write(data)


def torchscript_dictionary():
    src = os.path.join(ROOT, "src", "import")
    with open(os.path.join(src, "aten.c")) as f:
        aten = f.read()
    start = aten.index("static const aten_op ops[]")
    names = sorted(set(re.findall(r'^    \{"([A-Za-z_0-9:]+)"', aten[start:], re.M)))
    with open(os.path.join(src, "pickle.c")) as f:
        pk = f.read()
    globals_ = sorted(set(re.findall(r'\{"(torch[\w.]*|collections)", "(\w+)"\}', pk)))
    storages = sorted(set(re.findall(r'\{"(\w+Storage)", KL_', pk)))
    lines = ["# written by tests/fuzz/make_seeds.py: pickle opcodes and globals, ATen names,",
             "# traced-code tokens, and the bundle's entry headers (fuzz_torchscript.c)"]
    # protocol 2 opcodes with their usual operands
    for op in [b"\x80\x02", b".", b"(", b")", b"t", b"\x85", b"\x86", b"\x87", b"]", b"a",
               b"e", b"l", b"}", b"s", b"u", b"d", b"q\x00", b"r\x00\x00\x00\x00",
               b"h\x00", b"j\x00\x00\x00\x00", b"J\xff\xff\xff\xff", b"K\x01",
               b"M\x00\x01", b"\x8a\x08", b"G", b"\x88", b"\x89", b"N", b"X\x01\x00\x00\x00",
               b"\x81", b"b", b"R", b"Q"]:
        lines.append(dict_entry(op.decode("latin-1")))
    for mod, name in globals_:
        lines.append(dict_entry("c%s\n%s\n" % (mod, name)))
    for st in storages:
        lines.append(dict_entry("ctorch\n%s\n" % st))
        lines.append(dict_entry(st))
    lines.append(dict_entry("c__torch__\nM\n"))
    lines.append(dict_entry("storage"))
    lines.append(dict_entry("forward"))
    for name in names:
        lines.append(dict_entry("torch.%s(" % name if "::" not in name else
                                "ops.%s.%s(" % tuple(name.split("::"))))
    for tok in ["def ", "class ", "return ", "self", "CONSTANTS.c0", "annotate(List[int], [])",
                "getattr(self, \"0\")", ".forward(", "Tensor", "None", "True", "False",
                " -> ", ", ", "[-1]", "(x, )", "9223372036854775807", "1.e-05", "\n    ",
                "\n  def forward(self: __torch__.M,\n    x: Tensor) -> Tensor:\n",
                "__torch__.torch.nn.modules.linear.Linear", "dtype=6", "int(", "float(",
                "if ", "else:", "for ", "while ", " in range(", "pass", "bool(",
                "uninitialized(Tensor)", "unchecked_cast(int, ", "__torch__.torch.nn.functional.",
                "\ndef f(x: Tensor,\n    k: float=2.) -> Tensor:\n", "ops.prim.RaiseException(",
                "torch.append(", "torch.__isnot__(", "torch.__range_length(",
                "torch.__derive_index(", "torch.len(", " : Optional[Tensor] = ",
                "torch.dict()", "torch.items(", "torch.keys(", "torch.values(", "torch.pop(",
                "torch.format(", "torch.slice(", "[::-1]"]:
        lines.append(dict_entry(tok))
    for entry in ["data.pkl", "constants.pkl", "traced_inputs.pkl", "byteorder",
                  "code/__torch__.py", "data/0", "constants/0"]:
        lines.append(dict_entry("\n@@%s\n" % entry))
    with open(os.path.join(ROOT, "tests", "fuzz", "fuzz_torchscript.dict"), "w") as f:
        f.write("\n".join(lines) + "\n")


def optimized_seeds(kiln):
    out = os.path.join(SEEDS, "fuzz_onnx")
    models = [("digits_cnn", os.path.join(ROOT, "models", "digits_cnn", "model.onnx")),
              ("transformer", os.path.join(TS_FIXTURES, "transformer_onnx", "model.onnx")),
              ("tiny_gpt", os.path.join(TS_FIXTURES, "tiny_gpt_onnx", "model.onnx"))]
    for name, path in models:
        written = []
        for level in (2, 3):
            dst = os.path.join(out, "kiln_opt_%s_O%d.onnx" % (name, level))
            subprocess.run([kiln, "optimize", path, "-O%d" % level, "-o", dst], check=True,
                           stdout=subprocess.DEVNULL)
            with open(dst, "rb") as f:
                data = f.read()
            if data in written:  # -O3 changed nothing: one copy is enough
                os.remove(dst)
            written.append(data)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="write the fuzz targets' seeds (see the top)")
    ap.add_argument("parts", nargs="*", help="onnx, tensorfile, torchscript")
    ap.add_argument("--kiln", help="a kiln binary: also write the optimized ONNX seeds")
    args = ap.parse_args()
    for part in args.parts:
        if part not in ("onnx", "tensorfile", "torchscript"):
            ap.error("unknown part '%s'" % part)
    parts = args.parts or ([] if args.kiln else ["onnx", "tensorfile", "torchscript"])
    if "onnx" in parts:
        onnx_seeds()
        onnx_dictionary()
    if "tensorfile" in parts:
        tensorfile_seeds()
    if "torchscript" in parts:
        torchscript_seeds()
        torchscript_dictionary()
    if args.kiln:
        optimized_seeds(args.kiln)
    elif "onnx" in parts:
        print("make_seeds.py: no --kiln: seeds/fuzz_onnx has no optimized models now",
              file=sys.stderr)
