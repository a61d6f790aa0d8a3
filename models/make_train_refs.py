#!/usr/bin/env python3
"""Writes the training test cases of kiln (models/train/) and PyTorch's reference runs.

For each model (mlp, cnn, transformer) it writes, into models/train/NAME/:

  model.onnx   the untrained model as PyTorch initializes it (seeded), exported in
               inference form at opset 17 without constant folding, so that
               BatchNormalization stays a node (kiln trains it in training form)
  train.npz    the training arrays: the model's input(s) and 'target'
  eval.npz     held-out arrays, the same names
  torch.json   for each optimizer (sgd: SGD with momentum; adamw: AdamW; the settings of
               SETTINGS, PyTorch's defaults otherwise): every step's loss over STEPS steps of
               batches of BATCH in file order (no shuffling; epochs wrap, the last
               partial batch kept, as `kiln train --no-shuffle`), and the held-out
               accuracy after them

Data: scikit-learn's bundled 8x8 digits (mlp, cnn; no network), and for the
transformer a seeded synthetic sequence task (the class is which of four marker tokens
occurs most often in a sequence of 12 tokens of a vocabulary of 16; 15% of the
training labels are random). Weights right before a BatchNormalization have no bias:
its gradient would be rounding noise only, which Adam turns into steps of lr.

The models have no dropout: its masks come from each library's own generator, so the
runs could not be compared step by step (kiln's dropout is tested on its own).

Run from the repository root: .venv/bin/python models/make_train_refs.py
"""
import json
import os
import sys

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "train")
STEPS = 100
BATCH = 64
# per model: each optimizer's settings (kiln train's flags of the same names)
SETTINGS = {
    "mlp": {"sgd": {"lr": 0.05, "momentum": 0.9}, "adamw": {"lr": 2e-3}},
    "cnn": {"sgd": {"lr": 0.1, "momentum": 0.5}, "adamw": {"lr": 2e-2}},
    "transformer": {"sgd": {"lr": 0.05, "momentum": 0.9}, "adamw": {"lr": 2e-3}},
}
OPTIMIZERS = {
    "sgd": lambda p, s: torch.optim.SGD(p, lr=s["lr"], momentum=s["momentum"], foreach=False),
    "adamw": lambda p, s: torch.optim.AdamW(p, lr=s["lr"], foreach=False),
}


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 64, bias=False)  # BatchNorm follows: a bias would get
        # only rounding noise as its gradient, which Adam turns into steps
        self.bn = nn.BatchNorm1d(64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1, bias=False)  # BatchNorm follows
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1, stride=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        y = nn.functional.max_pool2d(torch.relu(self.bn1(self.c1(x))), 2)
        y = torch.relu(self.c2(y))
        y = nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


class Encoder(nn.Module):
    """One pre-norm transformer encoder layer written out, so the export is plain
    MatMul/Softmax/LayerNormalization."""

    def __init__(self, vocab=16, seq=12, d=32, heads=4, ff=64, classes=4):
        super().__init__()
        self.heads, self.d = heads, d
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.1)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        n, s = tokens.shape
        x = self.emb(tokens) + self.pos
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(self.d, dim=-1)
        dh = self.d // self.heads
        q = q.reshape(n, s, self.heads, dh).transpose(1, 2)
        k = k.reshape(n, s, self.heads, dh).transpose(1, 2)
        v = v.reshape(n, s, self.heads, dh).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) / dh ** 0.5, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(n, s, self.d)
        x = x + self.proj(o)
        x = x + self.ff2(nn.functional.gelu(self.ff1(self.ln2(x))))
        return self.head(x.mean(dim=1))


def digits(images):
    from sklearn.datasets import load_digits  # here: tools/bench_train.py imports this file
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    if images:
        xtr, xte = xtr.reshape(-1, 1, 8, 8), xte.reshape(-1, 1, 8, 8)
    return xtr, ytr, xte, yte


def sequences():
    rng = np.random.default_rng(0)
    n = 1200
    x = rng.integers(4, 16, size=(n, 12))
    y = rng.integers(0, 4, size=n)
    for i in range(n):  # plant the class's marker token 3 to 5 times, others fewer
        pos = rng.choice(12, size=rng.integers(3, 6), replace=False)
        x[i, pos] = y[i]
        others = [c for c in range(4) if c != y[i]]
        free = [p for p in range(12) if p not in pos]
        for p in rng.choice(free, size=2, replace=False):
            x[i, p] = rng.choice(others)
    # 15% of the training labels are replaced by random ones, so that the loss stays
    # away from 0, where float32 rounding alone makes relative differences large
    noisy = rng.random(n) < 0.15
    noisy[1000:] = False
    y = np.where(noisy, rng.integers(0, 4, size=n), y)
    x, y = x.astype(np.int64), y.astype(np.int64)
    return x[:1000], y[:1000], x[1000:], y[1000:]


def batches(n):
    per_epoch = (n + BATCH - 1) // BATCH
    for k in range(STEPS):
        start = (k % per_epoch) * BATCH
        yield start, min(start + BATCH, n)


def run(make, opt_name, settings, xtr, ytr, xte, yte):
    torch.manual_seed(0)
    model = make()
    opt = OPTIMIZERS[opt_name](model.parameters(), settings)
    losses = []
    xt, yt = torch.from_numpy(xtr), torch.from_numpy(ytr)
    model.train()
    for a, b in batches(len(xtr)):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xt[a:b]), yt[a:b])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    with torch.no_grad():
        acc = float((model(torch.from_numpy(xte)).argmax(1) == torch.from_numpy(yte)).float().mean())
    return losses, acc


def main():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    cases = {
        "mlp": (MLP, "x", digits(False)),
        "cnn": (CNN, "x", digits(True)),
        "transformer": (Encoder, "tokens", sequences()),
    }
    for name, (make, input_name, data) in cases.items():
        xtr, ytr, xte, yte = data
        folder = os.path.join(OUT, name)
        os.makedirs(folder, exist_ok=True)
        torch.manual_seed(0)
        model = make().eval()
        torch.onnx.export(model, (torch.from_numpy(xtr[:2]),), os.path.join(folder, "model.onnx"),
                          input_names=[input_name], output_names=["logits"],
                          dynamic_axes={input_name: {0: "batch"}, "logits": {0: "batch"}},
                          opset_version=17, do_constant_folding=False, dynamo=False)
        np.savez(os.path.join(folder, "train.npz"), **{input_name: xtr, "target": ytr})
        np.savez(os.path.join(folder, "eval.npz"), **{input_name: xte, "target": yte})
        ref = {"steps": STEPS, "batch": BATCH, "torch": torch.__version__, "runs": {}}
        for opt_name in OPTIMIZERS:
            settings = SETTINGS[name][opt_name]
            losses, acc = run(make, opt_name, settings, xtr, ytr, xte, yte)
            ref["runs"][opt_name] = {"settings": settings, "losses": losses,
                                     "eval_accuracy": acc}
            print(f"{name} {opt_name}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
                  f"eval accuracy {acc:.4f}")
        with open(os.path.join(folder, "torch.json"), "w") as f:
            json.dump(ref, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
