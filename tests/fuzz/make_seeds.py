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
The folders are emptied first; the output is the same on every run.
"""
import glob
import io
import os
import re
import shutil

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


if __name__ == "__main__":
    onnx_seeds()
    tensorfile_seeds()
    onnx_dictionary()
