#!/usr/bin/env python3
"""The oracles of make_probe_r8.py's comparison cases. Each case the runner saw exit 0 is
run again with --output-dir, and its outputs compared:

- `cmp:ort`: with onnx.reference's (the oracle: it computes the float QDQ graph and the
  integer products exactly) and onnxruntime's (printed, not counted: its AVX2 int8
  product saturates pairs of products in 16 bits) on the same model; integer outputs exactly,
  8-bit codes dequantized (the models end in DequantizeLinear) within one step of the
  output scale, anything else within 1e-4;
- `cmp:cpu`: a `--device opencl` case with the same command on the CPU (no --device),
  within 1e-4 (NaN equal to NaN).

    tests/corpus/run_probe.sh KILN DIR > results.tsv
    .venv/bin/python tests/corpus/probe_cmp_r8.py DIR KILN results.tsv

Prints one line per output that differs, or that onnxruntime could not compute
(ORT-ERR: judge those by hand), and a count at the end.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

d, kiln, results = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
rc = {l.split("\t")[0]: l.split("\t")[3] for l in open(results, errors="replace") if l.count("\t") >= 3}


def run_kiln(args, od):
    r = subprocess.run(f"rm -rf {od} && timeout 20 {kiln} {args} --output-dir {od}", shell=True, cwd=d,
                       capture_output=True)
    return r.returncode, r.stderr.decode(errors="replace")


def outputs(od, m):
    got = {}
    for o in m.graph.output:
        p = os.path.join(d, od, o.name + ".npy")
        got[o.name] = np.load(p) if os.path.exists(p) else None
    return got


def step_of(m, name):
    """The scale of the DequantizeLinear that makes output `name`, if one does."""
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.output and n.output[0] == name and n.op_type == "DequantizeLinear" and n.input[1] in inits:
            return float(np.max(np.abs(inits[n.input[1]])))
    return None


def differ(a, b, tol):
    if a is None or b is None:
        return "missing"
    if a.shape != b.shape:
        return f"SHAPE {a.shape} {b.shape}"
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        bad = a.astype(np.int64) != b.astype(np.int64)
    else:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        bad = ~np.isclose(a64, b64, rtol=1e-4, atol=tol, equal_nan=True)
    if bad.any():
        i = np.flatnonzero(bad)
        return f"DIFF {bad.sum()} of {bad.size}: kiln {a.ravel()[i[:4]]} other {b.ravel()[i[:4]]}"
    return None


n = bad = 0
for line in open(os.path.join(d, "probe.tsv")):
    name, cls, exp, args = line.rstrip("\n").split("\t")
    if os.environ.get("ALL_DEVICE") and " --device opencl" in args and exp == "any":
        exp = "cmp:cpu"
    if not exp.startswith("cmp:") or rc.get(name) != "rc=0":
        continue
    mpath = os.path.join(d, args.split()[1])
    m = onnx.load(mpath)
    code, err = run_kiln(args, name + ".cmp")
    if code:
        print(name, "KILN rc", code, err[:200])
        bad += 1
        continue
    got = outputs(name + ".cmp", m)
    if exp == "cmp:cpu":
        code, err = run_kiln(args.replace(" --device opencl", ""), name + ".cpu")
        if code:
            print(name, "CPU rc", code, err[:200])
            bad += 1
            continue
        want = outputs(name + ".cpu", m)
        tols = {k: 1e-4 for k in want}
    else:
        import onnxruntime as ort
        from onnx.reference import ReferenceEvaluator
        feeds = {}
        for a in args.split(" --input ")[1:]:
            k, v = a.split()[0].split("=", 1)
            feeds[k] = np.load(os.path.join(d, v))
        want, other = {}, {}
        try:
            vals = ReferenceEvaluator(m).run(None, feeds)
            want = {o.name: np.asarray(v) for o, v in zip(m.graph.output, vals)}
        except Exception as e:  # noqa: BLE001 (the reference's own gaps)
            print(name, "REF-ERR", str(e).replace("\n", " ")[:150])
        try:
            so = ort.SessionOptions()
            so.log_severity_level = 3
            s = ort.InferenceSession(mpath, so, providers=["CPUExecutionProvider"])
            other = {o.name: v for o, v in zip(m.graph.output, s.run(None, feeds))}
        except Exception as e:  # noqa: BLE001 (onnxruntime's own gaps)
            print(name, "ORT-ERR", str(e).replace("\n", " ")[:150])
        tols = {o.name: (step_of(m, o.name) or 0) * 1.0001 + 1e-4 for o in m.graph.output}
        for k in other:
            why = differ(got[k], other[k], tols[k])
            if why:
                print(name, k, "(onnxruntime)", why)
        if not want:
            continue
    n += 1
    for k in want:
        why = differ(got[k], want[k], tols[k])
        if why:
            bad += 1
            print(name, k, why)
print(f"{n} compared, {bad} differences")
