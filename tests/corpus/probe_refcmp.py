#!/usr/bin/env python3
"""The oracle of make_probe_r5.py's `cmp:ref` cases: runs each case that the runner saw
exit 0 again with --output-dir, runs the same model and inputs through onnx.reference,
and prints each output that differs (shape, or values beyond 1e-4) or that the reference
could not compute (REF-ERR: judge those by hand; onnx.reference lacks some modes).

    tests/corpus/run_probe.sh KILN DIR > results.tsv
    EXTRA="-O0" .venv/bin/python tests/corpus/probe_refcmp.py DIR KILN results.tsv
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

d, kiln, results = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
extra = os.environ.get("EXTRA", "")
rc = {l.split("\t")[0]: l.split("\t")[3] for l in open(results, errors="replace") if l.count("\t") >= 3}
n = 0
for line in open(os.path.join(d, "probe.tsv")):
    name, cls, exp, args = line.rstrip("\n").split("\t")
    if rc.get(name) != "rc=0" or not args.startswith("run ") or " -" in args.replace(" --input", ""):
        continue
    od = os.path.join(d, name + ".cmp")
    r = subprocess.run(f"rm -rf {od} && timeout 10 {kiln} {args} {extra} --output-dir {od}",
                       shell=True, cwd=d, capture_output=True)
    if r.returncode:
        print(name, "KILN rc", r.returncode)
        continue
    feeds = {}
    try:
        for a in args.split(" --input ")[1:]:
            k, v = a.split()[0].split("=", 1)
            if v.endswith(".pb"):
                t = onnx.TensorProto()
                with open(os.path.join(d, v), "rb") as f:
                    t.ParseFromString(f.read())
                feeds[k] = numpy_helper.to_array(t)
            else:
                feeds[k] = np.load(os.path.join(d, v))
        m = onnx.load(os.path.join(d, args.split()[1]))
        outs = ReferenceEvaluator(m).run(None, feeds)
    except Exception as e:  # noqa: BLE001 (the reference's own gaps)
        print(name, "REF-ERR", str(e).replace("\n", " ")[:150])
        continue
    n += 1
    for o, v in zip(m.graph.output, outs):
        p = os.path.join(od, o.name + ".npy")
        if not os.path.exists(p):
            print(name, "missing", o.name)
            continue
        k, v = np.load(p), np.asarray(v)
        if k.shape != v.shape:
            print(name, "SHAPE", o.name, k.shape, v.shape)
        elif not np.allclose(k.astype(np.float64), v.astype(np.float64), rtol=1e-4, atol=1e-4,
                             equal_nan=True):
            print(name, "DIFF", o.name, k.ravel()[:6], v.ravel()[:6])
print(n, "compared")
