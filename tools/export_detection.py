#!/usr/bin/env python3
"""Export torchvision's detection models as ONNX test cases, for kiln's control flow.

Each model becomes one folder in the cache (default ~/.cache/kiln-zoo/detect, --out to
change), the layout `kiln check` reads:

    NAME/model.onnx
    NAME/test_data_set_0/input_0.pb, output_K.pb   expected outputs from onnxruntime
    NAME/torch_outputs/output_K.pb                  PyTorch eager's outputs
    NAME/meta.json        threshold, boxes, ops (subgraphs included), sizes, times

The models: ssdlite320_mobilenet_v3_large, fasterrcnn_mobilenet_v3_large_320_fpn,
retinanet_resnet50_fpn and maskrcnn_resnet50_fpn, built by their torchvision
constructors with weights=None and weights_backbone=None (nothing is downloaded), seeded
by name, and exported by the TorchScript exporter (torch.onnx.export, dynamo=False) at
opset 17 in eval mode. Their post-processing (score filtering, per-class NMS, the
detections kept, Mask R-CNN's mask pasting) becomes If and Loop nodes with subgraphs.

Random weights detect nothing at the default score thresholds (every class score sits
near 1/91, or near RetinaNet's prior of 0.01), so the outputs would be empty tensors and
a test of them would check no arithmetic at all. So:

- the input is a real photo (scikit-image's astronaut), resized to the model's input
  size (320x320 for the two MobileNet models, 800x800 for the ResNet-50 ones);
- BatchNorm statistics and zero-initialized biases are set as tools/export_zoo.py sets
  them (its randomize(), on a second photo, scikit-image's coffee), so activations keep
  their scale through 50 layers;
- RetinaNet's class logits are scaled by 16 (SHARPEN): its random head scores every box
  within 5% of the prior 0.01, so the order of its detections would hang on rounding;
- the score threshold (the constructor's score_thresh or box_score_thresh, set on the
  built model) is calibrated: the model runs once in PyTorch with the threshold at 0,
  and the threshold is put in the middle of the widest gap between consecutive scores
  among the best 8 to 48 detections, keeping no two scores closer than MIN_GAP (1e-3:
  PyTorch and onnxruntime differ by up to 1.2e-4), which keeps fewer than 8 where the
  best scores are closer. Removing candidates below a threshold does not change which
  better boxes NMS keeps, so the exported model keeps exactly those boxes, and no score
  lies near the threshold or near another, where a rounding difference between
  runtimes would add, drop or reorder a box.

Each model is checked with onnxruntime (graph optimizations off: its plain kernels) to
give a non-empty box set, and compared with PyTorch's (meta.json: ort_agrees_with_torch,
the same labels in the same order and boxes within a pixel); a model that does not
export, or gives no boxes, is reported and left out of the cache.

With --scripted, each model is instead written as NAME-pt/ (model.pt: the same model,
torch.jit.script-ed; test_data_set_0/input_0.pb named images.0; PyTorch eager's
outputs), for kiln's TorchScript importer (docs/torchscript.md):

    .venv/bin/python tools/export_detection.py --scripted --only ssdlite320_mobilenet_v3_large
    build/tools/kiln check -O2 ~/.cache/kiln-zoo/detect/ssdlite320_mobilenet_v3_large-pt

Usage:
    .venv/bin/python tools/export_detection.py                  every model not cached
    .venv/bin/python tools/export_detection.py --only ssdlite320_mobilenet_v3_large --force
    .venv/bin/python tools/export_detection.py --report build/tools/kiln
        for each cached model: its op histogram (If/Loop/Scan bodies included), the
        deepest nesting of subgraphs, the ops kiln's op table (src/ir/ops.def) lacks,
        and the first failure of `kiln check`

Needs torch, torchvision, onnx, onnxruntime and scikit-image (tools/requirements-test.txt
lists the last three; --report needs only onnx).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (input size, the constructor's score threshold keyword, whether the model keeps
# that threshold on itself or on its roi_heads)
MODELS = {
    "ssdlite320_mobilenet_v3_large": (320, "score_thresh", None),
    "fasterrcnn_mobilenet_v3_large_320_fpn": (320, "box_score_thresh", "roi_heads"),
    "retinanet_resnet50_fpn": (800, "score_thresh", None),
    "maskrcnn_resnet50_fpn": (800, "box_score_thresh", "roi_heads"),
}
KEEP = (8, 48)  # the calibrated threshold keeps between these many boxes
SHARPEN = {"retinanet_resnet50_fpn": 16.0}  # class logits scaled by this (sharpen())
# Two kept scores closer than this could trade places between runtimes (PyTorch and
# onnxruntime differ by up to 1.2e-4 on Mask R-CNN's): the threshold keeps only boxes
# whose scores are further apart, where it can.
MIN_GAP = 1e-3


def photo(name, size):
    """A scikit-image photo as float32 [3, size, size] in [0, 1]."""
    import skimage.data
    import torch

    img = torch.from_numpy(getattr(skimage.data, name)().copy()).permute(2, 0, 1).float() / 255
    img = torch.nn.functional.interpolate(img[None], size=(size, size), mode="bilinear",
                                          antialias=True, align_corners=False)[0]
    return img.clamp(0, 1).contiguous()


def class_layers(model):
    """The layers that compute the class logits."""
    if hasattr(model, "roi_heads"):  # Faster and Mask R-CNN
        return [model.roi_heads.box_predictor.cls_score]
    head = model.head.classification_head
    if hasattr(head, "cls_logits"):  # RetinaNet
        return [head.cls_logits]
    return [seq[-1] for seq in head.module_list]  # SSDLite: one per feature map


def sharpen(model, factor):
    """Scale the class layers' weights by factor: a random RetinaNet head gives every
    box nearly its prior score 0.01 (the best 60 within 5% of one another), so the
    order of the detections would hang on rounding. The bias (the prior) is kept."""
    import torch

    with torch.no_grad():
        for l in class_layers(model):
            l.weight.mul_(factor)


def build(name):
    """The model with seeded, calibrated random weights and its score threshold at 0."""
    import torch
    import torchvision

    sys.path.insert(0, HERE)
    from export_zoo import randomize

    size, kw, _ = MODELS[name]
    seed = sum(map(ord, name))
    torch.manual_seed(seed)
    ctor = getattr(torchvision.models.detection, name)
    model = ctor(weights=None, weights_backbone=None, **{kw: 0.0}).eval()
    calib = ([photo("coffee", size)],)
    randomize(model, calib, torch.Generator().manual_seed(seed + 1))
    model.sharpen_factor = SHARPEN.get(name, 1.0)
    sharpen(model, model.sharpen_factor)
    return model


def set_threshold(model, name, value):
    _, kw, owner = MODELS[name]
    target = getattr(model, owner) if owner else model
    attr = "score_thresh"  # both keywords end up in an attribute of this name
    assert hasattr(target, attr), (name, owner)
    setattr(target, attr, value)


def calibrate(scores):
    """The threshold in the middle of the widest gap between consecutive sorted scores
    among the best KEEP detections, keeping no two scores closer than MIN_GAP (fewer
    than KEEP[0] boxes where the best scores are that close); the threshold, the
    boxes kept, the gap at the threshold and the smallest gap between the scores
    kept."""
    s = sorted((float(x) for x in scores), reverse=True)
    rel = [s[i] - s[i + 1] for i in range(len(s) - 1)]
    lo, hi = KEEP
    close = next((i for i, r in enumerate(rel) if r < MIN_GAP), len(rel))
    # k boxes kept: the gaps rel[0..k-1] (between them, and at the threshold) are wide
    hi = min(hi, close, len(s) - 1)
    if hi < 1:
        return None, 0, 0.0, 0.0
    ks = range(min(lo, hi), hi + 1)  # the threshold between s[k-1] and s[k]
    k = max(ks, key=lambda k: rel[k - 1])
    return (s[k - 1] + s[k]) / 2, k, rel[k - 1], min(rel[:k - 1], default=1.0)


def save_pb(array, name, path):
    from export_zoo import save_pb as zoo_save_pb  # tools/ is this script's folder

    zoo_save_pb(array, name, path)


def run_ort(path, feeds):
    from export_zoo import run_ort as zoo_run_ort

    return zoo_run_ort(path, feeds)


def export_one(name, out_dir, opset):
    import numpy as np
    import onnx
    import torch

    t0 = time.time()
    size = MODELS[name][0]
    model = build(name)
    image = photo("astronaut", size)
    with torch.no_grad():
        scores0 = model([image])[0]["scores"]
    thresh, kept, gap, min_gap = calibrate(scores0)
    if thresh is None:
        raise RuntimeError("%d detections at threshold 0, the best two of them too close"
                           % len(scores0))
    set_threshold(model, name, thresh)
    with torch.no_grad():
        ref = model([image])[0]
    keys = list(ref)  # the exporter flattens the dict in its order (boxes, scores, ...)
    torch_outs = [ref[k].numpy() for k in keys]

    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for sub in ("test_data_set_0", "torch_outputs"):
        os.makedirs(os.path.join(tmp, sub))
    path = os.path.join(tmp, "model.onnx")
    te = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.onnx.export(model, ([image],), path, dynamo=False, opset_version=opset,
                              input_names=["images"], output_names=keys,
                              do_constant_folding=True)
    export_s = time.time() - te

    tr = time.time()
    ort_names, ort_outs = run_ort(path, {"images": image.numpy()})
    ort_s = time.time() - tr
    n_boxes = ort_outs[0].shape[0]
    if n_boxes == 0:
        raise RuntimeError("onnxruntime gives no boxes (PyTorch: %d)" % len(ref["boxes"]))
    save_pb(image.numpy(), "images", os.path.join(tmp, "test_data_set_0", "input_0.pb"))
    outputs = []
    for k, (n, o) in enumerate(zip(ort_names, ort_outs)):
        save_pb(o, n, os.path.join(tmp, "test_data_set_0", "output_%d.pb" % k))
        t = torch_outs[k] if k < len(torch_outs) else None
        if t is not None:
            save_pb(t, n, os.path.join(tmp, "torch_outputs", "output_%d.pb" % k))
        same = t is not None and t.shape == o.shape
        err = float(np.abs(t.astype(np.float64) - o).max(initial=0)) if same else None
        outputs.append(dict(name=n, dtype=str(o.dtype), shape=list(o.shape),
                            torch_shape=list(t.shape) if t is not None else None,
                            max_abs_vs_torch=err))
    # the same boxes in the same order: labels equal, boxes within a pixel
    agree = all(o["max_abs_vs_torch"] is not None for o in outputs) and \
        all(o["max_abs_vs_torch"] < (0.5 if o["name"] == "labels" else 1.0) for o in outputs)

    mo = onnx.load(path)
    ops, depth = op_histogram(mo.graph)
    meta = dict(
        name=name, exporter="torchscript", torch=torch.__version__, opset=opset,
        input=[3, size, size], image="skimage.data.astronaut",
        logit_scale=model.sharpen_factor, score_threshold=thresh, threshold_gap=gap,
        min_score_gap=min_gap, boxes=int(n_boxes), calibrated_boxes=kept,
        ort_agrees_with_torch=agree,
        torch_boxes=int(len(ref["boxes"])), params=sum(p.numel() for p in model.parameters()),
        nodes=sum(ops.values()), top_level_nodes=len(mo.graph.node), subgraph_depth=depth,
        ops=dict(sorted(ops.items())), outputs=outputs,
        model_bytes=os.path.getsize(path),
        folder_bytes=sum(os.path.getsize(os.path.join(d, f))
                         for d, _, fs in os.walk(tmp) for f in fs),
        export_seconds=round(export_s, 1), ort_seconds=round(ort_s, 2),
        total_seconds=round(time.time() - t0, 1),
    )
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    return meta


def op_histogram(graph, depth=0):
    """Op counts of graph and, recursively, of every subgraph its nodes hold (If's
    branches, Loop's and Scan's bodies), and the deepest nesting of subgraphs (0: none)."""
    import onnx

    ops, deepest = {}, depth
    for node in graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else node.domain + "." + node.op_type
        ops[key] = ops.get(key, 0) + 1
        for a in node.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else \
                list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []
            for g in subs:
                sub_ops, sub_depth = op_histogram(g, depth + 1)
                deepest = max(deepest, sub_depth)
                for k, v in sub_ops.items():
                    ops[k] = ops.get(k, 0) + v
    return ops, deepest


def kiln_ops(root):
    """The ONNX op names kiln imports: src/ir/ops.def's ops of the ONNX domain, the old
    names src/import/onnx_canon.c maps onto them, and Constant (the importer makes its
    value a constant tensor: no node)."""
    with open(os.path.join(root, "src", "ir", "ops.def")) as f:
        names = set(re.findall(r'^KL_OP\(\w+, "(\w+)", KL_DOMAIN_ONNX', f.read(), re.M))
    with open(os.path.join(root, "src", "import", "onnx_canon.c")) as f:
        names |= set(re.findall(r'\{"(\w+)", KL_OP_\w+\}', f.read()))
    return names | {"Constant"}


def kiln_check(kiln, folder):
    """The first failure of `kiln check` on folder (its stderr line), or 'pass'."""
    try:
        r = subprocess.run([kiln, "check", folder], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "timed out after 600 s"
    if r.returncode == 0:
        return "pass: " + r.stdout.splitlines()[0]
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    prefix = "kiln check: %s: " % folder
    return lines[0][len(prefix):] if lines and lines[0].startswith(prefix) else \
        lines[0] if lines else "exit %d, nothing on stderr" % r.returncode


def _splice(graph, sub, prefix, bound, nodes):
    """Append the nodes of subgraph sub to nodes, its own values renamed with prefix and
    its inputs renamed as bound says (values of the outer graph keep their names); its
    initializers go to graph. The renaming function, or None when a node of sub holds a
    subgraph of its own."""
    import copy

    import onnx

    local = {v for b in sub.node for v in b.output if v} | {i.name for i in sub.initializer}
    rename = lambda v: bound.get(v, prefix + v if v in local else v)
    for init in sub.initializer:
        init = copy.deepcopy(init)
        init.name = rename(init.name)
        graph.initializer.append(init)
    for b in sub.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in b.attribute):
            return None
        b = copy.deepcopy(b)
        b.name = prefix + b.name
        b.input[:] = [rename(v) for v in b.input]
        b.output[:] = [rename(v) for v in b.output]
        nodes.append(b)
    return rename


def inline_control_flow(folder, out):
    """A probe of what comes after If and Loop: folder's model with every If replaced by
    the branch it takes on the test input and every Loop unrolled for the trips it makes
    there (onnxruntime evaluates the conditions and trip counts), written with the test
    data to out; the folder, or why not. The result is right for this input only: it is
    for finding the next failures, not a model to keep."""
    import copy

    import numpy as np
    import onnx
    import onnx.numpy_helper
    from onnx import helper

    mo = onnx.load(os.path.join(folder, "model.onnx"))
    flow = [n for n in mo.graph.node if n.op_type in ("If", "Loop")]
    if not flow:
        return None, "no If or Loop nodes"
    # the conditions and trip counts, as extra outputs of one onnxruntime run
    probe = copy.deepcopy(mo)
    have = {o.name for o in probe.graph.output}
    for n in flow:
        wanted = [(n.input[0], onnx.TensorProto.BOOL)] if n.op_type == "If" else \
            [(n.input[0], onnx.TensorProto.INT64), (n.input[1], onnx.TensorProto.BOOL)]
        for v, dt in wanted:
            if v and v not in have:
                have.add(v)
                probe.graph.output.append(helper.make_tensor_value_info(v, dt, None))
    os.makedirs(out, exist_ok=True)
    probe_path = os.path.join(out, "probe.onnx")
    onnx.save(probe, probe_path)
    t = onnx.TensorProto()
    with open(os.path.join(folder, "test_data_set_0", "input_0.pb"), "rb") as f:
        t.ParseFromString(f.read())
    feeds = {t.name: onnx.numpy_helper.to_array(t)}
    names, values = run_ort(probe_path, feeds)
    os.remove(probe_path)
    value = lambda v: np.asarray(dict(zip(names, values))[v]).reshape(-1)[0]
    zero = "probe/axis0"
    mo.graph.initializer.append(onnx.numpy_helper.from_array(np.array([0], np.int64), zero))
    nodes = []
    for n in mo.graph.node:
        if n.op_type == "If":
            taken = bool(value(n.input[0]))
            branch = next(a.g for a in n.attribute
                          if a.name == ("then_branch" if taken else "else_branch"))
            prefix = n.name + ("/then/" if taken else "/else/")
            rename = _splice(mo.graph, branch, prefix, {}, nodes)
            if not rename:
                return None, "%s's branch holds a subgraph" % n.name
            for src, dst in zip(branch.output, n.output):
                nodes.append(helper.make_node("Identity", [rename(src.name)], [dst],
                                              name=prefix + "out_" + dst))
        elif n.op_type == "Loop":
            body = next(a.g for a in n.attribute if a.name == "body")
            if len(n.input) > 1 and n.input[1] and not bool(value(n.input[1])):
                return None, "%s does not start (its condition is false)" % n.name
            if not n.input[0]:
                return None, "%s has no trip count" % n.name
            trips, carried = int(value(n.input[0])), list(n.input[2:])
            n_carried = len(carried)
            pieces = [[] for _ in body.output[1 + n_carried:]]
            for i in range(trips):
                prefix = "%s/trip%d/" % (n.name, i)
                it = prefix + "iter"
                mo.graph.initializer.append(onnx.numpy_helper.from_array(
                    np.array(i, np.int64), it))
                cond = prefix + "cond"
                mo.graph.initializer.append(onnx.numpy_helper.from_array(np.array(True), cond))
                bound = {body.input[0].name: it, body.input[1].name: cond}
                bound.update({b.name: v for b, v in zip(body.input[2:], carried)})
                rename = _splice(mo.graph, body, prefix, bound, nodes)
                if not rename:
                    return None, "%s's body holds a subgraph" % n.name
                outs = [rename(o.name) for o in body.output]
                carried = outs[1:1 + n_carried]
                for k, v in enumerate(outs[1 + n_carried:]):
                    pieces[k].append(prefix + "stacked_%d" % k)
                    nodes.append(helper.make_node("Unsqueeze", [v, zero], [pieces[k][-1]],
                                                  name=prefix + "unsqueeze_%d" % k))
            if trips == 0 and pieces:
                return None, "%s makes no trips: its scan outputs would be empty" % n.name
            for v, dst in zip(carried, n.output[:n_carried]):
                nodes.append(helper.make_node("Identity", [v], [dst], name=dst + "/final"))
            for k, dst in enumerate(n.output[n_carried:]):
                nodes.append(helper.make_node("Concat", pieces[k], [dst], axis=0,
                                              name=dst + "/concat"))
        else:
            nodes.append(n)
    del mo.graph.node[:]
    mo.graph.node.extend(nodes)
    onnx.save(mo, os.path.join(out, "model.onnx"))
    shutil.rmtree(os.path.join(out, "test_data_set_0"), ignore_errors=True)
    shutil.copytree(os.path.join(folder, "test_data_set_0"), os.path.join(out, "test_data_set_0"))
    # the probe must still compute the model's outputs
    _, got = run_ort(os.path.join(out, "model.onnx"), feeds)
    for k, g in enumerate(got):
        want = onnx.TensorProto()
        with open(os.path.join(out, "test_data_set_0", "output_%d.pb" % k), "rb") as f:
            want.ParseFromString(f.read())
        w = onnx.numpy_helper.to_array(want)
        if g.shape != w.shape or not np.array_equal(g, w):
            return None, "the inlined model's output %d differs from the model's" % k
    return out, None


def report(kiln, cache, names, probe=False):
    import onnx

    known = kiln_ops(os.path.dirname(HERE))
    for name in names:
        folder = os.path.join(cache, name)
        path = os.path.join(folder, "model.onnx")
        if not os.path.isfile(path):
            print("%s: not in %s" % (name, cache))
            continue
        mo = onnx.load(path, load_external_data=False)
        ops, depth = op_histogram(mo.graph)
        meta = {}
        if os.path.isfile(os.path.join(folder, "meta.json")):
            with open(os.path.join(folder, "meta.json")) as f:
                meta = json.load(f)
        print("## %s" % name)
        print("nodes %d (%d at the top level), subgraph nesting depth %d, model %.1f MB, "
              "export %s s, boxes %s (threshold %.6g)" % (
                  sum(ops.values()), len(mo.graph.node), depth,
                  os.path.getsize(path) / 1e6, meta.get("export_seconds", "?"),
                  meta.get("boxes", "?"), meta.get("score_threshold", float("nan"))))
        print("ops: " + ", ".join("%s %d" % kv for kv in sorted(ops.items(),
                                                                 key=lambda kv: (-kv[1], kv[0]))))
        missing = sorted(k for k in ops if k not in known)
        print("not in kiln's op table: " + (", ".join(missing) if missing else "none"))
        if kiln:
            print("kiln check: " + kiln_check(kiln, folder))
        if kiln and probe:
            inlined, why = inline_control_flow(folder, os.path.join(cache, "probe",
                                                                    name + "-inlined"))
            print("with If and Loop inlined for this input: " +
                  (kiln_check(kiln, inlined) if inlined else why))
        print()
        sys.stdout.flush()


def export_scripted(name, out_dir):
    """NAME-pt/: the same model (same weights and calibrated threshold) compiled by
    torch.jit.script and saved as model.pt, its input named images.0 (kiln's name for
    element 0 of the List[Tensor] parameter images), PyTorch eager's boxes, scores and
    labels as the expected outputs."""
    import torch

    size = MODELS[name][0]
    model = build(name)
    image = photo("astronaut", size)
    with torch.no_grad():
        thresh = calibrate(model([image])[0]["scores"])[0]
        if thresh is None:
            raise RuntimeError("no threshold keeps boxes whose scores are apart")
        set_threshold(model, name, thresh)
        ref = model([image])[0]
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "test_data_set_0"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(model).save(os.path.join(tmp, "model.pt"))
    save_pb(image.numpy(), "images.0", os.path.join(tmp, "test_data_set_0", "input_0.pb"))
    for k, key in enumerate(ref):
        save_pb(ref[key].numpy(), key, os.path.join(tmp, "test_data_set_0", "output_%d.pb" % k))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    return len(ref["boxes"]), thresh


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.expanduser("~/.cache/kiln-zoo/detect"))
    p.add_argument("--only", help="comma-separated model names")
    p.add_argument("--force", action="store_true", help="re-export what is cached")
    p.add_argument("--opset", type=int, default=17)
    p.add_argument("--list", action="store_true")
    p.add_argument("--scripted", action="store_true",
                   help="write NAME-pt/ instead: the model torch.jit.script-ed and saved, "
                        "with PyTorch eager's outputs (kiln check NAME-pt)")
    p.add_argument("--probe", action="store_true",
                   help="with --report KILN: also check each model with its If nodes "
                        "replaced by the branches they take on the test input and its Loops "
                        "unrolled (written to OUT/probe/NAME-inlined), to see what fails "
                        "after If and Loop")
    p.add_argument("--report", metavar="KILN", nargs="?", const="",
                   help="print the cached models' ops (and, given the kiln binary, the "
                        "first failure of kiln check) instead of exporting")
    args = p.parse_args()
    names = list(MODELS)
    if args.only:
        names = args.only.split(",")
        bad = [n for n in names if n not in MODELS]
        if bad:
            p.error("unknown model(s) %s; the models are %s" % (", ".join(bad), ", ".join(MODELS)))
    if args.list:
        print("\n".join(names))
        return 0
    if args.report is not None:
        report(args.report, args.out, names, args.probe)
        return 0
    os.makedirs(args.out, exist_ok=True)
    if args.scripted:
        for name in names:
            boxes, thresh = export_scripted(name, os.path.join(args.out, name + "-pt"))
            print("%s-pt: %d boxes (threshold %.6g)" % (name, boxes, thresh), flush=True)
        return 0
    failed = 0
    for name in names:
        out_dir = os.path.join(args.out, name)
        if os.path.isfile(os.path.join(out_dir, "model.onnx")) and not args.force:
            print("%s: cached" % name)
            continue
        print("%s: exporting" % name, flush=True)
        try:
            meta = export_one(name, out_dir, args.opset)
        except Exception as e:  # one model's failure is a fact to report, not the end
            failed += 1
            shutil.rmtree(out_dir + ".tmp", ignore_errors=True)
            print("%s: FAILED: %s: %s" % (name, type(e).__name__, str(e).splitlines()[0]
                                          if str(e) else ""), flush=True)
            continue
        print("%s: %d boxes (PyTorch %d, the same: %s; threshold %.6g), %d nodes, depth %d, "
              "%.1f MB, export %.1f s, total %.1f s" % (
                  name, meta["boxes"], meta["torch_boxes"],
                  "yes" if meta["ort_agrees_with_torch"] else "NO", meta["score_threshold"],
                  meta["nodes"], meta["subgraph_depth"], meta["model_bytes"] / 1e6,
                  meta["export_seconds"], meta["total_seconds"]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
