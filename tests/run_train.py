#!/usr/bin/env python3
"""kiln train against PyTorch: models/train/NAME trained by `kiln train` with the same
initial weights, batches (file order) and settings as PyTorch's recorded run
(models/make_train_refs.py wrote torch.json); every step's loss must be within 1%
(relative) of PyTorch's and the held-out accuracy after the run within 0.5 points.

usage: run_train.py KILN MODEL_DIR OPTIMIZER [extra kiln train args...]
Standard library only (CI's Python may lack numpy).
"""
import json
import os
import subprocess
import sys
import tempfile

REL_TOL = 0.01
ACC_TOL = 0.005


def main():
    kiln, folder, opt = sys.argv[1], sys.argv[2], sys.argv[3]
    extra = sys.argv[4:]
    with open(os.path.join(folder, "torch.json")) as f:
        ref = json.load(f)
    run = ref["runs"][opt]
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        out = os.path.join(tmp, "trained.onnx")
        cmd = [kiln, "train", os.path.join(folder, "model.onnx"),
               "--data", os.path.join(folder, "train.npz"),
               "--eval", os.path.join(folder, "eval.npz"),
               "--no-shuffle", "--steps", str(ref["steps"]), "--batch", str(ref["batch"]),
               "--optimizer", opt, "--log", log, "-o", out] + extra
        for k, v in run["settings"].items():
            cmd += ["--" + k.replace("_", "-"), str(v)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print("FAIL: " + " ".join(cmd) + "\n" + p.stdout + p.stderr)
            return 1
        steps, acc = [], None
        with open(log) as f:
            for line in f:
                rec = json.loads(line)
                if "loss" in rec:
                    steps.append(rec["loss"])
                if "eval_accuracy" in rec:
                    acc = rec["eval_accuracy"]
        if not os.path.getsize(out):
            print("FAIL: -o wrote nothing")
            return 1
    want = run["losses"]
    bad = 0
    worst = 0.0
    if len(steps) != len(want):
        print(f"FAIL: {len(steps)} steps logged, expected {len(want)}")
        return 1
    for i, (got, exp) in enumerate(zip(steps, want)):
        rel = abs(got - exp) / max(abs(exp), 1e-12)
        worst = max(worst, rel)
        if rel > REL_TOL:
            if bad < 5:
                print(f"step {i + 1}: kiln {got:.6f}, PyTorch {exp:.6f} ({rel * 100:.2f}%)")
            bad += 1
    name = os.path.basename(folder.rstrip("/"))
    print(f"{name} {opt}: {len(want)} steps, largest loss difference {worst * 100:.3f}%, "
          f"loss {steps[0]:.4f} -> {steps[-1]:.4f} (PyTorch {want[-1]:.4f}); eval accuracy "
          f"kiln {acc}, PyTorch {run['eval_accuracy']:.4f}")
    if bad:
        print(f"FAIL: {bad} steps differ by more than {REL_TOL * 100:.0f}%")
        return 1
    if acc is None or abs(acc - run["eval_accuracy"]) > ACC_TOL:
        print(f"FAIL: eval accuracy differs by more than {ACC_TOL * 100} points")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
