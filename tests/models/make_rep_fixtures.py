#!/usr/bin/env python3
"""tests/models/rep_blocks: the training-time blocks of RepVGG, MobileOne and HGNetV2
that kiln's passes rewrite (docs/passes.md: merge_convs, fold_scale_bias through an
activation, and the channels-last Pad and stride-1 pool between convolutions), in one
small PyTorch model exported by torch.onnx (TorchScript exporter, opset 17, the batch a
dynamic axis as users export it: the models suite's --fast-only checks at -O3 then
cover a symbolic batch, which once sent residual convolutions to the reference kernel):

    x [2, 3, 32, 30]
    stem     Conv 3x3 s2 + BN + ReLU, then a learnable affine (y * a + b, scalars)
    hg stem  Pad (0, 1, 0, 1) -> MaxPool 2x2 s1 ceil, beside Conv 2x2 + BN + ReLU + affine
             of the same padded map; Concat
    rep      RepVGG: Conv 3x3 + BN, Conv 1x1 + BN, BN of the input; summed; ReLU
    rep s2   the same with stride 2 (no identity branch), 16 -> 24 channels
    mob dw   MobileOne depthwise: Conv 1x1 dw + BN, two Conv 3x3 dw + BN, BN of the input
    mob pw   MobileOne pointwise: two Conv 1x1 + BN, BN of the input
    mixer    FastViT's RepMixer: x + ls * (Conv 3x3 dw + BN (x) - BN(x)), ls per channel
    basic    ResNet's basic block: x + BN(Conv 3x3(ReLU(BN(Conv 3x3(x))))), then ReLU (a
             residual Sum kiln fuses into the second convolution)
    head     global average pool, Linear (24 -> 10)

Weights random (seeded), BatchNorm statistics and affine parameters random too, so that
no branch is an identity; eval mode. The expected outputs are PyTorch's float32 ones;
float64_outputs/ holds the model run in float64 (kiln check's fallback). Checked at
-O0, -O2 and -O3 by tests/meson.build's models suite: -O2 merges each block into one
convolution and folds the affine into the stem's bounds.

    .venv/bin/python tests/models/make_rep_fixtures.py
"""
import os

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "rep_blocks")


def bn(c):
    b = nn.BatchNorm2d(c)
    with torch.no_grad():
        b.weight.uniform_(0.5, 1.5)
        b.bias.uniform_(-0.5, 0.5)
        b.running_mean.uniform_(-0.3, 0.3)
        b.running_var.uniform_(0.5, 2.0)
    return b


def conv_bn(cin, cout, k, s=1, p=0, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, p, groups=groups, bias=False), bn(cout))


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.tensor([0.8]))
        self.b = nn.Parameter(torch.tensor([-0.2]))

    def forward(self, x):
        return x * self.a + self.b


class Rep(nn.Module):
    """RepVGG's block: 3x3 + 1x1 (+ identity BN where the shapes allow)."""

    def __init__(self, cin, cout, s=1, groups=1):
        super().__init__()
        self.k3 = conv_bn(cin, cout, 3, s, 1, groups)
        self.k1 = conv_bn(cin, cout, 1, s, 0, groups)
        self.id = bn(cin) if cin == cout and s == 1 else None

    def forward(self, x):
        y = self.k3(x) + self.k1(x)
        if self.id is not None:
            y = y + self.id(x)
        return torch.relu(y)


class MobDw(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.scale = conv_bn(c, c, 1, groups=c)
        self.convs = nn.ModuleList([conv_bn(c, c, 3, 1, 1, groups=c) for _ in range(2)])
        self.id = bn(c)

    def forward(self, x):
        y = self.scale(x) + self.id(x)
        for c in self.convs:
            y = y + c(x)
        return torch.relu(y)


class MobPw(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.convs = nn.ModuleList([conv_bn(c, c, 1) for _ in range(2)])
        self.id = bn(c)

    def forward(self, x):
        y = self.id(x)
        for c in self.convs:
            y = y + c(x)
        return torch.relu(y)


class Mixer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.mix = conv_bn(c, c, 3, 1, 1, groups=c)
        self.norm = bn(c)
        self.ls = nn.Parameter(torch.rand(c, 1, 1) * 0.9 + 0.1)

    def forward(self, x):
        return x + self.ls * (self.mix(x) - self.norm(x))


class Basic(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1 = conv_bn(c, c, 3, 1, 1)
        self.c2 = conv_bn(c, c, 3, 1, 1)

    def forward(self, x):
        return torch.relu(x + self.c2(torch.relu(self.c1(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = conv_bn(3, 8, 3, 2, 1)
        self.aff0 = Affine()
        self.hg = conv_bn(8, 8, 2)
        self.aff1 = Affine()
        self.pool = nn.MaxPool2d(2, 1, ceil_mode=True)
        self.rep = Rep(16, 16)
        self.rep2 = Rep(16, 24, s=2)
        self.dw = MobDw(24)
        self.pw = MobPw(24)
        self.mixer = Mixer(24)
        self.basic = Basic(24)
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        x = self.aff0(torch.relu(self.stem(x)))
        p = nn.functional.pad(x, (0, 1, 0, 1))
        x = torch.cat([self.pool(p), self.aff1(torch.relu(self.hg(p)))], 1)
        x = self.basic(self.mixer(self.pw(self.dw(self.rep2(self.rep(x))))))
        return self.fc(x.mean((2, 3)))


def save(t, path, name):
    tp = numpy_helper.from_array(t, name)
    with open(path, "wb") as f:
        f.write(tp.SerializeToString())


def main():
    torch.manual_seed(5)
    net = Net().eval()
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((2, 3, 32, 30)).astype(np.float32))
    os.makedirs(os.path.join(OUT, "test_data_set_0"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "float64_outputs"), exist_ok=True)
    path = os.path.join(OUT, "model.onnx")
    torch.onnx.export(net, (x,), path, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamo=False, do_constant_folding=False,
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    m = onnx.load(path)
    onnx.checker.check_model(m)
    with torch.no_grad():
        y = net(x).numpy()
        y64 = net.double()(x.double()).numpy()
    save(x.numpy(), os.path.join(OUT, "test_data_set_0", "input_0.pb"), "x")
    save(y, os.path.join(OUT, "test_data_set_0", "output_0.pb"), "y")
    save(y64, os.path.join(OUT, "float64_outputs", "output_0.pb"), "y")
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    print(f"{path}: {len(m.graph.node)} nodes {ops}, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
