#!/usr/bin/env python3
"""Op counts of kiln's optimizer beside onnxruntime's extended level, on models built
here with the block structure of ResNet-50, MobileNetV3, EfficientNet and BERT-base
(random weights: no model can be downloaded; the op counts depend on the structure
only). Each model is written as an ONNX test-case folder (model.onnx and
test_data_set_0 with PyTorch's outputs), so `kiln check -O0/-O2 OUT/*` compares too.

    .venv/bin/python tools/compare_passes.py build/tools/kiln OUT_DIR

Needs torch, onnx and onnxruntime (tools/setup.sh --python). Prints one table per model:
op, count in the file, after kiln -O2, after onnxruntime's ORT_ENABLE_EXTENDED (from
the model it saves with optimized_model_filepath).
"""
import collections
import math
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
from onnx import numpy_helper


def conv_bn(cin, cout, k=1, stride=1, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout))


class Bottleneck(nn.Module):  # ResNet-50's block
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.body = nn.Sequential(conv_bn(cin, width), nn.ReLU(), conv_bn(width, width, 3, stride),
                                  nn.ReLU(), conv_bn(width, cout))
        self.down = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        return torch.relu(self.body(x) + (self.down(x) if self.down is not None else x))


def resnet50():
    layers, cin = [conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)], 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * 4
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000))


class SqueezeExcite(nn.Module):
    def __init__(self, c, gate):
        super().__init__()
        self.fc1, self.fc2, self.gate = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1), gate()

    def forward(self, x):
        return x * self.gate(self.fc2(torch.relu(self.fc1(x.mean((2, 3), keepdim=True)))))


class InvertedResidual(nn.Module):  # MobileNetV3 (Hardswish, HardSigmoid SE), EfficientNet (SiLU)
    def __init__(self, cin, cout, k, stride, act, gate):
        super().__init__()
        mid = cin * 4
        self.body = nn.Sequential(conv_bn(cin, mid), act(), conv_bn(mid, mid, k, stride, mid), act(),
                                  SqueezeExcite(mid, gate), conv_bn(mid, cout))
        self.skip = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.skip else self.body(x)


def mobile(act, gate, head_act):
    cfg = [(16, 24, 3, 2), (24, 24, 3, 1), (24, 40, 5, 2), (40, 40, 5, 1), (40, 80, 3, 2),
           (80, 80, 3, 1), (80, 112, 3, 1), (112, 160, 5, 2), (160, 160, 5, 1)]
    layers = [conv_bn(3, 16, 3, 2), act()]
    layers += [InvertedResidual(a, b, k, s, act, gate) for a, b, k, s in cfg]
    return nn.Sequential(*layers, conv_bn(160, 960), head_act(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(960, 1000))


class EncoderLayer(nn.Module):  # BERT's, written out as Hugging Face's BertLayer computes it
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-12), nn.LayerNorm(d, eps=1e-12)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, s, d = x.shape
        hd = d // self.h
        split = lambda t: t.view(b, s, self.h, hd).transpose(1, 2)
        scores = torch.matmul(split(self.q(x)), split(self.k(x)).transpose(-1, -2)) / math.sqrt(hd)
        probs = torch.softmax(scores + mask, dim=-1)
        ctx = torch.matmul(probs, split(self.v(x))).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.down(nn.functional.gelu(self.up(x))))


class Bert(nn.Module):
    def __init__(self, d=96, heads=12, layers=12, vocab=1000, seq=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(d, heads) for _ in range(layers))

    def forward(self, ids, mask):
        x = self.ln(self.tok(ids) + self.pos.weight)  # ids hold exactly `seq` tokens
        ext = (1.0 - mask[:, None, None, :]) * -10000.0
        for layer in self.layers:
            x = layer(x, ext)
        return x


def randomize_bn(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)


def write_case(folder, model, inputs, names, opset):
    os.makedirs(os.path.join(folder, "test_data_set_0"), exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    with torch.no_grad():
        out = model(*inputs)
        torch.onnx.export(model, tuple(inputs), path, opset_version=opset, input_names=names,
                          output_names=["y"], dynamo=False)
    for i, (n, t) in enumerate(zip(names, inputs)):
        with open(os.path.join(folder, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy(), n).SerializeToString())
    with open(os.path.join(folder, "test_data_set_0", "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(out.numpy(), "y").SerializeToString())
    return path


def op_counts(model):
    return collections.Counter((n.domain + "." if n.domain else "") + n.op_type
                               for n in model.graph.node)


def kiln_counts(kiln, path):
    text = subprocess.run([kiln, "inspect", path, "-O2", "--stats"], check=True,
                          capture_output=True, text=True).stdout
    rows = re.findall(r"^  (\S+)\s+(\d+)\s+(\d+)$", text.split("ops:")[1], re.M)
    return collections.Counter({op: int(after) for op, _, after in rows if int(after)})


def ort_counts(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = path + ".ort.onnx"
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return op_counts(onnx.load(so.optimized_model_filepath))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    kiln, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    img = torch.randn(1, 3, 224, 224)
    ids, mask = torch.randint(0, 1000, (2, 16)), torch.ones(2, 16)
    mask[1, 10:] = 0
    cases = [
        ("resnet50", resnet50(), [img], ["x"], 13),
        ("mobilenetv3", mobile(nn.Hardswish, nn.Hardsigmoid, nn.Hardswish), [img], ["x"], 13),
        ("efficientnet", mobile(nn.SiLU, nn.Sigmoid, nn.SiLU), [img], ["x"], 13),
        ("bert_base", Bert(), [ids, mask], ["ids", "mask"], 13),
        ("bert_base_opset17", Bert(), [ids, mask], ["ids", "mask"], 17),
    ]
    for name, model, inputs, names, opset in cases:
        randomize_bn(model)
        path = write_case(os.path.join(out, name), model.eval(), inputs, names, opset)
        before, kiln_after, ort_after = op_counts(onnx.load(path)), kiln_counts(kiln, path), ort_counts(path)
        print(f"\n{name} (opset {opset}): {sum(before.values())} nodes; kiln -O2 "
              f"{sum(kiln_after.values())}; onnxruntime extended {sum(ort_after.values())}")
        print(f"  {'op':32} {'file':>6} {'kiln':>6} {'ort':>6}")
        for op in sorted(set(before) | set(kiln_after) | set(ort_after)):
            print(f"  {op:32} {before[op]:6} {kiln_after[op]:6} {ort_after[op]:6}")


if __name__ == "__main__":
    main()
