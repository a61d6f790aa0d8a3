#!/usr/bin/env python3
"""kiln on a GPU against PyTorch CUDA, in one call (docs/gpu.md): ResNet-50 and BERT-base
at batch 32 (sequence 128), random weights, exported to ONNX here, then timed by
`kiln bench --device opencl` and by PyTorch eager on the same GPU (fp32 with TF32 off and
on; p50 of --iterations after warm-up). Also checks kiln's outputs against PyTorch's.

Usage (on the GPU machine, ../shared/GPU.md: the kiln build and its libraries carried):
  python3 tools/bench_gpu.py --kiln .gpu/kiln --out /tmp/gpubench [--iterations 30]
Prints a markdown table; needs torch with CUDA, torchvision, transformers, onnx.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch


def p50_torch(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def models(out):
    import torchvision
    made = []
    torch.manual_seed(0)
    r50 = torchvision.models.resnet50().eval()
    x = torch.randn(32, 3, 224, 224)
    path = os.path.join(out, "resnet50_b32.onnx")
    torch.onnx.export(r50, (x,), path, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamo=False)
    made.append(("resnet50 b32", r50, (x,), path))
    try:
        from transformers import BertConfig, BertModel
        cfg = BertConfig(attn_implementation="eager")
        class Hidden(torch.nn.Module):  # the last hidden state alone
            def __init__(self):
                super().__init__()
                self.bert = BertModel(cfg)

            def forward(self, ids, mask):
                return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

        bert = Hidden().eval()
        ids = torch.randint(0, cfg.vocab_size, (32, 128))
        mask = torch.ones(32, 128, dtype=torch.long)
        path = os.path.join(out, "bert_base_b32.onnx")
        torch.onnx.export(bert, (ids, mask), path, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False)
        made.append(("bert-base b32 s128", bert, (ids, mask), path))
    except Exception as e:  # noqa: BLE001 - reported, the CNN still runs
        print(f"bert: not exported ({e})", file=sys.stderr)
    return made


def kiln_check(kiln, path, inputs, outputs):
    """A test-case folder beside the model (PyTorch's fp32 outputs, TF32 off, as
    expected) checked by `kiln check --device opencl`; returns its last line."""
    from onnx import numpy_helper
    case = os.path.splitext(path)[0]
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    os.replace(path, os.path.join(case, "model.onnx"))
    for i, t in enumerate(inputs):
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.cpu().numpy()).SerializeToString())
    for i, t in enumerate(outputs):
        with open(os.path.join(data, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.cpu().numpy()).SerializeToString())
    r = subprocess.run([kiln, "check", "--device", "opencl", "--rtol", "1e-3", "--atol", "1e-4",
                        case], capture_output=True, text=True)
    lines = (r.stdout + r.stderr).strip().splitlines()
    return os.path.join(case, "model.onnx"), (lines[0] if lines else "no output")[:300]


def kiln_bench(kiln, path, iters):
    r = subprocess.run([kiln, "bench", path, "--device", "opencl", "--iterations", str(iters),
                        "--warmup", "3", "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()[-400:]
    return json.loads(r.stdout), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", default="/tmp/gpubench")
    ap.add_argument("--iterations", type=int, default=30)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dev = torch.cuda.get_device_name(0)
    rows = []
    for name, model, inputs, path in models(a.out):
        m = model.cuda()
        xs = tuple(t.cuda() for t in inputs)
        with torch.no_grad():
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            fp32 = p50_torch(lambda: m(*xs), a.iterations)
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            tf32 = p50_torch(lambda: m(*xs), a.iterations)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            out = m(*xs)
            out = out if isinstance(out, torch.Tensor) else out[0]
        path, check = kiln_check(a.kiln, path, inputs, [out])
        print(f"{name}: kiln check --device opencl: {check}", flush=True)
        res, err = kiln_bench(a.kiln, path, a.iterations)
        k = res["latency_ms"]["p50"] if res else None
        rows.append((name, k, fp32, tf32, res, err))
    print(f"GPU: {dev}; PyTorch {torch.__version__} eager, cuDNN benchmark on; p50 of "
          f"{a.iterations} runs\n")
    print("| model | kiln --device opencl p50 ms | PyTorch fp32 (TF32 off) ms | PyTorch TF32 ms "
          "| kiln / PyTorch fp32 | nodes on the device |")
    print("|---|---:|---:|---:|---:|---|")
    for name, k, fp32, tf32, res, err in rows:
        if k is None:
            print(f"| {name} | failed: {err} | {fp32:.2f} | {tf32:.2f} | - | - |")
            continue
        print(f"| {name} | {k:.2f} | {fp32:.2f} | {tf32:.2f} | {k / fp32:.1f} | "
              f"{res.get('device_nodes')} of {res.get('nodes')} |")


if __name__ == "__main__":
    main()
