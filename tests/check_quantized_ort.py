"""What kiln quantize wrote, on onnxruntime (tests/run_quantize_cli.sh).

usage: check_quantized_ort.py DIR HELDOUT_DIR

DIR holds NAME.onnx (models kiln quantize wrote) and out-NAME/logits.npy (kiln's outputs
on the held-out images). Each model must pass onnx.checker, load into onnxruntime (its
default graph optimizations: the QDQ graph becomes its int8 operators) and give kiln's
outputs within 0.05 (a few thousandths of their range: the two fold the same QDQ pairs
into int8 operators and round the same way but for ties) and the same predicted class
for all but at most one image. Models named *full-range* (8-bit weights) are compared only
where the CPU has VNNI: without it onnxruntime's u8s8 kernels (vpmaddubsw) saturate on
full-range weights (docs/precision.md), while kiln runs those convolutions exactly.
"""
import glob
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort


def has_vnni():
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def main():
    folder, held = sys.argv[1], sys.argv[2]
    x = np.load(os.path.join(held, "heldout_images.npy"))
    labels = np.load(os.path.join(held, "heldout_labels.npy"))
    failed = 0
    models = sorted(glob.glob(os.path.join(folder, "*.onnx")))
    for path in models:
        name = os.path.basename(path)[:-5]
        kiln_out = os.path.join(folder, "out-" + name, "logits.npy")
        if not os.path.exists(kiln_out):
            continue
        onnx.checker.check_model(onnx.load(path), full_check=True)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
        want = np.load(kiln_out)
        diff = float(np.abs(got - want).max())
        differ = int((got.argmax(1) != want.argmax(1)).sum())
        acc = float((got.argmax(1) == labels).mean())
        compared = "full-range" not in name or has_vnni()
        ok = not compared or (diff <= 0.05 and differ <= 1)
        note = "" if ok else "  FAIL"
        if not compared:
            note = "  (not compared: 8-bit weights saturate onnxruntime's AVX2 kernels)"
        print(f"{name}: onnxruntime accuracy {acc:.4f}, largest difference from kiln "
              f"{diff:.2e}, {differ} predictions differ{note}")
        failed += not ok
    if not models:
        print("no models in", folder)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
