#!/usr/bin/env python3
"""Every model `kiln optimize` writes is valid ONNX that others load: at -O1 (ONNX ops
only) onnx.checker's full check passes and onnxruntime loads it and computes the test
data's outputs; at -O2 (kiln's fused ops in the domain `kiln`) the checker passes and
kiln runs the written file as saved (-O0) on the same data.

    tests/run_written_models.py KILN_BINARY       (from the source root, with the venv's
                                                   python: onnx, onnxruntime, numpy)
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

CASES = [  # a folder with model.onnx or model.pt and test_data_set_0
    "models/digits_cnn",
    "tests/models/ts/transformer",   # a trace repeats node names: written apart
    "tests/models/ts/hf_bert",
    "tests/models/dyn_bert",         # shape_values' constant targets
    "tests/models/dyn_bert_sdpa",    # MultiHeadAttention zero_masked_rows=1
    "tests/models/qop_ops",          # com.microsoft ops lowered
    "tests/models/ts/stdconv",       # BatchNormalization training_mode=1
    "tests/models/control/if_shapes",  # If in If: bodies' captures named two graphs up
    "tests/models/control/loop_grow",  # Loop with an If in its body, widened carried types
    "tests/models/control/scan_axes",  # Scan along other axes, reversed
    "tests/models/control/loop_conv",  # Conv+BN+Relu fused inside a Loop body
    "tests/models/control/if_static",  # an If on a folded condition, inlined
    "tests/models/control/gpt_greedy",  # greedy decoding: a Loop whose carried ids grow
    "tests/models/control/seq_loop",  # sequences in and out of a Loop, an optional
]


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def main():
    kiln = os.path.abspath(sys.argv[1])
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        for case in CASES:
            src = os.path.join(case, "model.pt" if os.path.exists(os.path.join(case, "model.pt"))
                               else "model.onnx")
            data = os.path.join(case, "test_data_set_0")
            ins = sorted(f for f in os.listdir(data) if f.startswith("input_"))
            outs = sorted(f for f in os.listdir(data) if f.startswith("output_"))
            for level in ("-O1", "-O2"):
                name = case.replace("/", "_") + level
                path = os.path.join(work, name + ".onnx")
                r = subprocess.run([kiln, "optimize", src, level, "-o", path],
                                   capture_output=True, text=True)
                problem = None
                if r.returncode:
                    problem = "kiln optimize failed: " + r.stderr.strip()[-300:]
                else:
                    try:
                        onnx.checker.check_model(path, full_check=level == "-O1")
                    except Exception as e:  # the checker's own exceptions
                        problem = f"onnx.checker: {str(e)[:300]}"
                if not problem and level == "-O1":
                    try:
                        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                        feeds = {}
                        for meta, f in zip(sess.get_inputs(), ins):
                            feeds[meta.name] = load_pb(os.path.join(data, f))[1]
                        got = sess.run(None, feeds)
                        for k, f in enumerate(outs):
                            if isinstance(got[k], list):  # a sequence: a SequenceProto
                                sq = onnx.SequenceProto()
                                with open(os.path.join(data, f), "rb") as fh:
                                    sq.ParseFromString(fh.read())
                                want = numpy_helper.to_list(sq)
                                if len(want) != len(got[k]) or not all(
                                        np.allclose(a, b, rtol=1e-4, atol=1e-5)
                                        for a, b in zip(got[k], want)):
                                    problem = f"onnxruntime's output {k} (a sequence) differs"
                                continue
                            want = load_pb(os.path.join(data, f))[1]
                            if not np.allclose(got[k], want, rtol=1e-4, atol=1e-5):
                                problem = (f"onnxruntime's output {k} differs by "
                                           f"{np.abs(got[k] - want).max():.3g}")
                    except Exception as e:
                        problem = f"onnxruntime: {str(e)[:300]}"
                if not problem and level == "-O2":
                    folder = os.path.join(work, name)
                    shutil.copytree(data, os.path.join(folder, "test_data_set_0"))
                    os.rename(path, os.path.join(folder, "model.onnx"))
                    r = subprocess.run([kiln, "check", "-O0", "--rtol", "1e-4", folder],
                                       capture_output=True, text=True)
                    if r.returncode:
                        problem = "kiln check of the written file: " + r.stderr.strip()[-300:]
                print(f"{'FAIL' if problem else 'ok  '} {case} {level}"
                      f"{': ' + problem if problem else ''}")
                failed += problem is not None
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
