#!/usr/bin/env python3
"""Trains the small real models bundled with kiln and writes them as ONNX test cases.

Data: scikit-learn's bundled 8x8 handwritten digits (no network). Pixels are scaled
to [0, 1]; 20% of the images are held out (stratified, seed 0). Two classifiers are
trained with PyTorch on CPU and exported with the TorchScript-based exporter at
opset 13, so the graphs use plain standard ops:

  digits_cnn        Conv+BatchNormalization+Relu, MaxPool, Conv+BN+Relu,
                    GlobalAveragePool, Flatten, Gemm. BatchNormalization nodes are
                    kept in the graph (no Conv/BN folding) so kiln's BN path runs.
  digits_cnn_fused  the same trained network exported with constant folding, where
                    the exporter folds each BatchNormalization into its Conv.
  digits_mlp        Flatten, Gemm+BatchNormalization+Relu, Gemm (Dropout vanishes
                    in eval mode).

Each model folder holds model.onnx and ONNX test-case folders test_data_set_0
(16 held-out images) and test_data_set_1 (one image) whose expected outputs are
PyTorch's logits, checked against onnxruntime (1e-5) before anything is written.
models/digits_data/ holds every held-out image and label and PyTorch's accuracy.

Run from anywhere: .venv/bin/python models/make_models.py
"""
import os
import random
import sys

import numpy as np
import onnx
import onnxruntime as ort
import sklearn
import torch
from onnx import numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 13
SEED = 0
TOL = 1e-5


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # fixed reduction order, so reruns give identical bytes


def load_data():
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, stratify=y, random_state=SEED)


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),  # exported as GlobalAveragePool
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(32, 10))

    def forward(self, x):
        return self.head(self.features(x))


class DigitsMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2),
            nn.Linear(64, 10),
        )

    def forward(self, x):
        return self.net(x)


def train(model, x, y, epochs, lr):
    gen = torch.Generator().manual_seed(SEED)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), 64):
            idx = perm[i:i + 64]
            if len(idx) < 2:  # BatchNorm needs more than one sample per batch
                continue
            opt.zero_grad()
            loss_fn(model(xt[idx]), yt[idx]).backward()
            opt.step()
    model.eval()
    return model


def predict(model, x):
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def export(model, path, fold):
    """Exports in eval mode; fold=False keeps BatchNormalization nodes in the graph."""
    dummy = torch.zeros(2, 1, 8, 8)
    torch.onnx.export(
        model, (dummy,), path, dynamo=False, opset_version=OPSET,
        input_names=["input"], output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        training=torch.onnx.TrainingMode.EVAL if fold else torch.onnx.TrainingMode.PRESERVE,
        do_constant_folding=fold,
    )
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    # The exporter stamps its own version; drop it so the file depends only on the model.
    m.producer_version = ""
    onnx.save(m, path)
    return m


def op_counts(m):
    counts = {}
    for n in m.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def write_pb(arr, name, path):
    t = numpy_helper.from_array(arr, name=name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def write_case(model, m, path_dir, idx, x):
    """Writes test_data_set_<idx> after checking ORT against PyTorch."""
    want = predict(model, x)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    in_name, out_name = m.graph.input[0].name, m.graph.output[0].name
    got = sess.run([out_name], {in_name: x})[0]
    err = float(np.max(np.abs(got - want)))
    if got.shape != want.shape or err > TOL:
        sys.exit(f"{path_dir}: onnxruntime differs from PyTorch by {err} (> {TOL})")
    case = os.path.join(path_dir, f"test_data_set_{idx}")
    os.makedirs(case, exist_ok=True)
    write_pb(x, in_name, os.path.join(case, "input_0.pb"))
    write_pb(want, out_name, os.path.join(case, "output_0.pb"))
    return err


def emit(name, model, fold, x_te, require_bn):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    m = export(model, path, fold)
    ops = op_counts(m)
    has_bn = "BatchNormalization" in ops
    if has_bn != require_bn:
        sys.exit(f"{name}: BatchNormalization present={has_bn}, wanted {require_bn}: {ops}")
    errs = [write_case(model, m, d, 0, x_te[:16]), write_case(model, m, d, 1, x_te[16:17])]
    return ops, max(errs)


def dir_size(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def main():
    seed_everything(SEED)
    x_tr, x_te, y_tr, y_te = load_data()

    models = {
        "digits_cnn": train(DigitsCNN(), x_tr, y_tr, epochs=30, lr=3e-3),
        "digits_mlp": train(DigitsMLP(), x_tr, y_tr, epochs=30, lr=3e-3),
    }
    acc = {k: float(np.mean(predict(m, x_te).argmax(1) == y_te)) for k, m in models.items()}
    for k, a in acc.items():
        if a <= 0.95:
            sys.exit(f"{k}: held-out accuracy {a:.4f} is not above 0.95")

    data = os.path.join(HERE, "digits_data")
    os.makedirs(data, exist_ok=True)
    np.save(os.path.join(data, "heldout_images.npy"), x_te)
    np.save(os.path.join(data, "heldout_labels.npy"), y_te)
    with open(os.path.join(data, "pytorch_accuracy.txt"), "w") as f:
        for k, a in acc.items():
            f.write(f"{k} {a:.4f}\n")
        f.write(f"heldout_images {len(y_te)}\n")

    plan = [  # (folder, trained model, fold BN into Conv, BN nodes expected)
        ("digits_cnn", models["digits_cnn"], False, True),
        ("digits_cnn_fused", models["digits_cnn"], True, False),
        ("digits_mlp", models["digits_mlp"], False, True),
    ]
    summary = []
    for name, model, fold, bn in plan:
        ops, err = emit(name, model, fold, x_te, bn)
        summary.append((name, ops, err))

    versions = (f"torch {torch.__version__}\nonnx {onnx.__version__}\n"
                f"onnxruntime {ort.__version__}\nscikit-learn {sklearn.__version__}\n"
                f"numpy {np.__version__}\npython {sys.version.split()[0]}\nopset {OPSET}\n")
    with open(os.path.join(HERE, "VERSIONS.txt"), "w") as f:
        f.write(versions)

    print(versions, end="")
    print(f"held-out images: {len(y_te)} (train {len(y_tr)})")
    for k, a in acc.items():
        print(f"{k}: PyTorch held-out accuracy {a:.4f}")
    for name, ops, err in summary:
        size = os.path.getsize(os.path.join(HERE, name, "model.onnx"))
        ops_s = ", ".join(f"{o} x{c}" for o, c in sorted(ops.items()))
        print(f"{name}: model.onnx {size} bytes, folder {dir_size(os.path.join(HERE, name))} "
              f"bytes, max |ORT - PyTorch| {err:.2e}; ops: {ops_s}")
    print(f"digits_data: {dir_size(data)} bytes; models/ total {dir_size(HERE)} bytes")


if __name__ == "__main__":
    main()
