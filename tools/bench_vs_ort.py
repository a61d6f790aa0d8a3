#!/usr/bin/env python3
"""kiln against onnxruntime on the same model files, inputs and thread counts.

For every model and thread count, runs `kiln bench --json` and an onnxruntime worker
(this script with --ort-worker), each in its own subprocess, alternately, ROUNDS times;
reports the median of their p50 latencies, the ratio kiln/onnxruntime, each process's
peak resident memory (VmHWM, ru_maxrss of the program alone), and whether the outputs agree (`kiln run` against
onnxruntime on the same inputs; rtol 1e-3, atol 1e-4, or, for the outputs of a QDQ model's
last DequantizeLinear, within 10 of their quantization steps, the cell saying how many). Writes the table into docs/benchmarks.md (between the
`bench:begin` and `bench:end` markers) and a chart next to it.

For the models that came from torch (the zoo's, rebuilt as tools/export_zoo.py builds
them, and BERT s128, rebuilt as exported here: the same weights) it also runs PyTorch
eager and torch.compile workers (--torch-worker; same inputs, torch.set_num_threads to
the same count) in the first --torch-rounds rounds, alternating with the others; a
worker that fails or runs past --torch-timeout seconds (torch.compile's compilation
included) is reported as failed with the reason. --no-torch leaves them out.

Models: the bundled digits models, ResNet-50, MobileNetV2 and EfficientNet-B0 from
the zoo cache (tools/export_zoo.py exports them when missing), and BERT-base at
sequence length 128 (exported here, random weights, into ZOO/bench/). Nothing is
downloaded. --models also takes any other model folder of the zoo cache (ZOO/NAME with
model.onnx and test_data_set_0/input_*.pb, as tools/export_zoo.py writes them; its
--list names them): those run on the folder's test_data_set_0 inputs. NAME:N runs that
model N iterations instead of --iterations (e.g. vgg16:10 for the large ones).

The table goes between the markers of --doc (default docs/benchmarks.md): `bench:begin`
and `bench:end`, or, with --section NAME, `bench:NAME:begin` and `bench:NAME:end`
(added at the end of the doc when missing), so that another table (another doc, or
another section of the same one) leaves the main one alone.

Usage:
    .venv/bin/python tools/bench_vs_ort.py                      everything, 1 and 2 threads
    .venv/bin/python tools/bench_vs_ort.py --models resnet50 --threads 1 --rounds 3
    .venv/bin/python tools/bench_vs_ort.py --realtime           SCHED_FIFO (chrt -f 50)
    .venv/bin/python tools/bench_vs_ort.py --models squeezenet1_0,vgg16:10 --threads 1 \\
        --no-torch --doc docs/benchmarks_zoo.md --section zoo --chart docs/benchmarks_zoo.svg

--load N starts N busy loops (`sh -c 'while :; do :; done'`, at normal priority) before
the first measurement and stops them after the last: the models then share the cores
with other work, as on a busy server (docs/benchmarks.md, "Threads under load").
--kiln-env VAR=VALUE (repeatable) sets an environment variable for kiln's runs only,
e.g. GOMP_SPINCOUNT=300000 for libgomp's own default wait instead of kiln's.

--realtime runs every measured process under `chrt -f 50`: on a machine shared with
other work, timings are otherwise mostly the other work's. It needs CAP_SYS_NICE.
"""

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


# ---- models ----


def zoo_model(zoo, name):
    """A model of tools/export_zoo.py, exported when missing."""
    path = os.path.join(zoo, name, "model.onnx")
    if not os.path.exists(path):
        subprocess.run([PY, os.path.join(ROOT, "tools", "export_zoo.py"), "--out", zoo,
                        "--only", name], check=True)
    return path


def bert_s128(zoo):
    """BERT-base (bert-base-uncased's shape, random weights) at sequence length 128."""
    path = os.path.join(zoo, "bench", "bert_base_s128", "model.onnx")
    if os.path.exists(path):
        return path
    import torch
    from transformers import BertConfig, BertModel

    class Positional(torch.nn.Module):  # the exporter passes inputs positionally
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids, mask, types):
            out = self.model(input_ids=ids, attention_mask=mask, token_type_ids=types,
                             return_dict=False)
            return out[0], out[1]

    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.manual_seed(0)
    cfg = BertConfig()
    cfg._attn_implementation = "eager"  # the attention a plain export writes: MatMul, Softmax
    model = Positional(BertModel(cfg).eval()).eval()
    ids = torch.randint(0, 30522, (1, 128))
    args = (ids, torch.ones(1, 128, dtype=torch.int64), torch.zeros(1, 128, dtype=torch.int64))
    tmp = path + ".tmp"
    torch.onnx.export(model, args, tmp, opset_version=17, dynamo=False,
                      input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state", "pooler_output"])
    os.replace(tmp, path)
    return path


# The models built from torch modules that torch_model rebuilds.
TORCH_MODELS = {"resnet50", "mobilenet_v2", "efficientnet_b0", "bert_base_s128"}

MODELS = {
    "digits_cnn": lambda zoo: os.path.join(ROOT, "models", "digits_cnn", "model.onnx"),
    "digits_mlp": lambda zoo: os.path.join(ROOT, "models", "digits_mlp", "model.onnx"),
    "resnet50": lambda zoo: zoo_model(zoo, "resnet50"),
    "mobilenet_v2": lambda zoo: zoo_model(zoo, "mobilenet_v2"),
    "efficientnet_b0": lambda zoo: zoo_model(zoo, "efficientnet_b0"),
    "bert_base_s128": bert_s128,
}


def zoo_folder_model(zoo, name):
    """Any other model folder of the zoo cache: ZOO/NAME/model.onnx."""
    path = os.path.join(zoo, name, "model.onnx")
    if not os.path.exists(path):
        sys.exit(f"bench_vs_ort: unknown model {name!r}: neither one of {', '.join(MODELS)} "
                 f"nor a zoo folder with model.onnx ({path} not found)")
    return path


def zoo_inputs(path, folder):
    """The zoo folder's test_data_set_0/input_*.pb as .npy files (NAME=FILE), matched to
    the model's inputs by the tensor's name, else by position; None when it has none."""
    import glob

    import onnx
    from onnx import numpy_helper
    import numpy as np

    files = sorted(glob.glob(os.path.join(os.path.dirname(path), "test_data_set_0", "input_*.pb")),
                   key=lambda f: int(re.findall(r"\d+", os.path.basename(f))[0]))
    if not files:
        return None
    model = onnx.load(path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    args = []
    for i, f in enumerate(files):
        t = onnx.load_tensor(f)
        name = t.name if t.name in names else names[i]
        file = os.path.join(folder, re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".npy")
        np.save(file, numpy_helper.to_array(t))
        args.append(f"{name}={file}")
    return args


def make_inputs(path, folder):
    """Deterministic inputs for the model's inputs, as .npy files; returns NAME=FILE."""
    import numpy as np
    import onnx

    model = onnx.load(path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(1)
    args = []
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
        if t.elem_type == onnx.TensorProto.INT64:
            if "mask" in inp.name:
                x = np.ones(shape, np.int64)
            elif "type" in inp.name:
                x = np.zeros(shape, np.int64)
            else:
                x = rng.integers(0, 1000, shape).astype(np.int64)
        else:
            x = rng.standard_normal(shape).astype(np.float32)
        file = os.path.join(folder, re.sub(r"[^A-Za-z0-9_.-]", "_", inp.name) + ".npy")
        np.save(file, x)
        args.append(f"{inp.name}={file}")
    return args


# ---- the onnxruntime side (run in its own process) ----


def peak_rss_mb():
    """VmHWM: the peak resident memory since exec (ru_maxrss would include the memory of
    the script that started us, which Linux carries over exec), as kiln bench reports."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ort_worker(argv):
    """--ort-worker MODEL THREADS ITERATIONS WARMUP OUTDIR NAME=FILE...: one JSON line."""
    import numpy as np
    import onnxruntime as ort

    path, threads, iters, warmup, outdir = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = {k: np.load(v) for k, v in (a.split("=", 1) for a in argv[5:])}
    for _ in range(max(warmup, 1)):
        outs = sess.run(None, feeds)
    lat = []
    for _ in range(iters):
        t = time.perf_counter()
        sess.run(None, feeds)
        lat.append((time.perf_counter() - t) * 1e3)
    for o, value in zip(sess.get_outputs(), outs):
        np.save(os.path.join(outdir, re.sub(r"[^A-Za-z0-9_.-]", "_", o.name) + ".npy"), value)
    print(json.dumps({"p50": statistics.median(lat), "peak_rss_mb": peak_rss_mb()}))


# ---- the PyTorch side (run in its own process) ----


def torch_model(name):
    """The torch module an ONNX file of ours was exported from, with the same weights,
    taking the ONNX inputs positionally: the zoo's models are rebuilt the way
    tools/export_zoo.py builds them (seeded random weights, calibrated), BERT s128 the
    way bert_s128 above does. None for the bundled digits models (not from torch)."""
    import torch

    if name == "bert_base_s128":
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        cfg = BertConfig()
        cfg._attn_implementation = "eager"
        model = BertModel(cfg).eval()

        class Positional(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, ids, mask, types):
                return self.model(input_ids=ids, attention_mask=mask, token_type_ids=types,
                                  return_dict=False)

        return Positional().eval()
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import export_zoo

    spec = export_zoo.zoo().get(name)
    if spec is None:
        return None
    _, wrapped, _ = export_zoo.prepare(name, spec)
    return wrapped.eval()


def torch_worker(argv):
    """--torch-worker NAME MODE THREADS ITERATIONS WARMUP OUTDIR NAME=FILE...: one JSON
    line. MODE is eager or compile (torch.compile, default inductor backend); the
    inputs are passed in the ONNX model's input order."""
    import numpy as np
    import torch

    name, mode, threads, iters, warmup, outdir = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4]), argv[5]
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    model = torch_model(name)
    args = tuple(torch.from_numpy(np.load(a.split("=", 1)[1])) for a in argv[6:])
    compile_s = 0.0
    with torch.inference_mode():
        if mode == "compile":
            t = time.perf_counter()
            model = torch.compile(model)
            outs = model(*args)  # compiles
            compile_s = time.perf_counter() - t
        for _ in range(max(warmup, 1)):
            outs = model(*args)
        lat = []
        for _ in range(iters):
            t = time.perf_counter()
            model(*args)
            lat.append((time.perf_counter() - t) * 1e3)
    outs = [outs] if isinstance(outs, torch.Tensor) else list(outs)
    for i, o in enumerate(outs):
        np.save(os.path.join(outdir, f"torch_{mode}_{i}.npy"), o.detach().numpy())
    print(json.dumps({"p50": statistics.median(lat), "peak_rss_mb": peak_rss_mb(),
                      "compile_s": compile_s}))


# ---- measuring ----


def run_json(cmd, realtime, timeout=None, env=None):
    if realtime:
        cmd = ["chrt", "-f", "50"] + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout,
                         env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def try_torch(cmd, realtime, timeout):
    """A torch worker's result, or {"error": why} when it fails or runs past timeout."""
    try:
        return run_json(cmd, realtime, timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout} s"}
    except subprocess.CalledProcessError as e:
        last = (e.stderr or "").strip().splitlines()
        return {"error": last[-1][:200] if last else f"exit {e.returncode}"}


def measure(kiln, path, inputs, threads, args, outdir, name=None):
    """Alternating kiln / onnxruntime (/ PyTorch eager / torch.compile, for models from
    torch) runs; medians of their p50s, max peak RSS."""
    kiln_cmd = [kiln, "bench", path, "-O2", "--threads", str(threads), "--iterations",
                str(args.iterations), "--warmup", str(args.warmup), "--json"]
    for a in inputs:
        kiln_cmd += ["--input", a]
    ort_cmd = [PY, os.path.abspath(__file__), "--ort-worker", path, str(threads),
               str(args.iterations), str(args.warmup), outdir] + inputs
    modes = [] if args.no_torch or name not in TORCH_MODELS else ["eager", "compile"]
    torch_dir = os.path.join(os.path.dirname(outdir), "torch_out")
    os.makedirs(torch_dir, exist_ok=True)
    torch_cmd = {m: [PY, os.path.abspath(__file__), "--torch-worker", name, m, str(threads),
                     str(args.iterations), str(args.warmup), torch_dir] + inputs for m in modes}
    k, o, t = [], [], {m: [] for m in modes}
    for rnd in range(args.rounds):
        k.append(run_json(kiln_cmd, args.realtime, env=kiln_env(args)))
        o.append(run_json(ort_cmd, args.realtime))
        for m in modes if rnd < args.torch_rounds else []:
            if all("error" not in r for r in t[m]):  # a failure is not tried again
                t[m].append(try_torch(torch_cmd[m], args.realtime, args.torch_timeout))
    res = {"kiln_p50": statistics.median(r["latency_ms"]["p50"] for r in k),
           "ort_p50": statistics.median(r["p50"] for r in o),
           "kiln_rss": max(r["peak_rss_mb"] for r in k),
           "ort_rss": max(r["peak_rss_mb"] for r in o),
           "isa": k[0].get("isa", "?"), "wait": k[0].get("thread_wait", "?")}
    for m in modes:
        bad = [r["error"] for r in t[m] if "error" in r]
        res[m] = {"error": bad[0]} if bad else {
            "p50": statistics.median(r["p50"] for r in t[m]),
            "rss": max(r["peak_rss_mb"] for r in t[m]),
            "compile_s": max(r["compile_s"] for r in t[m]),
            "diff": torch_agreement(outdir, torch_dir, m)}
    return res


def kiln_env(args):
    """The environment of kiln's runs: this one plus --kiln-env."""
    env = dict(os.environ)
    for kv in args.kiln_env:
        var, eq, val = kv.partition("=")
        if not eq or not var:
            sys.exit(f"bench_vs_ort: --kiln-env {kv!r}: expected VAR=VALUE")
        env[var] = val
    return env


def torch_agreement(ort_dir, torch_dir, mode):
    """Largest absolute difference between torch's outputs and onnxruntime's (onnxruntime's
    are saved by output name, torch's by position: matched by shape)."""
    import numpy as np

    ort = [np.load(os.path.join(ort_dir, f)) for f in sorted(os.listdir(ort_dir))]
    mine = sorted(f for f in os.listdir(torch_dir) if f.startswith(f"torch_{mode}_"))
    worst = 0.0
    for f in mine:
        got = np.load(os.path.join(torch_dir, f))
        same = [w for w in ort if w.shape == got.shape]
        if not same:
            return float("inf")
        worst = max(worst, min(float(np.max(np.abs(w - got), initial=0.0)) for w in same))
    return worst


QDQ_STEPS = 10  # the most output steps a quantized model's outputs may differ by


def output_steps(path):
    """{output name: its quantization step} for the graph outputs that a
    DequantizeLinear of one scale makes (a QDQ model's): those agree within QDQ_STEPS
    steps, since int8 runtimes round the int32 sums apart (onnxruntime's own int8 and
    float QDQ runs of the zoo's QDQ models differ by up to 8)."""
    import onnx
    from onnx import numpy_helper

    g = onnx.load(path, load_external_data=False).graph
    inits = {i.name: i for i in g.initializer}
    made = {o: n for n in g.node for o in n.output}
    steps = {}
    for o in g.output:
        n = made.get(o.name)
        if n is None or n.op_type != "DequantizeLinear" or n.input[1] not in inits:
            continue
        scale = numpy_helper.to_array(inits[n.input[1]])
        if scale.size == 1:
            steps[re.sub(r"[^A-Za-z0-9_.-]", "_", o.name)] = float(scale.reshape(-1)[0])
    return steps


def agreement(kiln, path, inputs, ort_dir, work):
    """Largest absolute difference between kiln's and onnxruntime's outputs, and
    whether every output is within rtol 1e-3, atol 1e-4 (a quantized output: within
    QDQ_STEPS of its steps); the largest difference in steps, or None."""
    import numpy as np

    kdir = os.path.join(work, "kiln_out")
    os.makedirs(kdir, exist_ok=True)
    cmd = [kiln, "run", path, "-O2", "--output-dir", kdir]
    for a in inputs:
        cmd += ["--input", a]
    subprocess.run(cmd, check=True, capture_output=True)
    worst, ok, worst_steps = 0.0, True, None
    steps = output_steps(path)
    for f in sorted(os.listdir(ort_dir)):
        want, got = np.load(os.path.join(ort_dir, f)), np.load(os.path.join(kdir, f))
        if want.shape != got.shape:
            return float("inf"), False, None
        if want.dtype.kind == "f":
            d = float(np.max(np.abs(want - got), initial=0.0))
            worst = max(worst, d)
            step = steps.get(f[:-4] if f.endswith(".npy") else f)
            if step:
                worst_steps = max(worst_steps or 0.0, d / step)
                ok &= d / step <= QDQ_STEPS + 0.01
            else:
                ok &= bool(np.allclose(got, want, rtol=1e-3, atol=1e-4))
        else:
            ok &= bool(np.array_equal(want, got))
    return worst, ok, worst_steps


def agree_cell(r):
    steps = f", {r['steps']:.0f} steps" if r.get("steps") is not None else ""
    return f"{'yes' if r['ok'] else 'NO'} ({r['diff']:.1e}{steps})"


# ---- reporting ----


def torch_cell(r, mode):
    t = r.get(mode)
    if t is None:
        return "-"
    if "error" in t:
        return f"failed ({t['error']})"
    return f"{t['p50']:.3f} ({r['kiln_p50'] / t['p50']:.2f})"


def table(rows):
    lines = ["| model | threads | kiln p50 ms | onnxruntime p50 ms | kiln/ort | kiln peak RSS MiB "
             "| ort peak RSS MiB | outputs agree (max abs diff) | torch eager p50 ms (kiln/it) "
             "| torch.compile p50 ms (kiln/it) |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['threads']} | {r['kiln_p50']:.3f} | {r['ort_p50']:.3f} "
                     f"| {r['kiln_p50'] / r['ort_p50']:.2f} | {r['kiln_rss']:.0f} | {r['ort_rss']:.0f} "
                     f"| {agree_cell(r)} | {torch_cell(r, 'eager')} "
                     f"| {torch_cell(r, 'compile')} |")
    if not any(m in r for r in rows for m in ("eager", "compile")):  # no torch columns to show
        lines = [line.rsplit("|", 3)[0] + "|" for line in lines]
    return "\n".join(lines) + geomeans(rows)


def geomeans(rows):
    """The geometric mean of kiln/onnxruntime per thread count, over the models measured."""
    by = {}
    for r in rows:
        by.setdefault(r["threads"], []).append(math.log(r["kiln_p50"] / r["ort_p50"]))
    cells = [f"{t} thread{'s' if t > 1 else ''} {math.exp(sum(v) / len(v)):.2f}"
             for t, v in sorted(by.items())]
    return f"\n\nGeometric mean of kiln/onnxruntime over the {len(rows) // max(len(by), 1)} models: " + \
        ", ".join(cells) + "."


def torch_notes(rows):
    """What the torch columns measured, beyond the table: peak memory, compile time and
    agreement with onnxruntime."""
    notes = []
    for r in rows:
        for m in ("eager", "compile"):
            t = r.get(m)
            if t and "error" not in t:
                notes.append(f"{r['model']} {r['threads']}t torch {m}: peak RSS {t['rss']:.0f} MiB"
                             + (f", compile {t['compile_s']:.0f} s" if m == "compile" else "")
                             + f", max abs diff to onnxruntime {t['diff']:.1e}")
    return "\n".join(f"- {n}" for n in notes)


def chart(rows, path):
    """Draws the ratios into path; False (with a word on stderr) without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print(f"bench_vs_ort: no chart drawn ({path}): matplotlib is not installed",
              file=sys.stderr)
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['model']}\n{r['threads']}t" for r in rows]
    ratios = [r["kiln_p50"] / r["ort_p50"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows)), 4))
    ax.bar(range(len(rows)), ratios, color=["#3a7" if x <= 1 else "#c53" for x in ratios])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(0.8, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("p50 latency, kiln / onnxruntime")
    ax.set_title("kiln vs onnxruntime (lower is faster for kiln; dashed: 0.8 target)")
    fig.tight_layout()
    fig.savefig(path)
    return True


def write_doc(doc, text, section=""):
    begin, end = (f"<!-- bench:{section}:begin -->", f"<!-- bench:{section}:end -->") if section else (BEGIN, END)
    old = open(doc).read() if os.path.exists(doc) else f"# Benchmarks\n\n{begin}\n{end}\n"
    if begin not in old:
        old += f"\n{begin}\n{end}\n"
    head, rest = old.split(begin, 1)
    tail = rest.split(end, 1)[1] if end in rest else ""
    with open(doc, "w") as f:
        f.write(f"{head}{begin}\n{text}\n{end}{tail}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--ort-worker":
        return ort_worker(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-worker":
        return torch_worker(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "tools", "kiln"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs of each (default 3)")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--zoo", default=os.path.expanduser("~/.cache/kiln-zoo"))
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--chart", default=os.path.join(ROOT, "docs", "benchmarks.svg"))
    ap.add_argument("--realtime", action="store_true", help="run measurements under chrt -f 50")
    ap.add_argument("--load", type=int, default=0,
                    help="busy loops running beside the measurements (default 0)")
    ap.add_argument("--kiln-env", action="append", default=[], metavar="VAR=VALUE",
                    help="environment variable for kiln's runs only (repeatable)")
    ap.add_argument("--no-torch", action="store_true", help="leave out the PyTorch columns")
    ap.add_argument("--torch-rounds", type=int, default=1,
                    help="rounds that also run the torch workers, the first ones (default 1)")
    ap.add_argument("--torch-timeout", type=int, default=600,
                    help="seconds a torch worker (torch.compile's included) may take (default 600)")
    ap.add_argument("--no-doc", action="store_true",
                    help="print the rows only; write neither --doc nor --chart (for re-running "
                         "a few models without replacing a page's table)")
    ap.add_argument("--section", default="",
                    help="write between the markers bench:SECTION:begin/end of --doc instead of "
                         "bench:begin/end")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    rows = []
    kiln_env(args)  # a malformed --kiln-env stops here, before any measurement
    busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(args.load)]
    try:
        measure_all(args, rows)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    if args.no_doc:
        return
    isa = rows[0]["isa"] if rows else "?"
    wait = rows[0].get("wait", "?") if rows else "?"
    note = (f"Measured {time.strftime('%Y-%m-%d %H:%M')} with `{' '.join(['tools/bench_vs_ort.py'] + sys.argv[1:])}`"
            f"; kiln's ISA: {isa}; kiln's thread wait: {wait}; onnxruntime "
            f"{subprocess.run([PY, '-c', 'import onnxruntime; print(onnxruntime.__version__)'], capture_output=True, text=True).stdout.strip()}"
            f"; {args.rounds} alternating rounds of {args.iterations} runs each"
            f"{' (NAME:N: N for that model)' if ':' in args.models else ''} (median of the p50s)"
            f"{'' if args.no_torch else '; PyTorch eager and torch.compile in the first ' + ('round' if args.torch_rounds == 1 else f'{args.torch_rounds} rounds')}"
            f"{'; every process under chrt -f 50' if args.realtime else ''}"
            f"{f'; {args.load} busy loop(s) running beside every measurement' if args.load else ''}"
            f"; load average at the start: {load:.1f}.")
    notes = torch_notes(rows)
    drawn = chart(rows, args.chart)
    # the doc links the chart only when it was drawn next to it
    beside = os.path.dirname(os.path.abspath(args.chart)) == os.path.dirname(os.path.abspath(args.doc))
    write_doc(args.doc, note + "\n\n" + table(rows) + (f"\n\n{notes}" if notes else "")
              + (f"\n\n![kiln / onnxruntime]({os.path.basename(args.chart)})"
                 if drawn and beside else ""), args.section)


def measure_all(args, rows):
    """Every model at every thread count, appended to rows as it is measured."""
    with tempfile.TemporaryDirectory() as work:
        for spec in args.models.split(","):
            name, _, iters = spec.partition(":")
            margs = argparse.Namespace(**{**vars(args), "iterations": int(iters)}) if iters else args
            path = MODELS[name](args.zoo) if name in MODELS else zoo_folder_model(args.zoo, name)
            mdir = os.path.join(work, name)
            os.makedirs(os.path.join(mdir, "ort_out"))
            inputs = (None if name in MODELS else zoo_inputs(path, mdir)) or make_inputs(path, mdir)
            for t in (int(x) for x in args.threads.split(",")):
                r = measure(args.kiln, path, inputs, t, margs, os.path.join(mdir, "ort_out"), name)
                r["diff"], r["ok"], r["steps"] = agreement(args.kiln, path, inputs,
                                                           os.path.join(mdir, "ort_out"), mdir)
                r.update(model=name, threads=t)
                rows.append(r)
                print(f"{name} threads {t}: kiln {r['kiln_p50']:.3f} ms, ort {r['ort_p50']:.3f} ms, "
                      f"ratio {r['kiln_p50'] / r['ort_p50']:.2f}, rss {r['kiln_rss']:.0f} / "
                      f"{r['ort_rss']:.0f} MiB, agree {agree_cell(r)}, torch eager "
                      f"{torch_cell(r, 'eager')}, compile {torch_cell(r, 'compile')}", flush=True)


if __name__ == "__main__":
    main()
