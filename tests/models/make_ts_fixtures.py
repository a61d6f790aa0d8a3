#!/usr/bin/env python3
"""Makes the TorchScript fixtures of tests/models/ts/ (kiln check runs them).

Each model is traced in eval mode (torch.jit.trace) and saved (torch.jit.save) as
tests/models/ts/<name>/model.pt beside test_data_set_0/input_K.pb and output_K.pb: the
example input and what PyTorch eager computes from it. The same module exported to ONNX
goes to tests/models/ts/<name>_onnx/model.onnx with the same test data, so that kiln's
optimized graphs of the two can be compared (kiln inspect -O2).

Models are hand-written (no torchvision) and tiny, so that all of them stay well under
2 MB:
  mlp          Linear, BatchNorm1d, GELU, Dropout, Linear
  cnn          conv/bn/relu, max pool, a residual block, avg pool, hardswish, adaptive
               avg pool, flatten, linear
  mobile       depthwise conv, ReLU6 (hardtanh), squeeze-excite (mean, hardsigmoid),
               SiLU, chunk, cat, a bias-free grouped conv
  transformer  torch.nn.TransformerEncoder, 2 layers, batch_first
  tiny_gpt     embedding, linear, chunk, view/transpose, causal scaled_dot_product_
               attention, layer_norm, int64 token input
  strided      non-contiguous and offset parameters (a transposed view, a slice)
  ops          a medley of ATen calls the others do not make (padding="same",
               ConvTranspose, GroupNorm, F.pad, dilated and ceil-mode pools, adaptive
               pools of sizes that do not divide, addmm, unbind/stack, clamp, rsub,
               div rounding modes, slicing with steps, reductions, two outputs); no
               ONNX twin, as the ONNX exporter has no form for some of them

Run with the project's venv:  .venv/bin/python tests/models/make_ts_fixtures.py
"""
import os
import shutil
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts")
OPSET = 18
TOL = 1e-4

warnings.filterwarnings("ignore")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.GELU(),
                                 nn.Dropout(0.1), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y += x
        return self.relu(y)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.block = Block(8)
        self.avg = nn.AvgPool2d(2)
        self.act = nn.Hardswish()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.pool(self.relu(self.bn(self.stem(x))))
        x = self.act(self.avg(self.block(x)))
        return self.fc(torch.flatten(self.gap(x), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.reduce = nn.Conv2d(c, c // 4, 1)
        self.expand = nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        s = F.hardsigmoid(self.expand(F.relu(self.reduce(s))))
        return x * s


class Mobile(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU6())
        self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
        self.se = SqueezeExcite(16)
        self.grouped = nn.Conv2d(8, 8, 1, groups=2, bias=False)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = self.se(F.silu(self.dw(self.stem(x))))
        a, b = torch.chunk(x, 2, dim=1)
        x = torch.cat([self.grouped(a), b], dim=1)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class TinyGPT(nn.Module):
    def __init__(self, vocab=32, d=16, heads=2, ctx=8):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(ctx, d) * 0.1)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        b, t = tokens.shape
        x = self.tok(tokens) + self.pos[:t]
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, -1).transpose(1, 2)
        k = k.view(b, t, self.heads, -1).transpose(1, 2)
        v = v.view(b, t, self.heads, -1).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, -1)
        x = x + self.proj(y)
        return self.out(F.silu(x))


class Strided(nn.Module):
    """Parameters that are views: torch.jit.save writes their storage, offset and
    strides, which kiln must gather into row-major order."""

    def __init__(self):
        super().__init__()
        base = torch.randn(6, 8)
        self.wt = nn.Parameter(base.t())          # [8, 6], strides (1, 8)
        storage = torch.randn(40)
        self.bias = nn.Parameter(storage[10:16])  # offset 10
        self.register_buffer("scale", torch.randn(4, 6)[1:3, ::2])  # [2, 3] strided

    def forward(self, x):
        y = x @ self.wt + self.bias
        return y[:, :3] * self.scale.sum(0)


class Ops(nn.Module):
    def __init__(self):
        super().__init__()
        self.same = nn.Conv2d(4, 6, 3, padding="same", dilation=2)
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)
        self.gn = nn.GroupNorm(2, 4)
        self.fc = nn.Linear(36, 8)
        self.w = nn.Parameter(torch.randn(8, 8) * 0.3)
        self.b = nn.Parameter(torch.randn(8))

    def forward(self, x):                                   # [B, 4, 6, 6]
        y = self.up(F.leaky_relu(self.same(x), 0.2))        # [B, 4, 12, 12]
        y = F.pad(self.gn(F.elu(y)), (1, 2, 0, 1), value=0.5)
        y = F.max_pool2d(y, 3, stride=2, dilation=2)        # [B, 4, 5, 6]
        y = F.avg_pool2d(y, 2, padding=1, ceil_mode=True, count_include_pad=False)
        y = F.adaptive_avg_pool2d(y, (3, 3)) + F.adaptive_max_pool2d(y, 1)
        z = torch.addmm(self.b, self.fc(torch.flatten(y, 1)), self.w, beta=0.5, alpha=2.0)
        s = torch.stack(torch.unbind(z.view(-1, 2, 4), 1), dim=-1)     # [B, 4, 2]
        s = torch.clamp(s, -1.5, 2.0) + torch.rsub(s, 1.0) * F.softplus(s)
        t = torch.div(s, 0.7, rounding_mode="floor") + torch.div(s, 0.3, rounding_mode="trunc")
        u = torch.sqrt(torch.abs(s) + 1).pow(3) + t.sum(-1, keepdim=True)
        v = u[:, ::2, :].narrow(2, 1, 1).squeeze(2).unsqueeze(0).expand(3, -1, -1)
        return F.log_softmax(u.flatten(1), -1), v.amax(0) - F.relu6(v).mean(0)


def transformer():
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


MODELS = [
    ("mlp", MLP, lambda: torch.randn(4, 8), {}),
    ("cnn", CNN, lambda: torch.randn(2, 3, 16, 16), {}),
    ("mobile", Mobile, lambda: torch.randn(2, 3, 16, 16), {}),
    ("transformer", transformer, lambda: torch.randn(2, 5, 16), {"check_trace": False}),
    ("tiny_gpt", TinyGPT, lambda: torch.randint(0, 32, (2, 6)), {}),
    ("strided", Strided, lambda: torch.randn(3, 8), {}),
    ("ops", Ops, lambda: torch.randn(2, 4, 6, 6), {}),
]
NO_ONNX = {"ops"}


def write_pb(arr, name, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(arr, name=name).SerializeToString())


def write_case(folder, in_names, inputs, outputs):
    case = os.path.join(folder, "test_data_set_0")
    os.makedirs(case, exist_ok=True)
    for k, (name, x) in enumerate(zip(in_names, inputs)):
        write_pb(x, name, os.path.join(case, f"input_{k}.pb"))
    for k, y in enumerate(outputs):
        write_pb(y, f"output_{k}", os.path.join(case, f"output_{k}.pb"))


def export_onnx(model, x, in_name, path):
    """Exports with dim 0 dynamic ("batch"), as kiln declares the .pt's inputs."""
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=OPSET,
                      input_names=[in_name], output_names=["output_0"],
                      dynamic_axes={in_name: {0: "batch"}, "output_0": {0: "batch"}})
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    m.producer_version = ""
    onnx.save(m, path)
    return m


def check_ort(m, in_name, x, want, name):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {in_name: x})[0]
    err = float(np.max(np.abs(got - want)))
    if got.shape != want.shape or err > TOL:
        sys.exit(f"{name}: onnxruntime differs from PyTorch by {err}")


def emit(name, make, example, trace_kw):
    torch.manual_seed(len(name))
    model = make().eval()
    x = example()
    with torch.no_grad():
        out = model(x)
    outs = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
    traced = torch.jit.trace(model, (x,), **trace_kw)
    folder = os.path.join(HERE, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    traced.save(os.path.join(folder, "model.pt"))
    with torch.no_grad():  # the saved trace must compute what eager does
        again = traced(x)
    again = again if isinstance(again, tuple) else (again,)
    err = max(float(np.max(np.abs(a.numpy() - w))) for a, w in zip(again, outs))
    if err > TOL:
        sys.exit(f"{name}: the trace differs from eager PyTorch by {err}")
    in_name = traced.forward.schema.arguments[1].name
    write_case(folder, [in_name], [x.numpy()], outs)
    size = os.path.getsize(os.path.join(folder, "model.pt"))
    print(f"{name}: {size} bytes, outputs {[list(o.shape) for o in outs]}")
    if name in NO_ONNX:
        return
    want = outs[0]
    onnx_folder = folder + "_onnx"
    shutil.rmtree(onnx_folder, ignore_errors=True)
    os.makedirs(onnx_folder)
    m = export_onnx(model, x, in_name, os.path.join(onnx_folder, "model.onnx"))
    check_ort(m, in_name, x.numpy(), want, name)
    write_case(onnx_folder, [in_name], [x.numpy()], [want])


def main():
    os.makedirs(HERE, exist_ok=True)
    torch.set_grad_enabled(True)  # TransformerEncoder's fast path only runs without grad
    for name, make, example, trace_kw in MODELS:
        emit(name, make, example, trace_kw)
    with open(os.path.join(HERE, "VERSIONS.txt"), "w") as f:
        f.write(f"torch {torch.__version__}\nonnx {onnx.__version__}\nopset {OPSET}\n")


if __name__ == "__main__":
    main()
