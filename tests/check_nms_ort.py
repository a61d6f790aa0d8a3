"""kiln's NonMaxSuppression against onnxruntime's, on random boxes.

usage: check_nms_ort.py KILN_BINARY      (the venv's python: onnx, onnxruntime, numpy)

Writes models of one NonMaxSuppression node (boxes and scores as graph inputs,
max_output_boxes_per_class, iou_threshold and score_threshold as constants), runs each
with onnxruntime and with `kiln run`, and requires the same selected rows. 60 cases:
1 to 3 batches and classes, 0 to 400 boxes (some with their corners the other way
round, some of no or negative size), both values of center_point_box, score ties,
max_output_boxes_per_class from 0 to 2^40, IoU thresholds in [0, 1] (onnxruntime refuses
others), score thresholds or none. No NaN: onnxruntime's order of NaN scores is its
heap's. Coordinates are random float32 values, so an IoU within float32 rounding of the
threshold (where onnxruntime's float32 arithmetic and kiln's float64 could differ)
does not come up. Exits 1 on any difference.
(kiln's selection against a plain reference: tests/unit/test_nms.c.)
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def model(n_batch, n_class, n_box, center, max_out, iou, score_thr):
    inputs = ["boxes", "scores", "max", "iou"] + (["st"] if score_thr is not None else [])
    node = helper.make_node("NonMaxSuppression", inputs, ["sel"], center_point_box=center)
    consts = [numpy_helper.from_array(np.array([max_out], np.int64), "max"),
              numpy_helper.from_array(np.array([iou], np.float32), "iou")]
    if score_thr is not None:
        consts.append(numpy_helper.from_array(np.array([score_thr], np.float32), "st"))
    graph = helper.make_graph(
        [node], "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [n_batch, n_box, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [n_batch, n_class, n_box])],
        [helper.make_tensor_value_info("sel", TensorProto.INT64, None)], consts)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def random_case(rng):
    n_batch, n_class = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    n_box = int(rng.choice([0, 1, 7, 65, 400]))
    center = int(rng.integers(0, 2))
    field = 4 + 6 * np.sqrt(n_box)
    lo = rng.uniform(0, field, (n_batch, n_box, 2))
    size = rng.uniform(0.2, 6, (n_batch, n_box, 2))
    odd = rng.random((n_batch, n_box))
    size[odd < 0.05, 0] = 0                     # no area
    size[(odd >= 0.05) & (odd < 0.1)] *= -1     # negative size (center format)
    if center:  # [x_center, y_center, width, height]
        boxes = np.concatenate([lo[..., ::-1], size[..., ::-1]], -1)
    else:       # [y1, x1, y2, x2], some the other way round
        boxes = np.concatenate([lo, lo + size], -1)
        flip = rng.random((n_batch, n_box)) < 0.25
        boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    scores = rng.integers(0, 16, (n_batch, n_class, n_box)) / 16  # ties
    max_out = int(rng.choice([0, 1, 5, 50, 1 << 40]))
    iou = float(rng.choice([0.0, 0.3, 0.5, 0.7, 1.0]))
    score_thr = None if rng.random() < 0.5 else float(rng.choice([0.0, 0.25, 0.5]))
    return (n_batch, n_class, n_box, center, max_out, iou, score_thr,
            boxes.astype(np.float32), scores.astype(np.float32))


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    kiln = os.path.abspath(sys.argv[1])
    rng = np.random.default_rng(20)
    differing = 0
    with tempfile.TemporaryDirectory() as tmp:
        for trial in range(60):
            *shape, boxes, scores = random_case(rng)
            m = model(*shape)
            path = os.path.join(tmp, "nms.onnx")
            onnx.save(m, path)
            np.save(os.path.join(tmp, "boxes.npy"), boxes)
            np.save(os.path.join(tmp, "scores.npy"), scores)
            sess = ort.InferenceSession(m.SerializeToString(),
                                        providers=["CPUExecutionProvider"])
            want = sess.run(None, {"boxes": boxes, "scores": scores})[0]
            out = os.path.join(tmp, "out")
            r = subprocess.run([kiln, "run", path, "--input", "boxes=" + tmp + "/boxes.npy",
                                "--input", "scores=" + tmp + "/scores.npy", "--threads", "1",
                                "--output-dir", out], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"case {trial} {shape}: kiln failed: {r.stderr.strip()[-300:]}")
                differing += 1
                continue
            got = np.load(os.path.join(out, "sel.npy"))
            if got.shape != want.shape or not np.array_equal(got, want):
                print(f"case {trial} {shape}: kiln {got.shape} differs from onnxruntime "
                      f"{want.shape}")
                differing += 1
    print(f"{60 - differing} of 60 cases the same as onnxruntime")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
