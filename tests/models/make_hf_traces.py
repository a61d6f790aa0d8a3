#!/usr/bin/env python3
"""transformers models traced (torch.jit.trace + torch.jit.save) as users trace them,
for kiln check against PyTorch eager (tests/meson.build, ts_dirs):

  ts/hf_bert    BertModel      ts/hf_gpt2   GPT2Model
  ts/hf_llama   LlamaModel (grouped-query attention, rotary embeddings, RMSNorm)
  ts/hf_bart    BartModel, eager attention (issue 21): encoder and decoder, whose
                attention joins each layer's empty cache (torch.tensor([])) to its keys
                with cat(dim=-2)

Each tiny (hidden 32, 2 layers, vocabulary 50, random weights from a fixed seed),
called with input_ids and an attention mask whose second row is padded; the traced
code of transformers 5.x builds its masks with arange, advanced indexing
(mask[batch_idx, kv_idx]), bitwise and, and to(dtype=..., layout=...). Expected
outputs are the eager model's last_hidden_state.

    .venv/bin/python tests/models/make_hf_traces.py [names: only those]
"""
import sys
import os

import numpy as np
import torch
import transformers
from onnx import numpy_helper

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts")


class Wrap(torch.nn.Module):
    """The model called with keywords; an encoder-decoder's decoder reads ids too."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids, mask):
        if isinstance(self.m, transformers.BartModel):
            return self.m(input_ids=ids, attention_mask=mask,
                          decoder_input_ids=ids).last_hidden_state
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


def build(kind):
    if kind == "hf_bert":
        return transformers.BertModel(transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            vocab_size=50, max_position_embeddings=32))
    if kind == "hf_gpt2":
        return transformers.GPT2Model(transformers.GPT2Config(
            n_embd=32, n_layer=2, n_head=2, vocab_size=50, n_positions=32, use_cache=False))
    if kind == "hf_bart":
        c = transformers.BartConfig(
            vocab_size=50, d_model=32, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=32)
        c._attn_implementation = "eager"
        return transformers.BartModel(c)
    return transformers.LlamaModel(transformers.LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, vocab_size=50, max_position_embeddings=32, use_cache=False))


def write(path, name, array):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def make(kind):
    torch.manual_seed(0)
    model = Wrap(build(kind).eval()).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 50, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.int64)
    mask[1, 6:] = 0
    with torch.no_grad():
        traced = torch.jit.trace(model, (ids, mask), check_trace=False)
        out = model(ids, mask)
    folder = os.path.join(here, kind)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    torch.jit.save(traced, os.path.join(folder, "model.pt"))
    write(os.path.join(data, "input_0.pb"), "ids", ids.numpy())
    write(os.path.join(data, "input_1.pb"), "mask", mask.numpy())
    write(os.path.join(data, "output_0.pb"), "output_0", out.numpy().astype(np.float32))
    print(kind, os.path.getsize(os.path.join(folder, "model.pt")), "bytes")


for k in ("hf_bert", "hf_gpt2", "hf_llama", "hf_bart"):
    if len(sys.argv) < 2 or k in sys.argv[1:]:
        make(k)
