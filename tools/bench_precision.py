#!/usr/bin/env python3
"""kiln in float32 against kiln in another precision (bf16) on the same models, inputs
and thread counts: speed and how far the outputs move.

For every model and thread count, runs `kiln bench --json` at --precision fp32 and at
the other precision, alternately, ROUNDS times, and reports the medians of their p50
latencies and the ratio. Accuracy, once per model: `kiln run` at both precisions on the
same inputs; for each output the largest absolute difference over the largest float32
magnitude, the cosine similarity, and for outputs of 1000 values (ImageNet logits)
whether the top-1 class and the top-5 set agree.

Models: as tools/bench_vs_ort.py names them (resnet50, bert_base_s128, any zoo folder;
NAME:N for N iterations). Writes a markdown table to stdout, and with --doc/--section
between the `bench:SECTION:begin/end` markers of a doc (tools/bench_vs_ort.py's
write_doc).

    python3 tools/bench_precision.py --kiln build/tools/kiln --models resnet50,bert_base_s128:10 \\
        --threads 1,4,16 --precision bf16
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_vs_ort as bv  # noqa: E402


def model_path(zoo, name):
    return bv.MODELS[name](zoo) if name in bv.MODELS else bv.zoo_folder_model(zoo, name)


def bench(kiln, path, inputs, threads, precision, iterations, env):
    cmd = [kiln, "bench", path, "--threads", str(threads), "--iterations", str(iterations),
           "--warmup", "3", "--json", "--precision", precision]
    for a in inputs:
        cmd += ["--input", a]
    return bv.run_json(cmd, False, env=env)


def outputs(kiln, path, inputs, precision, folder, env):
    import glob

    import numpy as np

    os.makedirs(folder, exist_ok=True)
    cmd = [kiln, "run", path, "--precision", precision, "--output-dir", folder]
    for a in inputs:
        cmd += ["--input", a]
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return {os.path.basename(f): np.load(f).astype(np.float64)
            for f in sorted(glob.glob(os.path.join(folder, "*.npy")))}


def agreement(ref, low):
    import numpy as np

    notes = []
    for name, a in ref.items():
        b = low[name]
        scale = float(np.abs(a).max()) or 1.0
        err = float(np.abs(a - b).max()) / scale
        cos = float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b) or 1.0))
        note = f"{name[:-4]}: max err {err:.1e} of max, cos {cos:.6f}"
        if a.size == 1000:
            t5a, t5b = set(np.argsort(a.ravel())[-5:]), set(np.argsort(b.ravel())[-5:])
            note += f", top-1 {'same' if a.argmax() == b.argmax() else 'DIFFERS'}, top-5 {len(t5a & t5b)}/5"
        notes.append(note)
    return "; ".join(notes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(bv.ROOT, "build", "tools", "kiln"))
    ap.add_argument("--models", default="resnet50,bert_base_s128:10")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--zoo", default=os.path.expanduser("~/.cache/kiln-zoo"))
    ap.add_argument("--doc")
    ap.add_argument("--section", default="precision")
    args = ap.parse_args()
    env = dict(os.environ)
    rows = []
    work = tempfile.mkdtemp(prefix="kiln-precision-")
    for spec in args.models.split(","):
        name, _, n = spec.partition(":")
        iters = int(n) if n else args.iterations
        path = model_path(args.zoo, name)
        folder = os.path.join(work, name)
        os.makedirs(folder, exist_ok=True)
        inputs = bv.zoo_inputs(path, folder) or bv.make_inputs(path, folder)
        acc = agreement(outputs(args.kiln, path, inputs, "fp32", os.path.join(folder, "fp32"), env),
                        outputs(args.kiln, path, inputs, args.precision,
                                os.path.join(folder, args.precision), env))
        for t in [int(x) for x in args.threads.split(",")]:
            f, p = [], []
            for _ in range(args.rounds):
                f.append(bench(args.kiln, path, inputs, t, "fp32", iters, env))
                p.append(bench(args.kiln, path, inputs, t, args.precision, iters, env))
            fm = statistics.median(r["latency_ms"]["p50"] for r in f)
            pm = statistics.median(r["latency_ms"]["p50"] for r in p)
            nodes = p[0].get("bf16_nodes"), p[0].get("product_nodes")
            rows.append((name, t, fm, pm, pm / fm, f"{nodes[0]}/{nodes[1]}", acc, p[0]["isa"]))
            print(f"{name} threads {t}: fp32 {fm:.3f} ms, {args.precision} {pm:.3f} ms "
                  f"({pm / fm:.2f}); {acc}", file=sys.stderr, flush=True)
    isa = rows[0][7] if rows else "?"
    lines = [f"Measured {time.strftime('%Y-%m-%d %H:%M')} with `tools/bench_precision.py "
             f"{' '.join(sys.argv[1:])}`; kiln's ISA: {isa}; {args.rounds} alternating rounds "
             f"(median of the p50s).", "",
             f"| model | threads | fp32 p50 ms | {args.precision} p50 ms | {args.precision}/fp32 "
             f"| nodes in {args.precision} | outputs, {args.precision} against fp32 |",
             "|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.2f} | {r[5]} | {r[6]} |")
    text = "\n".join(lines)
    print(text)
    if args.doc:
        bv.write_doc(args.doc, text, args.section)


if __name__ == "__main__":
    main()
