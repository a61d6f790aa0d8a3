#!/usr/bin/env python3
"""Export kiln's model zoo: real CNN and transformer architectures as ONNX test cases.

Each model becomes one folder in the cache (default ~/.cache/kiln-zoo, --out to change),
the layout `kiln check` reads:

    NAME/model.onnx
    NAME/test_data_set_0/input_K.pb, output_K.pb   expected outputs from onnxruntime
    NAME/torch_outputs/output_K.pb                  PyTorch's outputs for the same inputs
    NAME/float64_outputs/output_K.pb                the model run in float64 by PyTorch
    NAME/meta.json                                  opset, ops, sizes, times, errors
    NAME-pt/model.pt, test_data_set_0/, float64_outputs/, meta.json
                    torchvision models only: the same model traced (torch.jit.trace, eval
                    mode) and saved, NAME's inputs, PyTorch eager's outputs as expected

Nothing is downloaded from a model hub: every model is built from its torchvision
constructor or its Hugging Face config, with random weights, seeded per model so a
re-export gives the same files. Random weights are made to behave like trained ones:

- BatchNorm running_mean/running_var are set, in one calibration pass, to the statistics
  of the layer's real input on a separate random image, then perturbed (mean shifted by
  up to 0.2 std, variance scaled by 0.5..2); weight and bias are random too. Identity
  statistics would hide BatchNorm bugs; raw random statistics make activations grow or
  vanish over 50+ layers, which hides everything else.
- LayerNorm/GroupNorm weights and biases, zero-initialized weights and biases of Conv
  and Linear (ViT's head starts at zero), and ConvNeXt's layer scale (1e-6 at init,
  which would silence every block) get random values.
- Where the largest output would be below 0.5 (AlexNet, VGG, MobileNet V3, GoogLeNet),
  the last Linear layer is scaled to bring it to about 1, so the absolute tolerance of
  the test stays small next to the values it checks.

Models run in eval mode with batch 1: 224x224 images (299x299 for Inception v3);
transformers get 32 tokens with the last 5 positions padded out by the attention mask.
The exporter is the TorchScript one (dynamo=False) at opset 17 (--opset to change);
`--exporter dynamo` uses torch.export instead (needs onnxscript) and names the folders
NAME-dynamo. onnxruntime runs with graph optimizations off, so the expected outputs
come from its plain kernels, op by op. The float64 outputs are the truth the float32
runtimes approximate: they tell rounding from bugs when a tolerance is in question.

Usage:
    .venv/bin/python tools/export_zoo.py              every model not yet in the cache
    .venv/bin/python tools/export_zoo.py --list       names and families
    .venv/bin/python tools/export_zoo.py --only resnet18,bert_base --force
    .venv/bin/python tools/export_zoo.py --exporter dynamo --opset 18
    .venv/bin/python tools/export_zoo.py --pt-only   NAME-pt/ for the cached torchvision models
    .venv/bin/python tools/export_zoo.py --report build/tools/kiln   docs/zoo.md's table
    .venv/bin/python tools/export_zoo.py --only raft_small --exporter dynamo --opset 18
                      an EXTRA model (not exported unless named; also timm's
                      efficientnetv2_rw_t): docs/passes.md, "Accuracy against float64"

Needs torch, torchvision, transformers, onnx and onnxruntime, and onnxscript for the
dynamo exporter (tools/setup.sh --python installs onnx; `.venv/bin/pip install torch
torchvision transformers onnxruntime onnxscript` the rest). --list needs none of them.

Cost, measured on 2 cores shared with other work (torch 2.15, CPU): the 27 models take
about 15 minutes and 4.8 GB of disk (the folders of VGG-11/16, GPT-2, RoBERTa and BERT
are 0.4 to 0.65 GB each); `--exporter dynamo` takes about 25 minutes and another 4.7 GB.
Allow twice the time on a busy machine. docs/zoo.md has the per-model table.
"""

import argparse
import json
import os
import shutil
import sys
import time
import warnings


def _tv():
    import torchvision

    return torchvision.models


def _image(size=224):
    return lambda g: {"input": _randn(g, 1, 3, size, size)}


def _randn(g, *shape):
    import torch

    return torch.randn(*shape, generator=g)


# A model is a builder (no arguments, returns the nn.Module) and an input maker (takes a
# torch.Generator, returns {input name: tensor}).
def _vision(ctor, size=224, **kw):
    return (lambda: getattr(_tv(), ctor)(weights=None, **kw)), _image(size)


# name -> (family, torchvision constructor, its keyword arguments)
VISION = {
    "resnet18": ("ResNet", "resnet18", {}),
    "resnet50": ("ResNet", "resnet50", {}),
    "resnext50_32x4d": ("ResNeXt", "resnext50_32x4d", {}),
    "wide_resnet50_2": ("Wide-ResNet", "wide_resnet50_2", {}),
    "mobilenet_v2": ("MobileNet V2", "mobilenet_v2", {}),
    "mobilenet_v3_small": ("MobileNet V3", "mobilenet_v3_small", {}),
    "mobilenet_v3_large": ("MobileNet V3", "mobilenet_v3_large", {}),
    "efficientnet_b0": ("EfficientNet", "efficientnet_b0", {}),
    "efficientnet_v2_s": ("EfficientNetV2", "efficientnet_v2_s", {}),
    "shufflenet_v2_x1_0": ("ShuffleNet V2", "shufflenet_v2_x1_0", {}),
    "shufflenet_v2_x0_5": ("ShuffleNet V2", "shufflenet_v2_x0_5", {}),
    "squeezenet1_0": ("SqueezeNet", "squeezenet1_0", {}),
    "squeezenet1_1": ("SqueezeNet", "squeezenet1_1", {}),
    "densenet121": ("DenseNet", "densenet121", {}),
    "regnet_y_400mf": ("RegNet", "regnet_y_400mf", {}),
    "mnasnet1_0": ("MNASNet", "mnasnet1_0", {}),
    "mnasnet0_5": ("MNASNet", "mnasnet0_5", {}),
    "googlenet": ("GoogLeNet", "googlenet", {"aux_logits": False, "init_weights": True}),
    "inception_v3": ("Inception", "inception_v3", {"aux_logits": False, "init_weights": True}),
    "vgg11": ("VGG", "vgg11", {}),
    "vgg16": ("VGG", "vgg16", {}),
    "alexnet": ("AlexNet", "alexnet", {}),
    "convnext_tiny": ("ConvNeXt", "convnext_tiny", {}),
    "vit_b_16": ("ViT", "vit_b_16", {}),
    "swin_t": ("Swin", "swin_t", {}),
}

SEQ = 32  # tokens per transformer input
PAD = 5  # trailing positions masked out


def _text_inputs(vocab, names):
    """input_ids plus the masks named in names, right-padded so no row is fully masked."""

    def make(g):
        import torch

        ids = torch.randint(0, vocab, (1, SEQ), generator=g, dtype=torch.int64)
        out = {"input_ids": ids}
        if "attention_mask" in names:
            mask = torch.ones(1, SEQ, dtype=torch.int64)
            mask[:, SEQ - PAD:] = 0
            out["attention_mask"] = mask
        if "token_type_ids" in names:
            tt = torch.zeros(1, SEQ, dtype=torch.int64)
            tt[:, SEQ // 2:] = 1
            out["token_type_ids"] = tt
        return out

    return make


def _hf(model_cls, config_cls, vocab, names, **config):
    def build():
        import transformers

        cfg = getattr(transformers, config_cls)(**config)
        # Eager attention: the explicit MatMul/Softmax graph the classic exporter writes.
        cfg._attn_implementation = "eager"
        return getattr(transformers, model_cls)(cfg)

    return build, _text_inputs(vocab, names)


# name -> (family, model class, config class, vocabulary size, input names, config
# overrides). Configs are the library defaults, which are the real base sizes
# (BertConfig() is bert-base-uncased, GPT2Config() is gpt2, T5Config() is t5-small);
# RoBERTa's overrides are roberta-base's values where they differ from BERT's.
TEXT = {
    "bert_base": ("BERT", "BertModel", "BertConfig", 30522,
                  ["input_ids", "attention_mask", "token_type_ids"], {}),
    "distilbert": ("DistilBERT", "DistilBertModel", "DistilBertConfig", 30522,
                   ["input_ids", "attention_mask"], {}),
    "roberta_base": ("RoBERTa", "RobertaModel", "RobertaConfig", 50265,
                     ["input_ids", "attention_mask"], {"vocab_size": 50265,
                                                       "max_position_embeddings": 514,
                                                       "type_vocab_size": 1,
                                                       "pad_token_id": 1}),
    "gpt2": ("GPT-2", "GPT2LMHeadModel", "GPT2Config", 50257,
             ["input_ids", "attention_mask"], {"use_cache": False}),
    "t5_encoder": ("T5", "T5EncoderModel", "T5Config", 32128,
                   ["input_ids", "attention_mask"], {}),
}


def _timm(name):
    def build():
        import timm

        return timm.create_model(name, pretrained=False)

    return build


def _raft_inputs(g):
    return {"image1": _randn(g, 1, 3, 224, 224), "image2": _randn(g, 1, 3, 224, 224)}


# Not in the default zoo (not exported unless named with --only): models of issue 21's
# accuracy question. timm's efficientnetv2_rw_t needs `pip install timm`; RAFT (optical
# flow, two images, 12 refinement steps: 12 flow outputs) is meant for --exporter dynamo.
EXTRA = {
    "efficientnetv2_rw_t": ("EfficientNetV2 (timm)", _timm("efficientnetv2_rw_t"),
                            _image(224), ["input"]),
    "raft_small": ("RAFT", lambda: _tv().optical_flow.raft_small(weights=None), _raft_inputs,
                   ["image1", "image2"]),
}


def zoo(extra=False):
    """Every model: name -> dict(family, build, inputs, input_names); with extra, the
    EXTRA models too."""
    models = {}
    for name, (family, ctor, kw) in VISION.items():
        build, inputs = _vision(ctor, 299 if name == "inception_v3" else 224, **kw)
        models[name] = dict(family=family, build=build, inputs=inputs, input_names=["input"])
    for name, (family, mcls, ccls, vocab, names, cfg) in TEXT.items():
        build, inputs = _hf(mcls, ccls, vocab, names, **cfg)
        models[name] = dict(family=family, build=build, inputs=inputs, input_names=names)
    if extra:
        for name, (family, build, inputs, names) in EXTRA.items():
            models[name] = dict(family=family, build=build, inputs=inputs, input_names=names)
    return models


def randomize(model, calib_args, g):
    """Random, trained-looking weights; see the module docstring for why."""
    import torch
    from torch import nn

    def uniform(t, lo, hi):
        return torch.rand(t.shape, generator=g) * (hi - lo) + lo

    with torch.no_grad():
        for m in model.modules():
            # ViT's head starts at zero, which would make its output the bias alone.
            if isinstance(m, (nn.Conv2d, nn.Linear)) and not m.weight.any():
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / fan_in ** 0.5)
            if isinstance(m, (nn.Conv2d, nn.Linear)) and m.bias is not None:
                if not m.bias.any():
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.05)
            if isinstance(m, (nn.LayerNorm, nn.GroupNorm)) and m.weight is not None:
                m.weight.copy_(uniform(m.weight, 0.5, 1.5))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
            if type(m).__name__ == "T5LayerNorm":
                m.weight.copy_(uniform(m.weight, 0.5, 1.5))
            if hasattr(m, "layer_scale") and isinstance(m.layer_scale, nn.Parameter):
                m.layer_scale.copy_(uniform(m.layer_scale, 0.1, 1.0))
        calibrate_bn(model, calib_args, g, uniform)


def calibrate_bn(model, calib_args, g, uniform):
    """Set each BatchNorm's statistics from its real input, perturbed. A pre-hook runs
    before each BN in execution order, so every layer sees calibrated layers upstream."""
    import torch
    from torch import nn

    def hook(m, args):
        x = args[0]
        dims = [d for d in range(x.dim()) if d != 1]
        mean = x.mean(dim=dims)
        var = x.var(dim=dims, unbiased=False)
        std = (var + m.eps).sqrt()
        m.running_mean.copy_(mean + 0.2 * std * (uniform(mean, -1, 1)))
        m.running_var.copy_(var * uniform(var, 0.5, 2.0) + 1e-3)
        if m.weight is not None:
            m.weight.copy_(uniform(m.weight, 0.5, 1.5))
            m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)

    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    handles = [m.register_forward_pre_hook(hook) for m in bns]
    try:
        with torch.no_grad():
            model(*calib_args)
    finally:
        for h in handles:
            h.remove()


def scale_output(model, calib_args):
    """Scale the last Linear layer so the largest output is about 1 when it would be
    below 0.5 (AlexNet, VGG, MobileNet V3 end in layers initialized with std 0.01): a
    fixed atol would otherwise be loose next to the values it checks."""
    import torch
    from torch import nn

    with torch.no_grad():
        peak = max(float(o.abs().max()) for o in flatten_outputs(model(*calib_args)))
        last = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if peak >= 0.5 or peak == 0 or not last:
            return
        last[-1].weight.mul_(1 / peak)
        if last[-1].bias is not None:
            last[-1].bias.mul_(1 / peak)


def flatten_outputs(out):
    """Tensors of a model's return value in order (tuple, ModelOutput, tensor; a dict's
    values, as torchvision's segmentation models return; None, an encoder-decoder's
    absent cache, left out)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if out is None:
        return []
    if isinstance(out, dict):
        out = list(out.values())
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    res = []
    for o in out:
        res.extend(flatten_outputs(o))
    return res


def positional(model, names):
    """The model taking its inputs positionally, in the order of names, and returning a
    flat tuple of tensors: what the exporters want."""
    import torch

    class Positional(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            if not hasattr(self.model, "config"):  # torchvision: forward(x)
                return tuple(flatten_outputs(self.model(*args)))
            kw = dict(zip(names, args), return_dict=False)
            return tuple(flatten_outputs(self.model(**kw)))

    return Positional()


def save_pb(tensor, name, path):
    import numpy as np
    import onnx.numpy_helper

    t = onnx.numpy_helper.from_array(np.ascontiguousarray(tensor), name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def run_ort(path, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(None, feeds)


def diff(got, ref):
    """Largest error of got against ref, absolute and scaled by ref's largest magnitude:
    the scaled error is what float32 rounding bounds (elementwise relative error is not,
    for outputs near zero after cancellation)."""
    import numpy as np

    d = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    scale = float(np.abs(ref).max(initial=0))
    max_abs = float(d.max(initial=0))
    return dict(max_abs=max_abs, ref_max_abs=scale, scaled=max_abs / scale if scale else max_abs)


def run_float64(wrapped, args):
    """The model in float64 on the same inputs: the truth that float32 runtimes
    (onnxruntime, PyTorch, kiln) approximate, to tell rounding from bugs."""
    import copy

    import torch

    m64 = copy.deepcopy(wrapped).double()
    a64 = tuple(a.double() if a.is_floating_point() else a for a in args)
    # RAFT makes its coordinate grids itself, in float32 (.float()): in float64 here
    raft = sys.modules.get("torchvision.models.optical_flow.raft")
    grid = raft.make_coords_grid if raft else None
    if raft:
        raft.make_coords_grid = lambda *a, **k: grid(*a, **k).double()
    try:
        with torch.no_grad():
            return [o.numpy() for o in m64(*a64)]
    finally:
        if raft:
            raft.make_coords_grid = grid


def export_model(wrapped, args, names, out_names, path, opset, exporter):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            if exporter == "dynamo":
                prog = torch.onnx.export(wrapped, args, dynamo=True, opset_version=opset,
                                         input_names=names, output_names=out_names)
                prog.save(path)
            else:
                torch.onnx.export(wrapped, args, path, dynamo=False, opset_version=opset,
                                  input_names=names, output_names=out_names,
                                  do_constant_folding=True)


def prepare(name, spec, wrap=None):
    """The model with its seeded random weights, its test inputs and the wrapper that
    takes them positionally (positional(), or wrap(model, names)): the same every time
    for a name (same torch version)."""
    import torch

    seed = sum(map(ord, name))
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = spec["build"]().eval()
    names = spec["input_names"]
    wrapped = (wrap or positional)(model, names).eval()
    calib = spec["inputs"](torch.Generator().manual_seed(seed + 1))
    randomize(wrapped, tuple(calib[n] for n in names), g)
    scale_output(wrapped, tuple(calib[n] for n in names))
    inputs = spec["inputs"](torch.Generator().manual_seed(seed + 2))
    return model, wrapped, inputs


def export_one(name, spec, out_dir, opset, exporter):
    import onnx
    import torch

    t0 = time.time()
    model, wrapped, inputs = prepare(name, spec)
    names = spec["input_names"]
    args = tuple(inputs[n] for n in names)
    with torch.no_grad():
        torch_outs = [o.numpy() for o in wrapped(*args)]
    f64_outs = run_float64(wrapped, args)
    out_names = ["output" if len(torch_outs) == 1 else "output_%d" % i
                 for i in range(len(torch_outs))]

    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for sub in ("test_data_set_0", "torch_outputs", "float64_outputs"):
        os.makedirs(os.path.join(tmp, sub))
    model_path = os.path.join(tmp, "model.onnx")
    te = time.time()
    export_model(wrapped, args, names, out_names, model_path, opset, exporter)
    export_s = time.time() - te

    mo = onnx.load(model_path)
    graph_inputs = [i.name for i in mo.graph.input]
    feeds = {n: inputs[n].numpy() for n in names if n in graph_inputs}
    ort_names, ort_outs = run_ort(model_path, feeds)
    for k, n in enumerate(graph_inputs):
        save_pb(feeds[n], n, os.path.join(tmp, "test_data_set_0", "input_%d.pb" % k))
    errors = []
    for k, (n, o) in enumerate(zip(ort_names, ort_outs)):
        save_pb(o, n, os.path.join(tmp, "test_data_set_0", "output_%d.pb" % k))
        save_pb(torch_outs[k], n, os.path.join(tmp, "torch_outputs", "output_%d.pb" % k))
        save_pb(f64_outs[k], n, os.path.join(tmp, "float64_outputs", "output_%d.pb" % k))
        errors.append(dict(name=n, shape=list(o.shape),
                           ort_vs_torch=diff(o, torch_outs[k]),
                           ort_vs_float64=diff(o, f64_outs[k]),
                           torch_vs_float64=diff(torch_outs[k], f64_outs[k])))

    ops = {}
    for node in mo.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else node.domain + "." + node.op_type
        ops[key] = ops.get(key, 0) + 1
    meta = dict(
        name=name, family=spec["family"], exporter=exporter, torch=torch.__version__,
        opset=[o.version for o in mo.opset_import if o.domain in ("", "ai.onnx")][0],
        nodes=len(mo.graph.node), ops=dict(sorted(ops.items())),
        params=sum(p.numel() for p in model.parameters()),
        inputs={n: list(feeds[n].shape) for n in feeds},
        model_bytes=os.path.getsize(model_path),
        folder_bytes=sum(os.path.getsize(os.path.join(d, f))
                         for d, _, fs in os.walk(tmp) for f in fs),
        export_seconds=round(export_s, 1),
        total_seconds=round(time.time() - t0, 1),
        errors=errors,
    )
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    if name in VISION and exporter == "torchscript":
        write_pt(name, model, args, torch_outs, f64_outs, out_dir)
    return meta


def write_pt(name, model, args, torch_outs, f64_outs, onnx_dir):
    """NAME-pt/ beside NAME/: the torchvision model traced in eval mode (torch.jit.trace,
    torch.jit.save) as model.pt, NAME's test inputs (named as forward's parameters), and
    PyTorch eager's outputs as the
    expected ones (test_data_set_0/output_K.pb), the float64 outputs as float64_outputs/.
    kiln check reads the folder as it reads NAME/."""
    import torch

    out_dir = onnx_dir + "-pt"
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for sub in ("test_data_set_0", "float64_outputs"):
        os.makedirs(os.path.join(tmp, sub))
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            traced = torch.jit.trace(model, args)
            traced_outs = [o.numpy() for o in flatten_outputs(traced(*args))]
        path = os.path.join(tmp, "model.pt")
        torch.jit.save(traced, path)
    trace_s = time.time() - t0
    # NAME's inputs, named as forward's parameters ("x") rather than as the ONNX graph's
    params = [a.name for a in traced.forward.schema.arguments[1:]]
    for k, x in enumerate(args):
        save_pb(x.numpy(), params[k], os.path.join(tmp, "test_data_set_0", "input_%d.pb" % k))
    errors = []
    for k, o in enumerate(torch_outs):
        n = "output" if len(torch_outs) == 1 else "output_%d" % k
        save_pb(o, n, os.path.join(tmp, "test_data_set_0", "output_%d.pb" % k))
        save_pb(f64_outs[k], n, os.path.join(tmp, "float64_outputs", "output_%d.pb" % k))
        errors.append(dict(name=n, shape=list(o.shape),
                           traced_vs_eager=diff(traced_outs[k], o),
                           eager_vs_float64=diff(o, f64_outs[k])))
    meta = dict(name=name + "-pt", family=VISION[name][0], exporter="torch.jit.trace",
                torch=torch.__version__,
                params=sum(p.numel() for p in model.parameters()),
                inputs={"input": list(args[0].shape)},
                model_bytes=os.path.getsize(path),
                folder_bytes=sum(os.path.getsize(os.path.join(d, f))
                                 for d, _, fs in os.walk(tmp) for f in fs),
                trace_seconds=round(trace_s, 1), errors=errors)
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    return meta


def export_pt_only(name, spec, cache):
    """write_pt for a model whose ONNX folder is cached: the model is rebuilt from its
    seed, and its inputs and eager outputs must be the cached ones (else the cache was
    made by another torch or another version of this script, and the .pt would not be
    the same model)."""
    import numpy as np
    import torch

    onnx_dir = os.path.join(cache, name)
    model, wrapped, inputs = prepare(name, spec)
    args = tuple(inputs[n] for n in spec["input_names"])
    cached = read_pb(os.path.join(onnx_dir, "test_data_set_0", "input_0.pb"))[1]
    if not np.array_equal(cached, args[0].numpy()):
        raise RuntimeError("the rebuilt inputs differ from %s's; re-export it with --force"
                           % onnx_dir)
    with torch.no_grad():
        torch_outs = [o.numpy() for o in wrapped(*args)]
    for k, o in enumerate(torch_outs):
        ref = read_pb(os.path.join(onnx_dir, "torch_outputs", "output_%d.pb" % k))[1]
        d = diff(o, ref)
        if d["scaled"] > 1e-6:
            raise RuntimeError("the rebuilt model's output %d is %.2g (scaled) from the cached "
                               "PyTorch output; re-export it with --force" % (k, d["scaled"]))
    f64_outs = [read_pb(os.path.join(onnx_dir, "float64_outputs", "output_%d.pb" % k))[1]
                for k in range(len(torch_outs))]
    return write_pt(name, model, args, torch_outs, f64_outs, onnx_dir)


def read_pb(path):
    import onnx
    import onnx.numpy_helper

    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, onnx.numpy_helper.to_array(t)


def tolerances(path):
    """name -> (rtol, atol) from the table in tests/zoo/run.sh."""
    import re

    tol = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"^(\w+)\s+([0-9.e+-]+)\s+([0-9.e+-]+)\s*$", line)
            if m:
                tol[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return tol


def kiln_errors(kiln, folder, rtol, atol):
    """Run kiln on the model's inputs: its errors against onnxruntime and float64, the
    elements out of tolerance (rtol, atol), and the atol that rtol 1e-4 alone would need."""
    import subprocess
    import tempfile

    import numpy as np

    case = os.path.join(folder, "test_data_set_0")
    cmd = [kiln, "run", os.path.join(folder, "model.onnx"), "--format", "npy"]
    k = 0
    while os.path.exists(os.path.join(case, "input_%d.pb" % k)):
        path = os.path.join(case, "input_%d.pb" % k)
        cmd += ["--input", "%s=%s" % (read_pb(path)[0], path)]
        k += 1
    res = dict(seconds=0.0, bad=0, total=0, atol_needed=0.0, errors=[])
    with tempfile.TemporaryDirectory() as out:
        t0 = time.time()
        try:
            r = subprocess.run(cmd + ["--output-dir", out], capture_output=True, text=True)
        except OSError as err:
            res["failure"] = "cannot run %s: %s" % (kiln, err)
            return res
        res["seconds"] = round(time.time() - t0, 1)
        if r.returncode != 0:
            res["failure"] = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1]
            return res
        k = 0
        while os.path.exists(os.path.join(case, "output_%d.pb" % k)):
            name, want = read_pb(os.path.join(case, "output_%d.pb" % k))
            got = np.load(os.path.join(out, name + ".npy"))
            f64 = read_pb(os.path.join(folder, "float64_outputs", "output_%d.pb" % k))[1]
            d = np.abs(got.astype(np.float64) - want)
            res["bad"] += int((d > atol + rtol * np.abs(want)).sum())
            res["total"] += want.size
            need = float((d - 1e-4 * np.abs(want)).max(initial=0))
            res["atol_needed"] = max(res["atol_needed"], need)
            res["errors"].append(dict(name=name, kiln_vs_ort=diff(got, want),
                                      kiln_vs_float64=diff(got, f64)))
            k += 1
    return res


def report(kiln, cache, names, tol_file):
    """A markdown table of the cached models and kiln's errors (docs/zoo.md). Errors
    are max abs differences; fp64 is the model run in float64 by PyTorch."""
    tols = tolerances(tol_file)
    print("| model | family | opset | nodes | op types | params | model.onnx | export | "
          "kiln run | max abs out | rtol / atol | kiln - ORT | ORT - fp64 | kiln - fp64 | "
          "status |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    total_bytes = total_export = 0.0
    folders = [f for n in names for f in (n, n + "-dynamo")
               if f == n or os.path.exists(os.path.join(cache, f, "meta.json"))]
    for folder in folders:
        meta_path = os.path.join(cache, folder, "meta.json")
        if not os.path.exists(meta_path):
            print("| %s |%s not exported |" % (folder, " |" * 13))
            continue
        with open(meta_path) as f:
            m = json.load(f)
        rtol, atol = tols.get(folder.replace("-dynamo", ""), (1e-4, 1e-5))
        e = kiln_errors(kiln, os.path.join(cache, folder), rtol, atol)
        total_bytes += m["folder_bytes"]
        total_export += m["total_seconds"]
        cols = ["%.3g" % max(x["ort_vs_float64"]["ref_max_abs"] for x in m["errors"]),
                "%g / %g" % (rtol, atol)]
        if "failure" in e:
            status = "FAIL: " + e["failure"].replace("|", "/")
            cols += ["", "", ""]
        else:
            status = "pass" if e["bad"] == 0 else "FAIL (%d of %d)" % (e["bad"], e["total"])
            cols += ["%.1e" % max(x["kiln_vs_ort"]["max_abs"] for x in e["errors"]),
                     "%.1e" % max(x["ort_vs_float64"]["max_abs"] for x in m["errors"]),
                     "%.1e" % max(x["kiln_vs_float64"]["max_abs"] for x in e["errors"])]
        print("| %s | %s | %d | %d | %d | %.1fM | %.0f MB | %.0f s | %.0f s | %s | %s |"
              % (folder, m["family"], m["opset"], m["nodes"], len(m["ops"]), m["params"] / 1e6,
                 m["model_bytes"] / 1e6, m["total_seconds"], e["seconds"], " | ".join(cols),
                 status), flush=True)
    print("\ntotal: %.1f GB on disk, %.0f min to export" % (total_bytes / 1e9, total_export / 60))


def main():
    models = zoo(extra=True)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/kiln-zoo"),
                    help="cache folder (default ~/.cache/kiln-zoo)")
    ap.add_argument("--only", help="comma-separated model names (see --list)")
    ap.add_argument("--list", action="store_true", help="print the models and exit")
    ap.add_argument("--force", action="store_true", help="re-export models already cached")
    ap.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    ap.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript")
    ap.add_argument("--pt-only", action="store_true",
                    help="only write NAME-pt/ (the traced model.pt) for the torchvision "
                         "models whose ONNX folder is cached (with --force, rewrite them)")
    ap.add_argument("--report", metavar="KILN",
                    help="run this kiln binary on the cached models and print the "
                         "markdown table of docs/zoo.md (tolerances from tests/zoo/run.sh)")
    a = ap.parse_args()
    if a.list:  # the EXTRA models marked: tests/zoo/run.sh's table names the others
        for n, s in models.items():
            print("%-22s %s%s" % (n, s["family"], " (extra)" if n in EXTRA else ""))
        return 0
    names = [n for n in models if n not in EXTRA]
    if a.only:
        names = [n.strip() for n in a.only.split(",") if n.strip()]
        bad = [n for n in names if n not in models]
        if bad:
            print("unknown model(s): %s (see --list)" % ", ".join(bad), file=sys.stderr)
            return 2
    if a.report:
        here = os.path.dirname(os.path.abspath(__file__))
        report(os.path.abspath(a.report), a.out, names,
               os.path.join(here, "..", "tests", "zoo", "run.sh"))
        return 0
    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    # nn.MultiheadAttention's inference fast path is one fused ATen op that the
    # TorchScript exporter cannot write (ViT); the plain path exports as MatMul/Softmax.
    torch.backends.mha.set_fastpath_enabled(False)
    os.makedirs(a.out, exist_ok=True)
    failed = []
    if a.pt_only:
        for n in names:
            dest = os.path.join(a.out, n + "-pt")
            if n not in VISION:
                continue
            if not os.path.exists(os.path.join(a.out, n, "meta.json")):
                print("skip    %s: %s is not cached" % (n + "-pt", n), flush=True)
                continue
            if os.path.exists(os.path.join(dest, "meta.json")) and not a.force:
                print("cached  %s" % (n + "-pt"), flush=True)
                continue
            try:
                m = export_pt_only(n, models[n], a.out)
            except Exception as e:
                print("FAILED  %s: %s: %s" % (n + "-pt", type(e).__name__,
                                              str(e).splitlines()[0] if str(e) else ""),
                      flush=True)
                failed.append(n)
                continue
            print("trace   %-22s %6.1f MB, %5.1f s; traced vs eager max abs %.2g"
                  % (n + "-pt", m["model_bytes"] / 1e6, m["trace_seconds"],
                     max(e["traced_vs_eager"]["max_abs"] for e in m["errors"])), flush=True)
        if failed:
            print("%d model(s) failed: %s" % (len(failed), ", ".join(failed)), file=sys.stderr)
        return 1 if failed else 0
    for n in names:
        folder = n if a.exporter == "torchscript" else n + "-dynamo"
        dest = os.path.join(a.out, folder)
        if os.path.exists(os.path.join(dest, "meta.json")) and not a.force:
            print("cached  %s" % folder, flush=True)
            continue
        try:
            m = export_one(n, models[n], dest, a.opset, a.exporter)
        except Exception as e:  # report and go on: one model's failure is not the zoo's
            print("FAILED  %s: %s: %s" % (folder, type(e).__name__, str(e).splitlines()[0] if str(e) else ""),
                  flush=True)
            failed.append(n)
            continue
        worst = max(e["ort_vs_torch"]["max_abs"] for e in m["errors"])
        scaled = max(e["ort_vs_float64"]["scaled"] for e in m["errors"])
        print("export  %-22s opset %d, %4d nodes, %6.1f MB, %5.1f s; ORT vs PyTorch max abs "
              "%.2g, ORT vs float64 %.2g of max |out|"
              % (folder, m["opset"], m["nodes"], m["model_bytes"] / 1e6, m["total_seconds"],
                 worst, scaled), flush=True)
    if failed:
        print("%d model(s) failed: %s" % (len(failed), ", ".join(failed)), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
