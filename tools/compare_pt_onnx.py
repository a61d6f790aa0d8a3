#!/usr/bin/env python3
"""Compare kiln's optimized graphs of the zoo's torchvision models from their two exports:
the ONNX file (NAME/model.onnx) and the TorchScript trace (NAME-pt/model.pt), both
written by tools/export_zoo.py. For each model it runs `kiln inspect -O2 --stats` on both
and prints markdown: a summary table (nodes after O2, equal or not, the ops whose counts
differ), then one table per model with every op's count from each file.

    .venv/bin/python tools/compare_pt_onnx.py build/tools/kiln [--cache DIR] [--only a,b]
    .venv/bin/python tools/compare_pt_onnx.py build/tools/kiln --errors   kiln vs PyTorch

Needs only Python 3 and the kiln binary (no torch; --errors also numpy and onnx). Not run by the tests: docs/torchscript.md
holds its output and says why the graphs differ where they do.
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_zoo  # noqa: E402  (its model list; --list needs no torch)


def op_counts(kiln, path):
    """{op: count after O2} and the node count, from kiln inspect -O2 --stats."""
    r = subprocess.run([kiln, "inspect", "-O2", "--stats", path], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip() or r.stdout.strip()).splitlines()[-1])
    ops, nodes, in_ops = {}, None, False
    for line in r.stdout.splitlines():
        m = re.match(r"^nodes: (\d+) -> (\d+)", line)
        if m:
            nodes = int(m.group(2))
        if line.startswith("ops:"):
            in_ops = True
            continue
        m = re.match(r"^\s+(\S+)\s+(\d+)\s+(\d+)\s*$", line) if in_ops else None
        if m:
            if int(m.group(3)):
                ops[m.group(1)] = int(m.group(3))
        elif in_ops and line.strip():
            in_ops = False
    if nodes is None:
        raise RuntimeError("no 'nodes:' line in kiln inspect --stats of " + path)
    return ops, nodes


def pt_errors(kiln, folder):
    """kiln run on NAME-pt's inputs: the largest absolute differences of kiln from
    PyTorch eager (the expected outputs) and from the float64 run, the largest output
    magnitude, and PyTorch's own difference from float64."""
    import tempfile

    import numpy as np

    case = os.path.join(folder, "test_data_set_0")
    cmd = [kiln, "run", os.path.join(folder, "model.pt"), "--format", "npy"]
    k = 0
    while os.path.exists(os.path.join(case, "input_%d.pb" % k)):
        path = os.path.join(case, "input_%d.pb" % k)
        cmd += ["--input", "%s=%s" % (export_zoo.read_pb(path)[0], path)]
        k += 1
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run(cmd + ["--output-dir", out], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError((r.stderr.strip() or r.stdout.strip()).splitlines()[-1])
        vs_torch = vs_f64 = peak = torch_f64 = 0.0
        k = 0
        while os.path.exists(os.path.join(case, "output_%d.pb" % k)):
            want = export_zoo.read_pb(os.path.join(case, "output_%d.pb" % k))[1]
            f64 = export_zoo.read_pb(os.path.join(folder, "float64_outputs",
                                                  "output_%d.pb" % k))[1]
            got = np.load(os.path.join(out, "output_%d.npy" % k))  # kiln's names for a .pt
            vs_torch = max(vs_torch, export_zoo.diff(got, want)["max_abs"])
            vs_f64 = max(vs_f64, export_zoo.diff(got, f64)["max_abs"])
            peak = max(peak, float(np.abs(want).max(initial=0)))
            torch_f64 = max(torch_f64, export_zoo.diff(want, f64)["max_abs"])
            k += 1
    return vs_torch, vs_f64, peak, torch_f64


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kiln", help="the kiln binary")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/kiln-zoo"))
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--errors", action="store_true",
                    help="instead: run kiln on each NAME-pt and print its errors against "
                         "PyTorch eager and float64 (needs numpy and onnx)")
    a = ap.parse_args()
    names = list(export_zoo.VISION)
    if a.only:
        names = [n for n in a.only.split(",") if n in export_zoo.VISION]
    if a.errors:
        print("| model | max abs out | kiln - PyTorch | kiln - fp64 | PyTorch - fp64 |")
        print("|---|---|---|---|---|")
        for n in names:
            folder = os.path.join(a.cache, n + "-pt")
            if not os.path.exists(os.path.join(folder, "model.pt")):
                print("| %s | not in the cache | | | |" % n)
                continue
            try:
                t, f, peak, torch_f64 = pt_errors(a.kiln, folder)
            except RuntimeError as e:
                print("| %s | FAIL: %s | | | |" % (n, str(e).replace("|", "/")))
                continue
            print("| %s | %.3g | %.1e | %.1e | %.1e |" % (n, peak, t, f, torch_f64), flush=True)
        return 0
    rows, details = [], []
    for n in names:
        onnx_path = os.path.join(a.cache, n, "model.onnx")
        pt_path = os.path.join(a.cache, n + "-pt", "model.pt")
        if not (os.path.exists(onnx_path) and os.path.exists(pt_path)):
            rows.append("| %s | | | not in the cache | |" % n)
            continue
        try:
            pt, pt_nodes = op_counts(a.kiln, pt_path)
            ox, ox_nodes = op_counts(a.kiln, onnx_path)
        except RuntimeError as e:
            rows.append("| %s | | | FAIL: %s | |" % (n, str(e).replace("|", "/")))
            continue
        ops = sorted(set(pt) | set(ox), key=lambda o: (-max(pt.get(o, 0), ox.get(o, 0)), o))
        diff = ["%s %d / %d" % (o, pt.get(o, 0), ox.get(o, 0)) for o in ops
                if pt.get(o, 0) != ox.get(o, 0)]
        rows.append("| %s | %d | %d | %s | %s |" % (n, pt_nodes, ox_nodes,
                                                    "equal" if not diff else "differ",
                                                    ", ".join(diff)))
        details.append("#### %s\n\n| op | .pt | .onnx |\n|---|---|---|\n%s\n" % (
            n, "\n".join("| %s | %d | %d |%s" % (o, pt.get(o, 0), ox.get(o, 0),
                                                  "" if pt.get(o, 0) == ox.get(o, 0) else " *")
                         for o in ops)))
    print("| model | nodes .pt | nodes .onnx | op counts | differing ops (.pt / .onnx) |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("\n".join(details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
