#!/usr/bin/env python3
"""Issue 21's trial: models kiln's zoo does not have, exported as a user would, checked by kiln.

A new user tried kiln on some 60 models from timm, transformers and torchvision's
segmentation, video and optical-flow families, plus small recurrent models and a model
quantized by onnxruntime's own quantizer. This script rebuilds that trial, so that it can
be re-run on any kiln build:

    .venv/bin/pip install timm          # besides torch torchvision transformers onnxscript
    .venv/bin/python tools/trial_models.py                    # export into ~/.cache/kiln-trial
    .venv/bin/python tools/trial_models.py --report build-rel/tools/kiln   # check, table

Each model becomes, in the layout `kiln check` reads (tools/export_zoo.py's),

    NAME/model.onnx (+ model.onnx.data)   torch.onnx.export as a user calls it: the
                                          default exporter (torch.export, "dynamo"), the
                                          batch axis of every input and output dynamic;
                                          where that exporter fails, the TorchScript one
                                          (dynamo=False) with the same dynamic axes
    NAME/test_data_set_0/                 inputs, onnxruntime's outputs (optimizations
                                          off: its plain kernels)
    NAME/float64_outputs/                 the model run in float64 by PyTorch
    NAME-pt/model.pt                      torch.jit.trace of the same model (eval mode);
                                          expected outputs: PyTorch eager's
    repvgg_a0-qdq/                        repvgg_a0's ONNX model quantized by
                                          onnxruntime.quantization.quantize_static (QDQ)

Nothing is downloaded: timm models are built with pretrained=False, transformers models
from small configs (2 layers, hidden 64 to 128, the architecture's real structure), with
tools/export_zoo.py's trained-looking random weights (BatchNorm statistics calibrated).
`--report KILN` runs `kiln check` (default tolerances) on every folder and prints a
markdown table: docs/trial.md.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_zoo as ez  # noqa: E402


def _randn(g, *shape):
    return ez._randn(g, *shape)


def _image(c, h, w=None):
    return lambda g: {"input": _randn(g, 1, c, h, w or h)}


def _timm(name, **kw):
    def build():
        import timm

        return timm.create_model(name, pretrained=False, **kw)

    return build


TIMM = [
    "deit_tiny_patch16_224", "edgenext_xx_small", "hrnet_w18_small", "repvgg_a0",
    "lcnet_050", "efficientnetv2_rw_t", "nfnet_l0", "xcit_nano_12_p16_224",
    "tiny_vit_5m_224", "rexnet_100", "resmlp_12_224", "mobileone_s0", "ghostnetv2_100",
    "crossvit_tiny_240", "maxvit_pico_rw_256", "tf_efficientnet_b0", "convnext_atto",
    "mobilevit_xxs", "levit_128s", "poolformer_s12", "efficientformer_l1", "pit_ti_224",
    "regnetx_002", "dla34", "ese_vovnet19b_dw", "resnet18d", "efficientvit_b0", "fastvit_t8",
    "repvit_m0_9", "mobilenetv4_conv_small", "hgnetv2_b0", "coat_lite_tiny",
    "cait_xxs24_224",
]

SEQ = 24


def _text(names, vocab, extra=None):
    """input_ids and the named masks, batch 1, SEQ tokens, the last 4 padded out."""

    def make(g):
        import torch

        out = {}
        for n in names:
            if n in ("input_ids", "decoder_input_ids"):
                out[n] = torch.randint(0, vocab, (1, SEQ), generator=g, dtype=torch.int64)
            elif n == "attention_mask":
                m = torch.ones(1, SEQ, dtype=torch.int64)
                m[:, SEQ - 4:] = 0
                out[n] = m
            elif n == "token_type_ids":
                t = torch.zeros(1, SEQ, dtype=torch.int64)
                t[:, SEQ // 2:] = 1
                out[n] = t
        if extra:
            out.update(extra(g))
        return out

    return make


SMALL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=256, vocab_size=1000)


def _hf(model_cls, config_cls, names, cfg, vocab=1000, extra=None, eager=True):
    def build():
        import transformers

        c = getattr(transformers, config_cls)(**cfg)
        if eager:
            c._attn_implementation = "eager"
        return getattr(transformers, model_cls)(c)

    return build, _text(names, vocab, extra)


def _pixels(size):
    return lambda g: {"pixel_values": _randn(g, 1, 3, size, size)}


LM = ["input_ids", "attention_mask"]
ENC_DEC = ["input_ids", "attention_mask", "decoder_input_ids"]
TEXT = {
    "electra": ("ElectraModel", "ElectraConfig", LM + ["token_type_ids"],
                dict(SMALL, embedding_size=64)),
    "albert": ("AlbertModel", "AlbertConfig", LM + ["token_type_ids"],
               dict(SMALL, embedding_size=64)),
    "mpnet": ("MPNetModel", "MPNetConfig", LM, SMALL),
    "xlm_roberta": ("XLMRobertaModel", "XLMRobertaConfig", LM, SMALL),
    "deberta_v2": ("DebertaV2Model", "DebertaV2Config", LM, SMALL),
    "convbert": ("ConvBertModel", "ConvBertConfig", LM, dict(SMALL, embedding_size=128)),
    "bart": ("BartModel", "BartConfig", ENC_DEC,
             dict(vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=2,
                  encoder_attention_heads=4, decoder_attention_heads=4,
                  encoder_ffn_dim=256, decoder_ffn_dim=256)),
    "t5": ("T5Model", "T5Config", ENC_DEC,
           dict(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2,
                num_decoder_layers=2, num_heads=4)),
    "llama": ("LlamaModel", "LlamaConfig", LM,
              dict(SMALL, num_key_value_heads=2, use_cache=False)),
    "qwen2": ("Qwen2Model", "Qwen2Config", LM,
              dict(SMALL, num_key_value_heads=2, use_cache=False)),
    "mistral": ("MistralModel", "MistralConfig", LM,
                dict(SMALL, num_key_value_heads=2, use_cache=False)),
    "gemma": ("GemmaModel", "GemmaConfig", LM,
              dict(SMALL, num_key_value_heads=1, head_dim=32, use_cache=False)),
    "phi": ("PhiModel", "PhiConfig", LM, dict(SMALL, use_cache=False)),
    "bloom": ("BloomModel", "BloomConfig", LM,
              dict(vocab_size=1000, hidden_size=128, n_layer=2, n_head=4, use_cache=False)),
    "gpt_neox": ("GPTNeoXModel", "GPTNeoXConfig", LM, dict(SMALL, use_cache=False)),
}


def _whisper():
    def feats(g):
        return {"input_features": _randn(g, 1, 80, 128)}

    build, _ = _hf("WhisperModel", "WhisperConfig", [],
                   dict(vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4,
                        encoder_ffn_dim=256, decoder_ffn_dim=256, max_source_positions=64,
                        num_mel_bins=80, use_cache=False, pad_token_id=1,
                        bos_token_id=0, eos_token_id=2, decoder_start_token_id=0))
    return build, _text(["decoder_input_ids"], 1000, feats), ["input_features",
                                                                "decoder_input_ids"]


def _clip():
    build, inputs = _hf("CLIPModel", "CLIPConfig", LM,
                        dict(text_config=dict(vocab_size=1000, hidden_size=64,
                                              intermediate_size=128, num_hidden_layers=2,
                                              num_attention_heads=4),
                             vision_config=dict(hidden_size=64, intermediate_size=128,
                                                num_hidden_layers=2, num_attention_heads=4,
                                                image_size=64, patch_size=16),
                             projection_dim=32),
                        extra=_pixels(64))
    return build, inputs, ["input_ids", "attention_mask", "pixel_values"]


def _segformer():
    def build():
        import transformers

        c = transformers.SegformerConfig(depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 128],
                                         decoder_hidden_size=64, num_labels=8)
        return transformers.SegformerForSemanticSegmentation(c)

    return build, _pixels(128), ["pixel_values"]


def _tv_seg(ctor):
    def build():
        import torchvision

        return getattr(torchvision.models.segmentation, ctor)(weights=None,
                                                              weights_backbone=None)

    return build


def _r3d():
    import torchvision

    return torchvision.models.video.r3d_18(weights=None)


def _raft():
    import torchvision

    return torchvision.models.optical_flow.raft_small(weights=None)


def _lstm_classifier():
    import torch
    from torch import nn

    class LstmClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(1000, 64)
            self.lstm = nn.LSTM(64, 96, num_layers=2, batch_first=True, bidirectional=True)
            self.head = nn.Linear(192, 5)

        def forward(self, input_ids):
            h, _ = self.lstm(self.emb(input_ids))
            return self.head(h.mean(dim=1))

    return LstmClassifier()


def _gru_audio():
    from torch import nn

    class GruAudio(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv1d(40, 64, 5, stride=2, padding=2),
                                      nn.BatchNorm1d(64), nn.ReLU())
            self.gru = nn.GRU(64, 80, num_layers=2, batch_first=True)
            self.head = nn.Linear(80, 12)

        def forward(self, input):
            y = self.conv(input).transpose(1, 2)
            h, _ = self.gru(y)
            return self.head(h[:, -1])

    return GruAudio()


def models():
    """name -> dict(family, build, inputs, input_names)."""
    out = {}
    for n in TIMM:
        def spec(n=n):
            import timm

            c, h, w = timm.get_pretrained_cfg(n).input_size
            return _image(c, h, w)

        out[n] = dict(family="timm", build=_timm(n), inputs=None, input_names=["input"],
                      lazy_inputs=spec)
    for n, (mcls, ccls, names, cfg) in TEXT.items():
        build, inputs = _hf(mcls, ccls, names, cfg)
        out[n] = dict(family="transformers", build=build, inputs=inputs, input_names=names)
    for n, make in (("whisper", _whisper), ("clip", _clip), ("segformer", _segformer)):
        build, inputs, names = make()
        out[n] = dict(family="transformers", build=build, inputs=inputs, input_names=names)
    for n in ("fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"):
        out[n] = dict(family="torchvision segmentation", build=_tv_seg(n),
                      inputs=_image(3, 224), input_names=["input"])
    out["r3d_18"] = dict(family="torchvision video", build=_r3d,
                         inputs=lambda g: {"input": _randn(g, 1, 3, 8, 112, 112)},
                         input_names=["input"])
    out["raft_small"] = dict(family="torchvision optical flow", build=_raft,
                             inputs=lambda g: {"image1": _randn(g, 1, 3, 128, 128),
                                               "image2": _randn(g, 1, 3, 128, 128)},
                             input_names=["image1", "image2"])
    out["lstm_classifier"] = dict(
        family="recurrent", build=_lstm_classifier, input_names=["input_ids"],
        inputs=lambda g: {"input_ids": __import__("torch").randint(
            0, 1000, (1, 40), generator=g, dtype=__import__("torch").int64)})
    out["gru_audio"] = dict(family="recurrent", build=_gru_audio, input_names=["input"],
                            inputs=lambda g: {"input": _randn(g, 1, 40, 100)})
    return out


def positional(model, names):
    """export_zoo.positional with forward's parameters named (input_ids, ...), not *args:
    torch.export maps dynamic axes and input names onto named parameters."""
    import torch

    def call(self, *args):
        if not hasattr(self.model, "config"):  # torchvision, timm: forward(x) or (a, b)
            return tuple(ez.flatten_outputs(self.model(*args)))
        kw = dict(zip(names, args), return_dict=False)
        return tuple(ez.flatten_outputs(self.model(**kw)))

    ns = {}
    exec("def forward(self, %s):\n    return self._call(%s)\n"
         % (", ".join(names), ", ".join(names)), ns)
    cls = type("Positional", (torch.nn.Module,), {"forward": ns["forward"], "_call": call})
    m = cls()
    m.model = model
    return m


def export_onnx(wrapped, args, names, out_names, path):
    """As a user calls it: the default exporter with a dynamic batch axis; the
    TorchScript exporter where that fails. Returns the exporter used."""
    import torch

    axes = {n: {0: "batch"} for n in list(names) + list(out_names)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            try:
                torch.onnx.export(wrapped, args, path, input_names=names,
                                  output_names=out_names, dynamic_axes=axes)
                return "dynamo"
            except Exception as e:  # a user falls back to the classic exporter
                first = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160]
                                    if str(e) else "")
            for f in os.listdir(os.path.dirname(path)):
                if f.startswith("model.onnx"):
                    os.remove(os.path.join(os.path.dirname(path), f))
            torch.onnx.export(wrapped, args, path, dynamo=False, opset_version=17,
                              input_names=names, output_names=out_names, dynamic_axes=axes)
            return "torchscript (dynamo failed: %s)" % first


def export_one(name, spec, dest, want_pt=True):
    import onnx
    import torch

    t0 = time.time()
    if spec.get("lazy_inputs"):
        spec = dict(spec, inputs=spec["lazy_inputs"]())
    model, wrapped, inputs = ez.prepare(name, spec, wrap=positional)
    names = spec["input_names"]
    args = tuple(inputs[n] for n in names)
    with torch.no_grad():
        torch_outs = [o.numpy() for o in wrapped(*args)]
    try:
        f64_outs = ez.run_float64(wrapped, args)
    except Exception:
        f64_outs = None
    out_names = ["output" if len(torch_outs) == 1 else "output_%d" % i
                 for i in range(len(torch_outs))]
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for sub in ("test_data_set_0", "torch_outputs", "float64_outputs"):
        os.makedirs(os.path.join(tmp, sub))
    path = os.path.join(tmp, "model.onnx")
    te = time.time()
    exporter = export_onnx(wrapped, args, names, out_names, path)
    export_s = time.time() - te
    mo = onnx.load(path, load_external_data=False)
    graph_inputs = [i.name for i in mo.graph.input]
    feeds = {n: inputs[n].numpy() for n in names if n in graph_inputs}
    ort_names, ort_outs = ez.run_ort(path, feeds)
    for k, n in enumerate(graph_inputs):
        ez.save_pb(feeds[n], n, os.path.join(tmp, "test_data_set_0", "input_%d.pb" % k))
    errors = []
    for k, (n, o) in enumerate(zip(ort_names, ort_outs)):
        ez.save_pb(o, n, os.path.join(tmp, "test_data_set_0", "output_%d.pb" % k))
        ez.save_pb(torch_outs[k], n, os.path.join(tmp, "torch_outputs", "output_%d.pb" % k))
        e = dict(name=n, shape=list(o.shape), ort_vs_torch=ez.diff(o, torch_outs[k]))
        if f64_outs is not None:
            ez.save_pb(f64_outs[k], n, os.path.join(tmp, "float64_outputs",
                                                    "output_%d.pb" % k))
            e["ort_vs_float64"] = ez.diff(o, f64_outs[k])
        errors.append(e)
    meta = dict(name=name, family=spec["family"], exporter=exporter, torch=torch.__version__,
                opset=[o.version for o in mo.opset_import if o.domain in ("", "ai.onnx")][0],
                ir_version=mo.ir_version, nodes=len(mo.graph.node),
                params=sum(p.numel() for p in model.parameters()),
                inputs={n: list(feeds[n].shape) for n in feeds},
                export_seconds=round(export_s, 1), total_seconds=round(time.time() - t0, 1),
                errors=errors)
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
    if want_pt:
        try:
            write_pt(name, model, wrapped, args, torch_outs, f64_outs, dest)
        except Exception as e:
            with open(os.path.join(dest, "pt_failed.txt"), "w") as f:
                f.write("%s: %s\n" % (type(e).__name__, e))
    return meta


def write_pt(name, model, wrapped, args, torch_outs, f64_outs, dest):
    """NAME-pt/: the model traced (torch.jit.trace of the positional wrapper, as a user
    traces a transformers model with example inputs), PyTorch eager's outputs expected."""
    import torch

    out_dir = dest + "-pt"
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "test_data_set_0"))
    if f64_outs is not None:
        os.makedirs(os.path.join(tmp, "float64_outputs"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            traced = torch.jit.trace(wrapped, args, strict=False, check_trace=False)
            traced_outs = [o.numpy() for o in ez.flatten_outputs(traced(*args))]
        torch.jit.save(traced, os.path.join(tmp, "model.pt"))
    params = [a.name for a in traced.forward.schema.arguments[1:]]
    for k, x in enumerate(args):
        ez.save_pb(x.numpy(), params[k] if k < len(params) else "input_%d" % k,
                   os.path.join(tmp, "test_data_set_0", "input_%d.pb" % k))
    for k, o in enumerate(torch_outs):
        n = "output" if len(torch_outs) == 1 else "output_%d" % k
        ez.save_pb(o, n, os.path.join(tmp, "test_data_set_0", "output_%d.pb" % k))
        if f64_outs is not None:
            ez.save_pb(f64_outs[k], n, os.path.join(tmp, "float64_outputs", "output_%d.pb" % k))
    meta = dict(name=name + "-pt", traced_vs_eager=max(
        ez.diff(t, o)["max_abs"] for t, o in zip(traced_outs, torch_outs)))
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)


def export_qdq(src, dest):
    """src's model quantized by onnxruntime's quantize_static (QDQ, its defaults),
    calibrated on 8 random images; expected outputs from onnxruntime, optimizations off."""
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.data = iter([{"input": rng.standard_normal((1, 3, 224, 224),
                                                            dtype=np.float32)}
                              for _ in range(8)])

        def get_next(self):
            return next(self.data, None)

    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "test_data_set_0"))
    path = os.path.join(tmp, "model.onnx")
    quantize_static(os.path.join(src, "model.onnx"), path, Reader(),
                    quant_format=QuantFormat.QDQ)
    _, x = ez.read_pb(os.path.join(src, "test_data_set_0", "input_0.pb"))
    names, outs = ez.run_ort(path, {"input": x})
    ez.save_pb(x, "input", os.path.join(tmp, "test_data_set_0", "input_0.pb"))
    for k, (n, o) in enumerate(zip(names, outs)):
        ez.save_pb(o, n, os.path.join(tmp, "test_data_set_0", "output_%d.pb" % k))
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(dict(name=os.path.basename(dest), family="onnxruntime QDQ",
                       exporter="quantize_static"), f)
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)


# A quantized model's outputs from two runtimes differ by whole quantization steps where
# a float sum lands on the other side of a rounding boundary and the flip travels on
# (repvgg_a0-qdq: 4 steps of its output's 0.018). Checked at about 5 steps.
QDQ_ATOL = ["--atol", "0.1", "--rtol", "0"]


def check(kiln, folder):
    """kiln check at its default tolerances (QDQ_ATOL for a quantized model): (passed,
    the line or the reason)."""
    extra = QDQ_ATOL if folder.endswith("-qdq") else []
    try:
        r = subprocess.run([kiln, "check", folder] + extra, capture_output=True, text=True,
                           timeout=600)
    except subprocess.TimeoutExpired:
        return False, "timeout (600 s)"
    if r.returncode == 0:
        line = [l for l in r.stdout.splitlines() if l.startswith("pass")]
        return True, line[0].split("(", 1)[-1].rstrip(")") if line else ""
    err = [l for l in r.stderr.splitlines() if l.strip()]
    return False, (err[-1] if err else r.stdout.strip()[-300:]).replace(folder + ": ", "")


def report(kiln, out, names):
    print("| model | family | exporter | ONNX: kiln check | .pt trace: kiln check |")
    print("|---|---|---|---|---|")
    counts = dict(onnx=[0, 0], pt=[0, 0])
    for n in names:
        d = os.path.join(out, n)
        if not os.path.exists(os.path.join(d, "meta.json")):
            print("| %s | | not exported | | |" % n, flush=True)
            continue
        with open(os.path.join(d, "meta.json")) as f:
            m = json.load(f)
        cells = []
        for key, folder in (("onnx", d), ("pt", d + "-pt")):
            if not os.path.exists(os.path.join(folder, "meta.json")):
                why = ""
                if os.path.exists(os.path.join(d, "pt_failed.txt")):
                    why = open(os.path.join(d, "pt_failed.txt")).read().strip()[:80]
                cells.append("(not traced: %s)" % why if key == "pt" else "")
                continue
            ok, msg = check(kiln, folder)
            counts[key][0 if ok else 1] += 1
            cells.append(("pass (%s)" if ok else "**FAIL**: %s") % msg.replace("|", "/"))
        exp = m.get("exporter", "")
        print("| %s | %s | %s | %s | %s |" % (n, m["family"], exp.split(" (")[0], cells[0],
                                              cells[1]), flush=True)
    print("\nONNX: %d passed, %d failed; .pt: %d passed, %d failed"
          % (counts["onnx"][0], counts["onnx"][1], counts["pt"][0], counts["pt"][1]))


def main():
    all_models = models()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/kiln-trial"))
    ap.add_argument("--only", help="comma-separated names (see --list)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--force", action="store_true", help="re-export cached models")
    ap.add_argument("--no-pt", action="store_true", help="skip the .pt traces")
    ap.add_argument("--report", metavar="KILN", help="kiln check every cached folder")
    a = ap.parse_args()
    names = list(all_models) + ["repvgg_a0-qdq"]
    if a.list:
        for n in names:
            print("%-28s %s" % (n, all_models[n]["family"] if n in all_models else "QDQ"))
        return 0
    if a.only:
        names = [n.strip() for n in a.only.split(",") if n.strip()]
        bad = [n for n in names if n not in all_models and n != "repvgg_a0-qdq"]
        if bad:
            print("unknown: %s" % ", ".join(bad), file=sys.stderr)
            return 2
    if a.report:
        report(os.path.abspath(a.report), a.out, names)
        return 0
    import torch

    torch.set_num_threads(1)
    torch.backends.mha.set_fastpath_enabled(False)
    os.makedirs(a.out, exist_ok=True)
    failed = []
    for n in names:
        dest = os.path.join(a.out, n)
        if os.path.exists(os.path.join(dest, "meta.json")) and not a.force:
            print("cached  %s" % n, flush=True)
            continue
        try:
            if n == "repvgg_a0-qdq":
                export_qdq(os.path.join(a.out, "repvgg_a0"), dest)
                print("export  %s" % n, flush=True)
                continue
            m = export_one(n, all_models[n], dest, not a.no_pt)
        except Exception as e:
            print("FAILED  %s: %s: %s" % (n, type(e).__name__, str(e).splitlines()[0][:200]
                                          if str(e) else ""), flush=True)
            traceback.print_exc(limit=3)
            failed.append(n)
            continue
        print("export  %-28s %s, %d nodes, %.0f s; ORT vs PyTorch %.2g"
              % (n, m["exporter"].split(" (")[0], m["nodes"], m["total_seconds"],
                 max(e["ort_vs_torch"]["max_abs"] for e in m["errors"])), flush=True)
    if failed:
        print("%d failed: %s" % (len(failed), ", ".join(failed)), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
