#!/usr/bin/env python3
"""Writes tests/unit/fixtures/grad/golden.txt: PyTorch's values for kiln.Loss,
kiln.LossGrad and kiln.BatchNormTrain, which tests/unit/test_grad_ops.c compares the
reference kernels against (the C test reads the text; it needs no Python).

Run from the repository root with a Python that has torch:
    /work/main/.venv/bin/python tools/make_grad_golden.py

Format: one case per block, numbers in float64 ("%.17g"). A tensor is written as
"rank dims... values..." (rank -1: absent).
    loss KIND REDUCTION IGNORE_INDEX LABEL_SMOOTHING BETA
      Input Target Weight dLoss loss dInput
    bn MOMENTUM EPSILON            (momentum in ONNX's convention)
      X scale B running_mean running_var Y new_running_mean new_running_var

The attributes kiln reads are float32, so every float attribute here (label_smoothing,
beta, momentum, epsilon) is a float32 value, and the comparison can be tight.
"""
import os
import torch
import torch.nn.functional as F

torch.manual_seed(20240611)
torch.set_default_dtype(torch.float64)
OUT = os.path.join("tests", "unit", "fixtures", "grad", "golden.txt")


def tensor_text(t):
    if t is None:
        return "-1"
    t = t.detach()
    dims = list(t.shape)
    vals = t.reshape(-1).tolist()
    return " ".join([str(len(dims))] + [str(d) for d in dims] +
                    ["%.17g" % float(v) for v in vals])


def loss_of(kind, x, t, w, reduction, ignore, smoothing, beta):
    if kind == "cross_entropy":
        return F.cross_entropy(x, t, weight=w, ignore_index=ignore, reduction=reduction,
                               label_smoothing=smoothing)
    if kind == "nll":
        return F.nll_loss(x, t, weight=w, ignore_index=ignore, reduction=reduction)
    if kind == "mse":
        return F.mse_loss(x, t, reduction=reduction)
    if kind == "l1":
        return F.l1_loss(x, t, reduction=reduction)
    if kind == "smooth_l1":
        return F.smooth_l1_loss(x, t, reduction=reduction, beta=beta)
    return F.binary_cross_entropy_with_logits(x, t, weight=w, reduction=reduction)


def loss_case(lines, kind, shape, reduction, weight=False, ignore=-100, smoothing=0.0,
              beta=1.0, ignored=0, wshape=None):
    x = torch.randn(*shape) * 2
    w = None
    if kind in ("cross_entropy", "nll"):
        classes = shape[1] if len(shape) > 1 else shape[0]
        tshape = [shape[0]] + list(shape[2:]) if len(shape) > 1 else []
        t = torch.randint(0, classes, tshape, dtype=torch.int64)
        flat = t.view(-1)
        for k in range(min(ignored, flat.numel())):
            flat[(k * 3) % flat.numel()] = ignore
        if weight:
            w = torch.rand(classes) + 0.5
        if kind == "nll":
            x = torch.log_softmax(x, 1 if len(shape) > 1 else 0)
    elif kind == "bce_logits":
        t = torch.rand(*shape)
        if weight:
            w = torch.rand(*(wshape or shape)) + 0.5
    else:
        t = x + torch.randn(*shape) * (beta if kind == "smooth_l1" else 1.0)
    x.requires_grad_(True)
    loss = loss_of(kind, x, t, w, reduction, ignore, smoothing, beta)
    dloss = torch.randn(*loss.shape) if reduction == "none" else torch.tensor(1.7)
    (grad,) = torch.autograd.grad(loss, x, dloss)
    lines.append("loss %s %s %d %.17g %.17g" % (kind, reduction, ignore, smoothing, beta))
    for t_ in (x, t, w, dloss, loss, grad):
        lines.append(tensor_text(t_))


def bn_case(lines, shape, momentum_torch, eps):
    channels = shape[1]
    bn = torch.nn.BatchNorm2d(channels, eps=eps, momentum=momentum_torch) if len(shape) == 4 \
        else torch.nn.BatchNorm1d(channels, eps=eps, momentum=momentum_torch)
    with torch.no_grad():
        bn.weight.copy_(torch.rand(channels) + 0.5)
        bn.bias.copy_(torch.randn(channels))
        bn.running_mean.copy_(torch.randn(channels))
        bn.running_var.copy_(torch.rand(channels) + 0.5)
    rm, rv = bn.running_mean.clone(), bn.running_var.clone()
    bn.train()
    x = torch.randn(*shape) * 3 + 1
    y = bn(x)
    lines.append("bn %.17g %.17g" % (1 - momentum_torch, eps))
    for t_ in (x, bn.weight, bn.bias, rm, rv, y, bn.running_mean, bn.running_var):
        lines.append(tensor_text(t_))


def main():
    lines = []
    for red in ("mean", "sum", "none"):
        loss_case(lines, "cross_entropy", [5, 4], red)
        loss_case(lines, "cross_entropy", [5, 4], red, weight=True, ignored=2)
        loss_case(lines, "cross_entropy", [3, 4, 2, 3], red, weight=True, smoothing=0.25,
                  ignore=1, ignored=3)
        loss_case(lines, "cross_entropy", [6, 5], red, smoothing=0.125, ignored=2)
        loss_case(lines, "nll", [5, 4], red, weight=True, ignored=1)
        loss_case(lines, "nll", [2, 3, 5], red, ignore=0, ignored=2)
        loss_case(lines, "mse", [3, 5], red)
        loss_case(lines, "l1", [3, 5], red)
        loss_case(lines, "smooth_l1", [3, 5], red)
        loss_case(lines, "smooth_l1", [4, 3], red, beta=0.375)
        loss_case(lines, "bce_logits", [3, 5], red)
        loss_case(lines, "bce_logits", [3, 5], red, weight=True, wshape=[5])
    loss_case(lines, "cross_entropy", [4], "mean", weight=True)  # unbatched [C]
    loss_case(lines, "cross_entropy", [3, 4], "mean", ignored=3)  # all ignored: NaN
    loss_case(lines, "smooth_l1", [3, 4], "mean", beta=0.0)
    bn_case(lines, [4, 3, 5, 3], 0.125, 2.0 ** -17)
    bn_case(lines, [6, 4], 0.25, 2.0 ** -10)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
