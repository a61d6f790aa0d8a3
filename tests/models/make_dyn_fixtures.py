#!/usr/bin/env python3
"""Tiny BERT encoders exported with dynamic axes, as users export them (the
shape_values pass; tests/run_passes_cli.sh and the `models` tests check them):

  dyn_bert/      batch dynamic (dynamic_axes {0: "batch"}): the exporter computes every
                 Reshape target from Shape(x) at run time. kiln must still fuse each
                 layer's attention (kiln.MultiHeadAttention), its Q/K/V projections and
                 its Add + LayerNormalization pairs. Test data at batch 3 (traced at 2),
                 with a padded row in the attention mask.
  dyn_bert_seq/  batch and sequence dynamic; test data at batch 2, sequence 7 (traced
                 at 16).
  dyn_bert_sdpa/ batch and sequence dynamic, with transformers' default attention
                 ("sdpa"): torch.onnx writes scaled_dot_product_attention as Q and K
                 each scaled by sqrt(scale), a boolean mask made -inf, and
                 Where(IsNaN(p), 0, p) after the softmax. Test data at batch 3,
                 sequence 7: one row half padded, one all padding (every key masked:
                 the guard makes its attention 0). kiln must fuse each layer into a
                 kiln.MultiHeadAttention with zero_masked_rows.
  dyn_bert_sdpa_dynamo/  the same model and data through the dynamo exporter
                 (torch.onnx.export(dynamo=True), opset 18), which transposes K through
                 [B*H, T, D]. Its graph does not mask the row of padding alone as
                 PyTorch does (the softmax there is uniform, not 0): its expected
                 outputs are onnxruntime's, and the other rows must match PyTorch's.

transformers' BertModel (hidden 32, 2 heads, 2 layers, vocabulary 50), random weights
from a fixed seed (the sdpa ones with random projection biases too); expected outputs
are PyTorch's, and onnxruntime must agree with them (the sdpa fixtures).

    .venv/bin/python tests/models/make_dyn_fixtures.py

With --bench DIR it writes instead, for docs/benchmarks.md ("Dynamic axes"),
XLM-RoBERTa-shaped encoders (hidden 768, 12 heads, 2 layers, vocabulary 30000) into
DIR/xlmr2_static, DIR/xlmr2_dyn (batch and sequence dynamic, eager attention: the
classic export) and DIR/xlmr2_sdpa (the same, sdpa attention), each with a
test_data_set_0 at batch 1, sequence 128, as tools/bench_vs_ort.py --models takes them:

    .venv/bin/python tests/models/make_dyn_fixtures.py --bench ~/.cache/kiln-zoo
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime
import torch
import transformers
from onnx import numpy_helper

here = os.path.dirname(os.path.abspath(__file__))


class Wrap(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, ids, mask):
        o = self.bert(input_ids=ids, attention_mask=mask)
        return o.last_hidden_state, o.pooler_output


def save(path, name, array):
    t = numpy_helper.from_array(array, name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def make(name, axes, batch, seq, root=here, big=False, attn="eager", dynamo=False):
    torch.manual_seed(0)
    if big:
        cfg = transformers.XLMRobertaConfig(hidden_size=768, num_hidden_layers=2,
                                            num_attention_heads=12, intermediate_size=3072,
                                            vocab_size=30000, max_position_embeddings=514,
                                            type_vocab_size=1, pad_token_id=1)
    else:
        cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=64,
                                      vocab_size=50, max_position_embeddings=32)
    cfg._attn_implementation = attn
    cls = transformers.XLMRobertaModel if big else transformers.BertModel
    model = Wrap(cls(cfg)).eval()
    with torch.no_grad():  # LayerNorm weights other than 1 and 0
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
            if isinstance(m, torch.nn.Linear) and attn == "sdpa" and not big:
                m.bias.uniform_(-0.2, 0.2)
    vocab, low = cfg.vocab_size, 2 if big else 0  # (XLM-R's 1 pads)
    shape = (batch, seq) if big else (2, 16)  # traced at
    ids = torch.randint(low, vocab, shape)
    mask = torch.ones(*shape, dtype=torch.int64)
    out = os.path.join(root, name)
    os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
    path = os.path.join(out, "model.onnx")
    names = {"input_names": ["input_ids", "attention_mask"],
             "output_names": ["last_hidden_state", "pooler_output"]}
    if dynamo:  # its dims by torch.export's names: batch and seq, as in the others
        dims = {k: torch.export.Dim(v, max=cfg.max_position_embeddings) for k, v in axes.items()}
        torch.onnx.export(model, (ids, mask), path, dynamic_shapes=({**dims}, {**dims}),
                          opset_version=18, dynamo=True, external_data=False, **names)
        m = onnx.load(path)  # without the Python stack of every node: a third the size
        for n in m.graph.node:
            del n.metadata_props[:]
        onnx.save(m, path)
    else:
        dyn = {"input_ids": axes, "attention_mask": axes}
        torch.onnx.export(model, (ids, mask), path, dynamic_axes=dyn, opset_version=17,
                          dynamo=False, **names)
    onnx.checker.check_model(path)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(low, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if batch > 1:
        mask[1, seq // 2:] = 0
    if batch > 2 and attn == "sdpa":
        mask[2, :] = 0  # a row of padding alone: every key masked
    with torch.no_grad():
        hidden, pooled = model(ids, mask)
    if attn == "sdpa":
        got = onnxruntime.InferenceSession(path).run(
            None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        agree = slice(0, 2) if dynamo else slice(None)  # (the dynamo graph: see above)
        for want, have in zip((hidden, pooled), got):
            assert np.isfinite(have).all(), name
            assert np.abs(want.numpy()[agree] - have[agree]).max() < 1e-5, name
        if dynamo:
            hidden, pooled = (torch.from_numpy(a) for a in got)
    d = os.path.join(out, "test_data_set_0")
    save(os.path.join(d, "input_0.pb"), "input_ids", ids.numpy())
    save(os.path.join(d, "input_1.pb"), "attention_mask", mask.numpy())
    save(os.path.join(d, "output_0.pb"), "last_hidden_state", hidden.numpy().astype(np.float32))
    save(os.path.join(d, "output_1.pb"), "pooler_output", pooled.numpy().astype(np.float32))


if len(sys.argv) == 3 and sys.argv[1] == "--bench":
    make("xlmr2_static", {}, 1, 128, root=sys.argv[2], big=True)
    make("xlmr2_dyn", {0: "batch", 1: "seq"}, 1, 128, root=sys.argv[2], big=True)
    make("xlmr2_sdpa", {0: "batch", 1: "seq"}, 1, 128, root=sys.argv[2], big=True, attn="sdpa")
else:
    make("dyn_bert", {0: "batch"}, 3, 16)
    make("dyn_bert_seq", {0: "batch", 1: "seq"}, 2, 7)
    make("dyn_bert_sdpa", {0: "batch", 1: "seq"}, 3, 7, attn="sdpa")
    make("dyn_bert_sdpa_dynamo", {0: "batch", 1: "seq"}, 3, 7, attn="sdpa", dynamo=True)
