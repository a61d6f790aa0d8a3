#!/usr/bin/env python3
"""Op counts of kiln's optimizer beside onnxruntime's extended level.

    .venv/bin/python tools/compare_passes.py KILN MODEL_DIR_OR_FILE...

For each model (a .onnx file, or a folder holding model.onnx, such as the zoo that
tools/export_zoo.py writes) prints one table: op, count in the file (Constant nodes
left out: kiln holds them as constants), count after `kiln inspect -O2`, count after
onnxruntime's ORT_ENABLE_EXTENDED (from the model it saves with
optimized_model_filepath). docs/passes.md quotes these tables.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

import onnx
import onnxruntime as ort


def op_counts(model):
    return collections.Counter((n.domain + "." if n.domain else "") + n.op_type
                               for n in model.graph.node if n.op_type != "Constant")


def kiln_counts(kiln, path):
    text = subprocess.run([kiln, "inspect", path, "-O2", "--stats"], check=True,
                          capture_output=True, text=True).stdout
    rows = re.findall(r"^  (\S+)\s+(\d+)\s+(\d+)$", text.split("\nops:")[1], re.M)
    return collections.Counter({op: int(after) for op, _, after in rows if int(after)})


def ort_counts(path, tmp):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = os.path.join(tmp, "ort.onnx")
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return op_counts(onnx.load(so.optimized_model_filepath))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    kiln = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        for arg in sys.argv[2:]:
            path = os.path.join(arg, "model.onnx") if os.path.isdir(arg) else arg
            before, ours, theirs = op_counts(onnx.load(path)), kiln_counts(kiln, path), ort_counts(path, tmp)
            print(f"\n{arg}: {sum(before.values())} nodes; kiln -O2 {sum(ours.values())}; "
                  f"onnxruntime extended {sum(theirs.values())}")
            print(f"  {'op':40} {'file':>6} {'kiln':>6} {'ort':>6}")
            for op in sorted(set(before) | set(ours) | set(theirs)):
                print(f"  {op:40} {before[op]:6} {ours[op]:6} {theirs[op]:6}")


if __name__ == "__main__":
    main()
