#!/usr/bin/env python3
"""Trains a bidirectional nn.LSTM or nn.GRU (input 4, hidden 8, batch_first; Y's mean over
time and both directions' Y_h into a Linear) for 20 steps of SGD (lr 0.1, momentum 0.9,
batch 32, MSE) in PyTorch and, from the same exported weights and the same batches, in
kiln through libkiln's C API; prints both losses per step and the worst relative
difference, and exits 1 when it is over --tol.

  python tools/train_rnn_vs_torch.py build/libkiln.so lstm|gru [--tol 1e-3]

Needs torch and onnx (a by-hand check, not run by meson test)."""
import argparse
import ctypes
import sys

import numpy as np
import torch
import torch.nn as nn

STEPS, BATCH, SEQ = 20, 32, 5
KILN_DTYPE_FLOAT32 = 1


class Model(nn.Module):
    def __init__(self, kind):
        super().__init__()
        rnn = nn.LSTM if kind == "lstm" else nn.GRU
        self.kind = kind
        self.rnn = rnn(4, 8, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(32, 3)

    def forward(self, x):
        y, state = self.rnn(x)
        h = state[0] if self.kind == "lstm" else state
        return self.fc(torch.cat([y.mean(1), h[0], h[1]], 1))


def torch_losses(model, xs, ts):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, t in zip(xs, ts):
        opt.zero_grad()
        loss = ((model(torch.from_numpy(x)) - torch.from_numpy(t)) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def kiln_losses(lib, path, xs, ts):
    P = ctypes.c_void_p
    lib.kiln_trainer_error.restype = ctypes.c_char_p
    opts, trainer = P(), P()
    lib.kiln_options_create(ctypes.byref(opts))
    lib.kiln_options_set_string(opts, b"loss", b"mse")
    lib.kiln_options_set_string(opts, b"optimizer", b"sgd")
    lib.kiln_options_set_float(opts, b"lr", ctypes.c_double(0.1))
    lib.kiln_options_set_float(opts, b"momentum", ctypes.c_double(0.9))

    def check(status):
        if status:
            sys.exit("kiln: " + lib.kiln_trainer_error(trainer).decode())

    check(lib.kiln_trainer_create(path.encode(), opts, ctypes.byref(trainer)))
    losses = []
    for x, t in zip(xs, ts):
        for name, a in ((b"x", x), (b"target", t)):
            dims = (ctypes.c_int64 * a.ndim)(*a.shape)
            check(lib.kiln_trainer_set_input(trainer, name, KILN_DTYPE_FLOAT32, a.ndim, dims,
                                             a.ctypes.data_as(P), ctypes.c_size_t(a.nbytes)))
        loss = ctypes.c_double()
        check(lib.kiln_trainer_step(trainer, ctypes.byref(loss)))
        losses.append(loss.value)
    lib.kiln_trainer_free(trainer)
    lib.kiln_options_free(opts)
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("kind", choices=["lstm", "gru"])
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--onnx", default=None, help="where to write the model")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Model(args.kind)
    path = args.onnx or f"/tmp/kiln_rnn_vs_torch_{args.kind}.onnx"
    torch.onnx.export(model, (torch.zeros(BATCH, SEQ, 4),), path, input_names=["x"],
                      output_names=["y"], opset_version=14, dynamo=False)
    rng = np.random.default_rng(1)
    xs = rng.uniform(-1, 1, (STEPS, BATCH, SEQ, 4)).astype(np.float32)
    ts = np.ascontiguousarray(0.5 * xs[:, :, -1, :3] - 0.3 * xs[:, :, 0, 1:])
    ref = torch_losses(model, xs, ts)
    got = kiln_losses(ctypes.CDLL(args.lib), path, xs, ts)
    worst = 0.0
    for s, (r, g) in enumerate(zip(ref, got)):
        rel = abs(g - r) / abs(r)
        worst = max(worst, rel)
        print(f"step {s:2d}  torch {r:.8f}  kiln {g:.8f}  relative {rel:.2e}")
    print(f"{args.kind}: worst relative difference {worst:.3e} (tolerance {args.tol:g})")
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
