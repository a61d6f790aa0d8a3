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

transformers' BertModel with eager attention (hidden 32, 2 heads, 2 layers, vocabulary
50), random weights from a fixed seed; expected outputs are PyTorch's.

    .venv/bin/python tests/models/make_dyn_fixtures.py

With --bench DIR it writes instead, for docs/benchmarks.md ("Dynamic axes"), two
XLM-RoBERTa-shaped encoders (hidden 768, 12 heads, 2 layers, vocabulary 30000) into
DIR/xlmr2_static and DIR/xlmr2_dyn (batch and sequence dynamic), each with a
test_data_set_0 at batch 1, sequence 128, as tools/bench_vs_ort.py --models takes them:

    .venv/bin/python tests/models/make_dyn_fixtures.py --bench ~/.cache/kiln-zoo
"""
import os
import sys

import numpy as np
import onnx
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


def make(name, axes, batch, seq, root=here, big=False):
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
    cfg._attn_implementation = "eager"
    cls = transformers.XLMRobertaModel if big else transformers.BertModel
    model = Wrap(cls(cfg)).eval()
    with torch.no_grad():  # LayerNorm weights other than 1 and 0
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    vocab, low = cfg.vocab_size, 2 if big else 0  # (XLM-R's 1 pads)
    shape = (batch, seq) if big else (2, 16)  # traced at
    ids = torch.randint(low, vocab, shape)
    mask = torch.ones(*shape, dtype=torch.int64)
    out = os.path.join(root, name)
    os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
    dyn = {"input_ids": axes, "attention_mask": axes}
    torch.onnx.export(model, (ids, mask), os.path.join(out, "model.onnx"),
                      input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state", "pooler_output"],
                      dynamic_axes=dyn, opset_version=17, dynamo=False)
    onnx.checker.check_model(os.path.join(out, "model.onnx"))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(low, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if batch > 1:
        mask[1, seq // 2:] = 0
    with torch.no_grad():
        hidden, pooled = model(ids, mask)
    d = os.path.join(out, "test_data_set_0")
    save(os.path.join(d, "input_0.pb"), "input_ids", ids.numpy())
    save(os.path.join(d, "input_1.pb"), "attention_mask", mask.numpy())
    save(os.path.join(d, "output_0.pb"), "last_hidden_state", hidden.numpy().astype(np.float32))
    save(os.path.join(d, "output_1.pb"), "pooler_output", pooled.numpy().astype(np.float32))


if len(sys.argv) == 3 and sys.argv[1] == "--bench":
    make("xlmr2_static", {}, 1, 128, root=sys.argv[2], big=True)
    make("xlmr2_dyn", {0: "batch", 1: "seq"}, 1, 128, root=sys.argv[2], big=True)
else:
    make("dyn_bert", {0: "batch"}, 3, 16)
    make("dyn_bert_seq", {0: "batch", 1: "seq"}, 2, 7)
