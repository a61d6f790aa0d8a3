#!/usr/bin/env python3
"""Golden data for kiln's optimizer ops (tests/unit/test_optim.c): PyTorch's
single-tensor optimizers (foreach=False) run for 5 steps from fixed random inputs.

Run with the project's venv: /work/main/.venv/bin/python tools/make_optim_golden.py
Writes tests/unit/fixtures/optim/golden.bin, little-endian, a sequence of cases:
  int32 kind (0 SGD, 1 Adagrad, 2 Adam), int32 nesterov, maximize, amsgrad, decoupled,
  int32 n, steps, n_state; float64 hyper[6] (kiln's Hyper order, step slot 0);
  float32 param0[n], state0[n_state][n];
  per step: float32 grad[n], param[n], state[n_state][n]
ending with int32 -1. State order is kiln's input order (Momentum; Sum; ExpAvg,
ExpAvgSq, MaxExpAvgSq)."""
import os
import struct

import torch

N, STEPS = 67, 5  # 67: not a multiple of any vector width


def cases():
    # (name, kind, flags, hyper (kiln order), ctor, state names, init accumulator)
    yield 0, (0, 0, 0, 0), [0.05, 0, 0, 0, 0, 0], lambda p: torch.optim.SGD(
        [p], lr=0.05, foreach=False), []
    yield 0, (0, 0, 0, 0), [0.03, 0.9, 0.1, 0.01, 0, 0], lambda p: torch.optim.SGD(
        [p], lr=0.03, momentum=0.9, dampening=0.1, weight_decay=0.01, foreach=False), [
            "momentum_buffer"]
    yield 0, (1, 0, 0, 0), [0.02, 0.8, 0, 0.05, 0, 0], lambda p: torch.optim.SGD(
        [p], lr=0.02, momentum=0.8, nesterov=True, weight_decay=0.05, foreach=False), [
            "momentum_buffer"]
    yield 0, (0, 1, 0, 0), [0.04, 0.5, 0.3, 0, 0, 0], lambda p: torch.optim.SGD(
        [p], lr=0.04, momentum=0.5, dampening=0.3, maximize=True, foreach=False), [
            "momentum_buffer"]
    yield 1, (0, 0, 0, 0), [0.1, 0, 0, 1e-10, 0, 0], lambda p: torch.optim.Adagrad(
        [p], lr=0.1, foreach=False), ["sum"]
    yield 1, (0, 1, 0, 0), [0.07, 0.01, 0.02, 1e-6, 0, 0], lambda p: torch.optim.Adagrad(
        [p], lr=0.07, lr_decay=0.01, weight_decay=0.02, eps=1e-6,
        initial_accumulator_value=0.3, maximize=True, foreach=False), ["sum"]
    yield 2, (0, 0, 0, 0), [1e-3, 0.9, 0.999, 1e-8, 0, 0], lambda p: torch.optim.Adam(
        [p], lr=1e-3, foreach=False), ["exp_avg", "exp_avg_sq"]
    yield 2, (0, 1, 0, 0), [3e-3, 0.8, 0.99, 1e-6, 0.1, 0], lambda p: torch.optim.Adam(
        [p], lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, maximize=True,
        foreach=False), ["exp_avg", "exp_avg_sq"]
    yield 2, (0, 0, 0, 1), [2e-3, 0.9, 0.95, 1e-8, 0.05, 0], lambda p: torch.optim.AdamW(
        [p], lr=2e-3, betas=(0.9, 0.95), weight_decay=0.05, foreach=False), [
            "exp_avg", "exp_avg_sq"]
    yield 2, (0, 0, 1, 0), [1e-2, 0.3, 0.999, 1e-8, 0.01, 0], lambda p: torch.optim.Adam(
        [p], lr=1e-2, betas=(0.3, 0.999), weight_decay=0.01, amsgrad=True,
        foreach=False), ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]


def f32(t):
    return t.detach().to(torch.float32).contiguous().numpy().tobytes()


def main():
    torch.manual_seed(1234)
    out = bytearray()
    for kind, flags, hyper, ctor, names in cases():
        p = torch.nn.Parameter(torch.randn(N) * 0.5)
        opt = ctor(p)
        grads = [torch.randn(N) * 0.1 for _ in range(STEPS)]
        # state before step 1 (Adagrad's initial accumulator; the rest start at 0, and
        # SGD's buffer is made from the first gradient)
        init = [torch.zeros(N) for _ in names]
        if kind == 1:
            init = [torch.full((N,), opt.param_groups[0]["initial_accumulator_value"])]
        out += struct.pack("<8i", kind, *flags, N, STEPS, len(names))
        out += struct.pack("<6d", *hyper)
        out += f32(p)
        for s in init:
            out += f32(s)
        for g in grads:
            p.grad = g.clone()
            opt.step()
            out += f32(g) + f32(p)
            st = opt.state[p]
            for nm in names:
                out += f32(st[nm])
    out += struct.pack("<i", -1)
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "unit", "fixtures", "optim",
                        "golden.bin")
    with open(path, "wb") as f:
        f.write(out)
    print(f"{path}: {len(out)} bytes")


if __name__ == "__main__":
    main()
