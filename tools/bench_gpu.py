#!/usr/bin/env python3
"""kiln on a GPU against PyTorch CUDA, in one call (docs/gpu.md): ResNet-50 and BERT-base
at batch 32 (sequence 128), random weights, exported to ONNX here, then timed by
`kiln bench --device opencl` at --precision fp32 and tf32 and by PyTorch eager on the
same GPU (TF32 off and on; p50 of --iterations after warm-up; and TF32 with the inputs
copied from host memory and the output back in every run, as kiln bench times kiln). Also checks kiln's
outputs against PyTorch's fp32 ones (TF32 off): tightly at fp32, loosely at tf32. With
--gemm N, also an N x N x N matrix product: kiln's kernel time (`kiln bench --profile`,
by OpenCL events: the inputs' uploads are not in it) against torch.matmul's, TFLOP/s.

Usage (on the GPU machine, ../shared/GPU.md: the kiln build and its libraries carried):
  python3 tools/bench_gpu.py --kiln .gpu/kiln --out /tmp/gpubench [--iterations 30]
                             [--gemm 8192] [--skip-models]
Prints markdown tables; needs torch with CUDA, torchvision, transformers, onnx.
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


# kiln check's tolerances per precision: fp32 as tight as float's summation order
# allows; tf32 (10-bit mantissas) as PyTorch's own TF32 differs from its fp32
TOLERANCES = {"fp32": ("1e-3", "1e-4"), "tf32": ("3e-2", "3e-2")}


def kiln_case(path, inputs, outputs):
    """A test-case folder beside the model with PyTorch's fp32 outputs (TF32 off) as
    expected; returns the model's new path and the folder."""
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
    return os.path.join(case, "model.onnx"), case


def kiln_check(kiln, case, precision, peer_err=0.0):
    """`kiln check --device opencl` at a precision; returns its result line ('pass ...')
    or, when it fails, the reason it prints on stderr. At tf32 the tolerance is the
    larger of TOLERANCES' and twice PyTorch's own TF32 error."""
    rtol, atol = TOLERANCES[precision]
    if precision == "tf32":
        atol = f"{max(float(atol), 2 * peer_err):.3g}"
    r = subprocess.run([kiln, "check", "--device", "opencl", "--precision", precision,
                        "--rtol", rtol, "--atol", atol, case], capture_output=True, text=True)
    if r.returncode == 0:  # 'pass CASE (...)'
        lines = r.stdout.strip().splitlines()
        return (lines[0] if lines else "no output")[:300]
    # 'FAIL CASE' on stdout; why on stderr, last: 'kiln check: CASE: REASON'
    lines = r.stderr.strip().splitlines()
    return (lines[-1] if lines else f"exit {r.returncode}, no reason printed")[:300]


def kiln_bench(kiln, path, iters, precision, profile=False):
    cmd = [kiln, "bench", path, "--device", "opencl", "--precision", precision,
           "--iterations", str(iters), "--warmup", "3", "--json"]
    r = subprocess.run(cmd + (["--profile"] if profile else []), capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()[-400:]
    return json.loads(r.stdout), None


def gemm(kiln, out, n, iters):
    """kiln's MatMul kernel time on [n, n] x [n, n] (profile) against torch.matmul."""
    import onnx
    from onnx import TensorProto, helper
    vi = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in "aby"]
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", vi[:2], vi[2:])
    path = os.path.join(out, f"matmul_{n}.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    flops = 2.0 * n ** 3
    rows = []
    for prec, tf32 in (("fp32", False), ("tf32", True)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        t = p50_torch(lambda: a @ b, iters)
        res, err = kiln_bench(kiln, path, max(3, iters // 3), prec, profile=True)
        k = None
        if res:
            k = sum(op["ms"] for op in res["profile"]["ops"] if op["op"] == "MatMul")
        rows.append((prec, k, t, err, res["profile"]["ops"][0]["kernels"] if res else ""))
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"\n{n} x {n} x {n} matrix product (kiln: the kernel's time by OpenCL events)\n")
    print("| precision | kiln ms | kiln TFLOP/s | kiln kernel | PyTorch ms | PyTorch TFLOP/s "
          "| kiln / PyTorch rate |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for prec, k, t, err, kern in rows:
        if k is None:
            print(f"| {prec} | failed: {err} | | | {t:.2f} | {flops / t / 1e9:.1f} | - |")
            continue
        print(f"| {prec} | {k:.2f} | {flops / k / 1e9:.1f} | {kern} | {t:.2f} | "
              f"{flops / t / 1e9:.1f} | {t / k:.2f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", default="/tmp/gpubench")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--gemm", type=int, default=0, help="also an N x N x N product")
    ap.add_argument("--skip-models", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dev = torch.cuda.get_device_name(0)
    rows = []
    if a.gemm:
        gemm(a.kiln, a.out, a.gemm, a.iterations)
    for name, model, inputs, path in ([] if a.skip_models else models(a.out)):
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
            # as kiln is timed: the inputs copied from host memory and the output back
            # in every run (kiln bench's latency includes both)
            def from_host():
                y = m(*(t.cuda() for t in inputs))
                return (y if isinstance(y, torch.Tensor) else y[0]).cpu()
            tf32_host = p50_torch(from_host, a.iterations)
            out_tf32 = m(*xs)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            out = m(*xs)
            out = out if isinstance(out, torch.Tensor) else out[0]
            out_tf32 = out_tf32 if isinstance(out_tf32, torch.Tensor) else out_tf32[0]
            torch_err = float((out_tf32 - out).abs().max())
        print(f"{name}: PyTorch's own TF32 output against its fp32 one: max abs diff "
              f"{torch_err:.3g} (max abs value {float(out.abs().max()):.3g})", flush=True)
        path, case = kiln_case(path, inputs, [out])
        ks = {}
        for prec in ("fp32", "tf32"):
            check = kiln_check(a.kiln, case, prec, torch_err)
            print(f"{name}: kiln check --device opencl --precision {prec}: {check}", flush=True)
            res, err = kiln_bench(a.kiln, path, a.iterations, prec)
            ks[prec] = (res["latency_ms"]["p50"] if res else None, res, err)
        rows.append((name, ks, fp32, tf32, tf32_host))
    if not rows:
        return
    print(f"GPU: {dev}; PyTorch {torch.__version__} eager, cuDNN benchmark on; p50 of "
          f"{a.iterations} runs\n")
    print("| model | kiln fp32 ms | kiln tf32 ms | PyTorch fp32 (TF32 off) ms | PyTorch TF32 ms "
          "| PyTorch TF32 from host ms | kiln / PyTorch, fp32 | kiln / PyTorch, TF32 "
          "| kiln / PyTorch TF32 from host | nodes on the device |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, ks, fp32, tf32, tf32_host in rows:
        k32, res, err = ks["fp32"]
        kt, rest, errt = ks["tf32"]
        cell = lambda v, e: f"{v:.2f}" if v is not None else f"failed: {e}"  # noqa: E731
        ratio = lambda v, p: f"{v / p:.2f}" if v is not None else "-"  # noqa: E731
        nodes = res or rest
        print(f"| {name} | {cell(k32, err)} | {cell(kt, errt)} | {fp32:.2f} | {tf32:.2f} | "
              f"{tf32_host:.2f} | {ratio(k32, fp32)} | {ratio(kt, tf32)} | "
              f"{ratio(kt, tf32_host)} | "
              f"{nodes.get('device_nodes') if nodes else '-'} of {nodes.get('nodes') if nodes else '-'} |")
    print("\nkiln's times include copying the inputs from host memory and the output back; "
          "PyTorch's TF32 column does not (its inputs stay on the device), its \"from host\" "
          "column does, as kiln's.")


if __name__ == "__main__":
    main()
