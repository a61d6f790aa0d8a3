#!/usr/bin/env python3
"""Makes the scripted TorchScript fixtures of tests/models/ts/script/ (kiln check runs
them): modules with control flow compiled by torch.jit.script and saved, each as
tests/models/ts/script/<name>/model.pt beside test_data_set_0/input_K.pb and
output_K.pb, what PyTorch eager computes. Several test cases per model where the
control flow takes other paths for other inputs.

  if_relu     if x.sum() > 0: relu(x) else: -x (a data-dependent If); two cases, one
              taking each branch
  for_acc     for i in range(x.size(0)): acc = acc + x[i] * 2 (a Loop with a carried
              tensor, its count from an input's size)
  while_cnt   while x.sum() < 100 and i < 10: x = x * 2; i += 1 (a data-dependent
              condition and a counter), returning x + the counter
  loop_if     an if inside a for loop, on the loop counter and on data
  jumps       continue and break in a for loop (which TorchScript writes as a while
              loop with ifs), not, int arithmetic on a size
  rnn         an RNN cell (Linear on [x_t, h], tanh) over the x.size(0) time steps
  greedy      a greedy decoding loop: torch.embedding, mean, Linear, topk(1), argmax, torch.cat growing
              the token tensor by one each step
  functions   modules whose scripted code calls scripted functions of
              torch.nn.functional (nn.Embedding with padding_idx, LayerNorm, Softmax,
              LeakyReLU, ELU, Dropout; F.normalize, F.pad), a free function of the
              model's own with a default and a keyword argument, calling another,
              argmax and argmin (of a dim, and of the whole tensor)
  cnn_modules a scripted CNN of torch.nn modules (Conv2d, BatchNorm2d, ReLU(inplace),
              MaxPool2d, Hardswish, AvgPool2d, AdaptiveAvgPool2d, Flatten, Linear, Mish,
              GELU(tanh)), each calling its torch.nn.functional function
  lists       a loop over an nn.ModuleList appending each layer's output to a list
              (torch unrolls it: straight-line torch.append calls), torch.cat of the
              list; F.interpolate (nearest by a scale factor, bilinear to a size), whose
              scripted code appends in a for over a count known while building and tests
              strings (also inside an if on the data: lists made and grown in a branch);
              two cases, batches of 2 and 1, one taking each branch
  rnn_modules nn.GRU (batch_first) into a 2-layer bidirectional nn.LSTM, scripted: their
              forward methods' checks (annotated assignments, `in` of a list, list
              comparisons of sizes, prim.dtype and prim.device for the zero state)
  ranges      for over range(a, b), range(a, b, s) with a negative step, ranges that
              are empty for some inputs, over the rows of a tensor, over a list of
              numbers and over a list of tensors; // of ints (torch.floordiv)
  early_return  return inside if (torch writes the code without it: an if whose
              branches assign the value returned); three cases, each ending at another
              return
  early_return_hand  the same module with its saved code edited to return inside the
              ifs, as code written by hand would (and range(1, 7, 2) for the last + 1,
              which torch writes as __range_length/__derive_index calls): kiln moves
              the statements after each if into its other branch
  group_norm  nn.GroupNorm scripted: its functional's raise on N * C / G times the
              spatial size being 1 (the batch decides it: a kiln.Check), a raise on the
              rank (known while building: dropped), one on the data, x.shape[2:] and +
              of int lists
  defaults    forward(x, mask: Optional[Tensor] = None, scale: float = 2.0) given x
              only: mask is None and scale 2.0
  defaults_mask  the same module given x and mask
  dicts       a Dict[str, Tensor] built, set, read (d[k], in, get, len, values()) with
              keys known while building, and an empty annotated dict
  transformer_layer  nn.TransformerEncoderLayer and nn.MultiheadAttention (attention
              weights returned), scripted in eval mode
  loop_append append to lists made before for loops whose counts are known while
              building (a fixed dim, the list's length, nested) and a while on a
              counter: unrolled
  transformer_masks  nn.TransformerEncoder scripted, with a causal and a key padding
              mask
  named_outputs  a NamedTuple made by a method (one field None), its fields read and a
              NamedTuple returned, as torchvision's GoogLeNet does: the outputs are
              its fields that are not None, named after them
  list_ops    list slices whose bounds come from shapes (x.dim() - 2, x.size(1), -n) and
              with a negative step, l * n and [x] * n, sum of a list of ints, all/any
              along a dim (keepdim, of uint8 too), a raise whose message formats a
              shape slice and a float (the unit test runs it raising), List[float] and
              List[int] attributes
  dict_iter   for loops over a dict's items(), keys() and values() (unrolled: their
              elements are strings and tuples), pop with and without a default, get
  named_if    a NamedTuple made in both branches of an if on the data (one case per
              branch), read by field and index, and returned
  seg_dict    torchvision's IntermediateLayerGetter (a Dict[str, str] attribute,
              torch.dict(), `in` of it) under a head returning an OrderedDict, as
              torchvision's segmentation models do: the outputs are named after its keys
  fpn         torchvision's FeaturePyramidNetwork (LastLevelMaxPool) on an
              IntermediateLayerGetter, as its detection backbones have it: a loop over
              range(len(x) - 2, -1, -1) reading a list of tensors of other shapes and
              inserting into a list (unrolled), ModuleList __len__, min of a list,
              dict(zip(names, results)) returned
  swin_blocks torchvision's SwinTransformerBlock scripted, shifted and not, and one whose
              window covers the padded input (its shift reset by shift_size[i] = 0):
              list.copy(), sum of a list, torch.tensor(k, dtype=, device=) written into
              the mask, ** of numbers
  attr_set    module attributes set by forward, as torchvision's SSD does after its
              warning (self._has_warned = True, under an if on a bool attribute) and a
              float attribute set and then read
  attr_set_data  an attribute set inside an if on the data: refused (the unit test)
  dict_merge  dict setdefault (a key added, a key held) and update (a key replaced, one
              added)
  list_input  forward(xs: List[Tensor]), as torchvision's detection models take their
              images: the test cases' inputs are the elements, xs.0, xs.1, xs.2
              (kiln's input_types "xs.0:float32[2,3];xs.1:..."), len(xs) known while
              building
  detect_ops  the ATen ops of torchvision's scripted detection code: as_tensor (of a
              list, dtype from prim.dtype; of a tensor), scalar_tensor, full_like (of an
              int and of a float the graph computes), empty and new_empty (of 0
              elements), max/min of every element, along a dim (values, indices; keepdim)
              and of two tensors, maximum, where (of a condition alone: the indices; of
              a condition, tensors and numbers), item (of a constant: a list index; of a
              computed tensor), meshgrid ("ij", "xy"), repeat (more repeats than dims),
              broadcast_tensors, torchvision.ops.nms, x[mask] by a 1-D mask and by a
              mask of x's shape, math.ceil/floor of floats, copy_ into slices of a select
              in a loop (unrolled), as batch_images does; round (halves to even, with
              decimals, in place)
  detect_flow the control flow of torchvision's scripted SSD around those ops: an
              object of a class of the code (C.__new__(C), its __init__ setting its
              attributes, a method of it), str(i) as dict keys, torch.unique (sorted,
              inverse, counts), torch.cat of 70 tensors, and torchvision's batched_nms
              (whose numel() > 4000 test is an If on the data: its vanilla path loops over
              the classes writing the kept boxes into a mask by index_put_, a tensor of
              the enclosing graph carried by the Loop); F.interpolate by a scale factor
              that item() gives at run time (its output sizes computed by the graph)
  body_writes in-place writes inside a Loop whose count the data decides (copy_ through
              a select of a tensor made before it, add_) and inside an If on the data
              (fill_, then a write through a select): the tensors written are outputs of
              the Loop and the If; one case per branch
  detect_heads what torchvision's scripted Faster R-CNN computes after SSD's ops: its
              transform's scale as torch.min(...).item() of the image's sizes (known
              while building: kiln runs nodes on constants then), the resized image
              copied into a padded batch, MultiScaleRoIAlign over two levels (its level
              mapper's log2 of data, int(-log2) of a constant), roi_align of a list of
              boxes and of a rois tensor (isinstance of a Union argument), split by
              counts the data decides
  dict_in_list  dicts in a list, each read by index and set (r = result[i];
              r["b"] = ...), as torchvision's RoI heads set "masks" in the dicts that
              `result` returns, and a dict in a tuple: the list and the tuple hold the
              dict set
  slice_at    writes through slices whose bounds the data decides (item() of
              computed tensors; a start and an end counted from the end; along a dim
              whose size the data decides), as torchvision's mask pasting writes each
              mask into im_mask[y0:y1, x0:x1]; min of a list of ints the graph computes
  stacked_list  a list appended to once per pass of a for whose count the data decides
              (a write into a slice inside; an in-place add to the tensor after its
              append), then len() and torch.stack, as torchvision's
              paste_masks_in_image does; cases of 1 to 4 passes, and of none
  rank_if     an if on the data whose branches give tensors of ranks 3 and 2, as
              torchvision's box decoding has (both cases take the then branch; the unit
              test runs the other, which raises)

Run with the project's venv:  .venv/bin/python tests/models/make_ts_script_fixtures.py
"""
import math
import os
import shutil
import sys
import warnings
import zipfile

from collections import OrderedDict
from typing import Dict, List, NamedTuple, Optional, Union

import numpy as np
import torch
import torchvision
from onnx import numpy_helper

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts", "script")
warnings.filterwarnings("ignore")


class IfRelu(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            y = torch.relu(x)
        else:
            y = -x
        return y


class ForAcc(torch.nn.Module):
    def forward(self, x):
        acc = torch.zeros_like(x[0])
        for i in range(x.size(0)):
            acc = acc + x[i] * 2.0
        return acc


class WhileCnt(torch.nn.Module):
    def forward(self, x):
        i = 0
        while x.sum() < 100.0 and i < 10:
            x = x * 2.0
            i += 1
        return x + i


class LoopIf(torch.nn.Module):
    def forward(self, x):
        acc = torch.zeros_like(x[0])
        for i in range(x.size(0)):
            row = x[i]
            if i % 2 == 0:
                acc = acc + row
            else:
                acc = acc - row
            if row.sum() > 2.0:
                acc = acc * 0.5
        return acc


class Jumps(torch.nn.Module):
    def forward(self, x):
        n = x.size(0) * 2 + 1
        if not bool(x.sum() > 0):
            x = x * n
        for i in range(4):
            if i == 1:
                continue
            if bool(x.abs().sum() > 30.0):
                break
            x = x / (i + 1.5) + x * 3.0
        return x


class Rnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = torch.nn.Linear(4 + 8, 8)

    def forward(self, x):  # x: [time, batch, 4]
        h = torch.zeros(x.size(1), 8)
        for t in range(x.size(0)):
            h = torch.tanh(self.cell(torch.cat([x[t], h], 1)))
        return h


class Greedy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(16, 8))
        self.head = torch.nn.Linear(8, 16)

    def forward(self, tokens):  # [batch, start]: int64
        for _ in range(5):
            # (torch.embedding and topk for argmax: written when kiln refused
            # nn.Embedding's scripted function and argmax; see Functions for both)
            h = torch.embedding(self.table, tokens).mean(1)
            nxt = torch.topk(self.head(h), 1, -1)[1]
            tokens = torch.cat([tokens, nxt], 1)
        return tokens


def shift(x, k: float = 0.5, scale: float = 1.0):
    return squash(x * scale) + k


def squash(x):
    return x / (1.0 + x.abs())


class Functions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(12, 6, padding_idx=0)
        self.seq = torch.nn.Sequential(torch.nn.LayerNorm(6), torch.nn.LeakyReLU(0.2),
                                       torch.nn.Dropout(0.1), torch.nn.ELU(),
                                       torch.nn.Softmax(-1))

    def forward(self, tokens):  # [batch, n]: int64
        h = self.seq(self.emb(tokens))
        h = torch.nn.functional.normalize(shift(h, scale=3.0), dim=-1)
        h = torch.nn.functional.pad(h, [1, 0])
        return h, torch.argmax(h, -1), torch.argmin(h, 1, keepdim=True), torch.argmax(h)


class CnnModules(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.f = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.Hardswish(),
            nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
            nn.Mish(), nn.GELU(approximate="tanh"))
        with torch.no_grad():  # running statistics other than 0 and 1
            self.f[1].running_mean.uniform_(-0.5, 0.5)
            self.f[1].running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.f(x)


class Lists(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Conv2d(3, 3, 1) for _ in range(3)])

    def forward(self, x):  # [batch, 3, h, w]
        outs: List[torch.Tensor] = []
        for layer in self.layers:
            x = torch.tanh(layer(x))
            outs.append(x)
        y = torch.cat(outs, 1)
        up = torch.nn.functional.interpolate(y, scale_factor=2.0, mode="nearest")
        if y.size(0) > 1:  # (the batch: an If) lists made and grown in its branches
            z = torch.nn.functional.interpolate(y, scale_factor=3.0, mode="nearest")
        else:
            z = torch.nn.functional.interpolate(-y, scale_factor=3.0, mode="nearest")
        return up, torch.nn.functional.interpolate(y, size=[5, 7], mode="bilinear",
                                                   align_corners=False), z


class RnnModules(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(4, 8, batch_first=True)
        self.lstm = torch.nn.LSTM(8, 6, num_layers=2, bidirectional=True)

    def forward(self, x):  # [batch, time, 4]
        y, h = self.gru(x)
        z, (h2, c2) = self.lstm(y.transpose(0, 1))
        return z, h + 1.0, h2, c2


class Ranges(torch.nn.Module):
    def forward(self, x):  # [n, 3]
        acc = torch.zeros_like(x[0])
        for i in range(1, x.size(0), 2):  # empty for one row
            acc = acc + x[i] * i
        for j in range(x.size(0) - 1, -1, -3):  # negative step
            acc = acc - x[j]
        for k in range(2, 5):
            acc = acc * 0.5 + k // 2 + x.size(0) // -2  # floordiv of ints
        for m in range(x.size(0), 3):  # empty from three rows on
            acc = acc + m
        for r in x:
            acc = acc + r.sin()
        for c in [1.5, -2.0, 0.25]:
            acc = acc * c
        for t in [x[0], x[-1] * 2.0]:
            acc = acc - t
        return acc


class EarlyReturn(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return torch.relu(x)
        y = x * 2
        if x.mean() < -1:
            return y
        return y + 1


EARLY_RETURN_HAND = """    if bool(torch.gt(torch.sum(x), 0)):
      return torch.relu(x)
    y = torch.mul(x, 2)
    if bool(torch.lt(torch.mean(x), -1)):
      return y
    for i in range(1, 7, 2):
      y = torch.add(y, i)
    return torch.sub(y, 8)
"""


class GroupNormRaise(torch.nn.Module):
    """nn.GroupNorm scripted (its functional's raise on a product of sizes that
    includes the batch: a kiln.Check), a raise on a rank known while building (dropped),
    one on the data, and list slicing and + of sizes."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.gn = torch.nn.GroupNorm(4, 4)

    def forward(self, x):
        if x.dim() != 4:
            raise ValueError("expected a 4-D input")
        h = self.gn(self.conv(x))
        if bool(h.abs().sum() > 1.0e6):
            raise ValueError("activations out of range")
        hw: List[int] = list(x.shape[2:])
        return h.flatten(2).reshape([x.shape[0], 4] + hw) + 1.0


class Defaults(torch.nn.Module):
    """forward parameters with defaults: an Optional tensor defaulting to None, a float."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x, mask: Optional[torch.Tensor] = None, scale: float = 2.0):
        h = self.lin(x)
        if mask is not None:
            h = h.masked_fill(mask, 0.0)
        return h * scale


class NetOutputs(NamedTuple):
    logits: torch.Tensor
    aux: Optional[torch.Tensor]
    features: torch.Tensor


class NamedOutputs(torch.nn.Module):
    """GoogLeNet's way out: a NamedTuple made by a method, one field None (no graph
    output), fields read back (o.logits) and a NamedTuple returned."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4, 5)

    def _forward(self, x) -> NetOutputs:
        f = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(self.conv(x), 1), 1)
        return NetOutputs(self.fc(f), None, f)

    def forward(self, x) -> NetOutputs:
        o = self._forward(x)
        return NetOutputs(torch.softmax(o.logits, 1), o.aux, features=o.features * 2.0)


class Dicts(torch.nn.Module):
    """Dict[str, Tensor] with keys known while building: a display, d[k] = v, in, get
    with a default, len, values(), an empty annotated dict."""

    def forward(self, x):
        d: Dict[str, torch.Tensor] = {"a": x, "b": x * 2.0}
        d["c"] = torch.relu(x)
        d["a"] = d["a"] - 1.0
        hooks = torch.jit.annotate(Dict[str, torch.Tensor], {})
        if "b" in d and len(hooks) == 0:
            y = d["b"] + d["c"]
        else:
            y = x
        z = d.get("missing", x) + d.get("a", x)
        total = torch.stack(list(d.values())).sum(0)
        return y * float(len(d)) + z + total


class TransformerLayer(torch.nn.Module):
    """nn.TransformerEncoderLayer and nn.MultiheadAttention scripted in eval mode (their
    code tests fast-path conditions with dicts, is_nested, devices; kiln takes the path
    with the fast path off), the attention weights returned too."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        h = self.layer(x)
        a, w = self.mha(h, x, x)
        return a, w


class LoopAppend(torch.nn.Module):
    """Appends to a list made before the loop, in for loops whose counts are known while
    building (a fixed dim, a list's length; nested): kiln unrolls them."""

    def forward(self, x):
        cols: List[torch.Tensor] = []
        for i in range(x.size(1)):
            cols.append(x[:, i] * float(i + 1))
        rows: List[torch.Tensor] = []
        for c in cols:
            for k in range(2):
                rows.append(torch.relu(c - float(k)))
        i = 0
        while i < 2:
            rows.append(x[:, 0] + float(i))
            i += 1
        return torch.stack(cols, 1), torch.stack(rows, 0).sum(0)


class TransformerMasks(torch.nn.Module):
    """nn.TransformerEncoder (2 pre-norm GELU layers) scripted, with a causal mask and a
    key padding mask: _canonical_mask, _detect_is_causal_mask (all of a comparison),
    baddbmm, is_floating_point, format."""

    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True,
                                                 norm_first=True, activation="gelu")
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x, pad):
        n = x.size(1)
        causal = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return self.enc(x, mask=causal, src_key_padding_mask=pad)


class ListOps(torch.nn.Module):
    """List slices with bounds from shapes, l * n, [x] * n, sum of ints, all/any of a dim;
    List[float] and List[int] attributes (build_doublelist, build_intlist in data.pkl)."""

    def __init__(self):
        super().__init__()
        self.scales: List[float] = [0.5, 2.0]
        self.steps: List[int] = [1, 3]

    def forward(self, x):
        if bool(x.sum() > 1.0e6):
            raise ValueError("input of dims {} over the bound {} ({})".format(
                x.shape[1:], 1.0e6, x.dim() == 4))
        s = x.shape
        k = x.dim() - 2
        n = x.size(1)
        lead: List[int] = list(s[:k])
        tail = s[k:]
        rev = s[::-1]
        last = s[-n:]
        mid = s[1:n]
        pads = [0, 1] * (x.dim() - 2)
        h = torch.nn.functional.pad(x, pads)
        copies = [x] * n
        y = torch.cat(copies, 1).reshape(lead + [-1]).sum(-1) * self.scales[1]
        y = y + float(self.steps[-1])
        extra = float(sum(tail) + sum(rev[:2]) + len(last) * 10 + len(mid) * 100)
        m = x > 0
        u = torch.all(m.to(torch.uint8), 2)
        return (y + extra, h, torch.all(m, 1), torch.any(m, dim=-1, keepdim=True),
                (x > 1).all(-1).any(-1), u, torch.any(m, 1, True).float())


class DictIter(torch.nn.Module):
    """Loops over a dict's items(), keys() and values(); pop, get with a default."""

    def forward(self, x):
        d: Dict[str, torch.Tensor] = {"a": x, "b": x * 2.0, "c": x - 1.0}
        acc = torch.zeros_like(x)
        for k, v in d.items():
            if k == "b":
                acc = acc + v * 3.0
            else:
                acc = acc + v
        for k in d.keys():
            acc = acc + d[k] * float(len(k))
        for v in d.values():
            acc = acc * 0.5 + v
        p = d.pop("a")
        q = d.pop("zz", x)
        r = d.get("a", q * 4.0)
        return acc + p + q + r + float(len(d)), torch.stack(list(d.values())).sum(0)


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


class NamedIf(torch.nn.Module):
    """A NamedTuple made in both branches of an if on the data, read, and returned."""

    def forward(self, x):
        if bool(x.sum() > 0):
            o = Pair(x + 1.0, torch.relu(x))
        else:
            o = Pair(second=x * 2.0, first=x - 1.0)
        return Pair(o.first * o[1], o.second + 0.5)


class SegDict(torch.nn.Module):
    """An IntermediateLayerGetter (its return_layers dict) and a dict returned."""

    def __init__(self):
        super().__init__()
        backbone = torch.nn.Sequential(OrderedDict(
            conv1=torch.nn.Conv2d(3, 4, 3, padding=1), relu=torch.nn.ReLU(),
            conv2=torch.nn.Conv2d(4, 6, 3, stride=2, padding=1)))
        self.body = torchvision.models._utils.IntermediateLayerGetter(
            backbone, {"relu": "low", "conv2": "out"})
        self.head = torch.nn.Conv2d(10, 2, 1)

    def forward(self, x):
        f = self.body(x)
        size = x.shape[-2:]
        hi = torch.nn.functional.interpolate(f["out"], size=size, mode="bilinear",
                                             align_corners=False)
        result = OrderedDict()
        result["out"] = self.head(torch.cat([hi, f["low"]], 1))
        result["low"] = f["low"]
        return result


class TinyFpn(torch.nn.Module):
    """torchvision.ops.FeaturePyramidNetwork over three levels of a tiny backbone."""

    def __init__(self):
        super().__init__()
        conv = torch.nn.Conv2d
        backbone = torch.nn.Sequential(OrderedDict(
            c1=conv(3, 4, 3, stride=2, padding=1), r1=torch.nn.ReLU(),
            c2=conv(4, 8, 3, stride=2, padding=1), r2=torch.nn.ReLU(),
            c3=conv(8, 8, 3, stride=2, padding=1)))
        self.body = torchvision.models._utils.IntermediateLayerGetter(
            backbone, {"r1": "0", "r2": "1", "c3": "2"})
        self.fpn = torchvision.ops.FeaturePyramidNetwork(
            [4, 8, 8], 6, extra_blocks=torchvision.ops.feature_pyramid_network.LastLevelMaxPool())

    def forward(self, x):
        return self.fpn(self.body(x))


class SwinBlocks(torch.nn.Module):
    """Three torchvision SwinTransformerBlocks on a 6x6 grid padded to windows of 4 and 8."""

    def __init__(self):
        super().__init__()
        block = torchvision.models.swin_transformer.SwinTransformerBlock
        self.a = block(8, 2, [4, 4], [2, 2])
        self.b = block(8, 2, [4, 4], [0, 0])
        self.c = block(8, 2, [8, 8], [4, 4])

    def forward(self, x):
        return self.c(self.b(self.a(x)))


class AttrSet(torch.nn.Module):
    """Attributes set by forward: a warning's flag (torchvision's SSD) and a scale."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)
        self._has_warned = False
        self.scale = 2.0

    def forward(self, x):
        if not self._has_warned:
            warnings.warn("AttrSet: the first call warns once")
            self._has_warned = True
        self.scale = 3.0
        return self.lin(x) * self.scale


class DictMerge(torch.nn.Module):
    """setdefault and update of a Dict[str, Tensor]."""

    def forward(self, x):
        d: Dict[str, torch.Tensor] = {"a": x}
        e = d.setdefault("b", x * 2.0)
        f = d.setdefault("a", x * 5.0)
        other: Dict[str, torch.Tensor] = {"a": x + 1.0, "c": x * 3.0}
        d.update(other)
        return d["a"] + d["b"] * d["c"] + e - f * len(d)


class ListInput(torch.nn.Module):
    """A List[Tensor] parameter: its length, its elements by index, the last one."""

    def forward(self, xs: List[torch.Tensor]):
        out = xs[0] * 2.0
        for i in range(1, len(xs)):
            out = out + xs[i] * float(i)
        return torch.cat([out, xs[-1]], 0)


class AttrSetData(torch.nn.Module):
    """An attribute set inside an if on the data."""

    def __init__(self):
        super().__init__()
        self.flag = False

    def forward(self, x):
        if bool(x.sum() > 0):
            self.flag = True
        return x * 2


class DetectOps(torch.nn.Module):
    """The ATen ops of torchvision's scripted SSD (docstring at the top)."""

    def __init__(self):
        super().__init__()
        self.mean = [0.5, 0.25, 0.125, 1.0, 2.0]

    def forward(self, x):  # [n, 5]
        mean = torch.as_tensor(self.mean, dtype=x.dtype, device=x.device)
        y = torch.as_tensor(x - mean, dtype=torch.float64)
        s = torch.scalar_tensor(2) * torch.scalar_tensor(3, dtype=torch.int64)
        f1 = torch.full_like(x, 3, dtype=torch.int64)
        f2 = torch.full_like(x[0], float(x.size(0)) * 0.5)
        e = torch.cat([x.flatten(), torch.empty([0]), x.new_empty([0])])
        m_all, n_all = torch.max(x), torch.min(x)
        mv, mi = torch.max(x, 1)
        nv, ni = torch.min(x, 0, keepdim=True)
        mx = torch.max(x, x.flip(0)) + torch.min(x, mean) + torch.maximum(x, y.float())
        nz = torch.where(x > 0.5)
        w1 = torch.where(x > 0, x, 0.0)
        w2 = torch.where(x > 0, 1, 0)
        k = int(torch.tensor(2).item())
        it = float(x.sum().item())
        shifts_y, shifts_x = torch.meshgrid([torch.arange(0, 3), torch.arange(0, 4)],
                                            indexing="ij")
        gx, gy = torch.meshgrid([torch.arange(0, 3), torch.arange(0, 4)], indexing="xy")
        rep = x[k].repeat([2, 2, 1])
        b1, b2 = torch.broadcast_tensors(x[:, :1], mean)
        boxes = torch.cat([x[:, :2], x[:, :2] + x[:, 2:4].abs() + 0.1], 1)
        keep = torchvision.ops.nms(boxes, x[:, 4].sigmoid(), 0.3)
        sel = x[:, 0][x[:, 1] > 0]
        rows = x[x[:, 2] > 0]
        whole = x[x > 0.2]
        c = math.ceil(float(x.size(1)) / 2.0) * 2 + math.floor(7.5)
        batch = x.new_full([2, x.size(0), c], 0)
        for i in range(batch.size(0)):  # (dim 0 is the batch: its size is not known)
            batch[i][:, 1 : x.size(1) + 1].copy_(x * float(i + 1))
        return (y, s, f1, f2, e, m_all, n_all, mv, mi, nv, ni, mx, nz[0], nz[1], w1, w2,
                x * it, shifts_y, shifts_x, gx, gy, rep, b1, b2, keep, sel, rows, whole,
                batch, torch.round(x * 4.0), torch.round(x, decimals=2), (x * 8).round_(),
                torch.round(torch.arange(-5, 6).to(x.dtype) * 0.5 + x[0, 0] * 0.0))


class Boxes:
    """A class of the code, as torchvision's ImageList."""

    def __init__(self, tensors: torch.Tensor, sizes: List[int]):
        self.tensors = tensors
        self.sizes = sizes

    def scaled(self, k: float) -> torch.Tensor:
        return self.tensors * k + float(self.sizes[1])


class DetectFlow(torch.nn.Module):
    """The control flow of torchvision's scripted SSD (docstring at the top)."""

    def forward(self, x):  # [n, 5]
        b = Boxes(x, [x.size(1), 3])
        feats: Dict[str, torch.Tensor] = {}
        for i in range(3):
            feats[str(i)] = x * float(i)
        labels = (x[:, 4] * 2).floor().to(torch.int64).clamp(-2, 2)
        u, inv, counts = torch.unique(labels, sorted=True, return_inverse=True,
                                      return_counts=True)
        many = torch.cat([x[:, :1] * float(i) for i in range(70)], 1)
        boxes = torch.cat([x[:, :2], x[:, :2] + x[:, 2:4].abs() + 0.1], 1)
        scores = x[:, 4].sigmoid()
        keep = torchvision.ops.batched_nms(boxes, scores, labels, 0.3)
        big = boxes.repeat([1000, 1]) + torch.arange(0, 1000 * x.size(0)).to(x.dtype)[:, None]
        step = torch.arange(0, 1000 * x.size(0)).to(x.dtype) * 1e-5  # (no ties to sort)
        keep_big = torchvision.ops.batched_nms(big, scores.repeat([1000]) + step,
                                               labels.repeat([1000]), 0.3)
        scale = float((x.mean() * 0.0 + 2.0).item())  # a number the graph computes
        up = torch.nn.functional.interpolate(x[None, None], scale_factor=scale, mode="nearest",
                                             recompute_scale_factor=True)
        return (b.scaled(2.0), feats["2"] - feats["1"], u, inv, counts, many, keep,
                keep_big[:20], up)


class BodyWrites(torch.nn.Module):
    """In-place writes in Loop and If bodies (docstring at the top)."""

    def forward(self, x):
        m = torch.zeros_like(x)
        n = torch.zeros_like(x)
        for i in range(int(x.sum() > 0) + 2):  # a count the data decides
            m[0] = m[0] + x[0] * float(i + 1)
            n.add_(1.0)
        k = torch.zeros_like(x)
        if bool(x.sum() > 0):
            k.fill_(2.0)
            k[1] = 5.0
        return m, n, k


def roi_boxes(raw: torch.Tensor, hw: List[int]) -> torch.Tensor:
    """Boxes x1, y1, x2, y2 inside an image of hw from rows of raw (at least 4 wide)."""
    x1 = raw[:, 0].abs() * float(hw[1]) * 0.25
    y1 = raw[:, 1].abs() * float(hw[0]) * 0.25
    x2 = x1 + raw[:, 2].abs() * float(hw[1]) * 0.25 + 0.5
    y2 = y1 + raw[:, 3].abs() * float(hw[0]) * 0.25 + 0.5
    return torch.stack([x1, y1, x2, y2], 1)


def pooled(x: torch.Tensor, boxes: Union[torch.Tensor, List[torch.Tensor]]) -> torch.Tensor:
    """isinstance of a Union argument, as torchvision's roi_align asks of its boxes."""
    if isinstance(boxes, (list, tuple)):
        return torchvision.ops.roi_align(x, boxes, [2, 2], 0.5, -1, True)
    return torchvision.ops.roi_align(x, boxes, 2, 1.0, 2, False)


class DetectHeads(torch.nn.Module):
    """What torchvision's scripted Faster R-CNN computes after SSD's ops (docstring at
    the top)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.pool = torchvision.ops.MultiScaleRoIAlign(["0", "1"], 3, sampling_ratio=2)

    def forward(self, images: List[torch.Tensor], raw: torch.Tensor):
        image = images[0]
        im_shape = torch.tensor(image.shape[-2:])
        min_size = float(torch.min(im_shape).item())
        max_size = float(torch.max(im_shape).item())
        scale = min(16.0 / min_size, 24.0 / max_size)
        image = torch.nn.functional.interpolate(image[None], size=None, scale_factor=scale,
                                                mode="bilinear", recompute_scale_factor=True,
                                                align_corners=False)[0]
        stride = 8.0
        h = int(math.ceil(float(image.shape[1]) / stride) * stride)
        w = int(math.ceil(float(image.shape[2]) / stride) * stride)
        batch = image.new_full([1, 3, h, w], 0)
        batch[0][:, : image.shape[1], : image.shape[2]].copy_(image)
        f0 = self.conv(batch)
        f1 = torch.nn.functional.max_pool2d(f0, 2)
        hw = [int(image.shape[1]), int(image.shape[2])]
        b = roi_boxes(raw[raw[:, 4] > 0], hw)
        c = roi_boxes(raw[raw[:, 4] <= 0], hw)
        sizes = [b.size(0), c.size(0)]
        parts = torch.split(torch.cat([b, c]) * 2.0, sizes)
        p = self.pool({"0": f0, "1": f1}, [b], [(hw[0], hw[1])])
        rois = torch.cat([torch.zeros_like(c[:, :1]), c], 1)
        levels = torch.log2(b[:, 2:] - b[:, :2] + 1.0)
        return (batch, p, pooled(f0, [b]), pooled(f1, rois), parts[0], parts[1], levels,
                int(-torch.log2(torch.tensor(0.0625)).item()) * raw)


class RankIf(torch.nn.Module):
    """An if on the data whose branches give tensors of different ranks, as torchvision's
    box decoding reshapes its boxes to [n, -1, 4] only when there are some."""

    def forward(self, x):
        keep = x[x[:, 0] > 0]
        n = keep.size(0)
        if n > 0:
            r = keep.reshape(n, -1, 2)
        else:
            r = keep
        return r * 2.0, r.sum(-1), r[..., 0]


class DictInList(torch.nn.Module):
    """A dict read from a list and set: the list holds the one object (docstring at the
    top)."""

    def forward(self, x):
        result: List[Dict[str, torch.Tensor]] = []
        for i in range(3):
            result.append({"a": x * float(i)})
        for i in range(len(result)):
            r = result[i]
            r["b"] = r["a"] + 1.0
        pair = (result[0], 2)
        d = pair[0]
        d["c"] = x * 3.0
        return result[2]["b"], result[0]["c"], pair[0]["b"]


class SliceAt(torch.nn.Module):
    """Writes through slices whose bounds the data decides (docstring at the top)."""

    def forward(self, x):  # [6, 5]
        a = int(torch.clamp((x[0, 0].abs() * 2.0).floor(), 0, 2).item())
        b = a + 2
        im = torch.zeros([7, 9])
        im[a:b, a + 1 : a + 5] = x[: b - a, :4] * 3.0
        im[-b:, : a + 1] = 1.0  # a start counted from the end
        im[a - 9 : -a - 1, 8:] = 2.0  # an end counted from the end
        rows = x[x[:, 4] > -100.0] * 1.0  # (as many rows as x, but the data decides)
        rows[1 : a + 2] = 5.0  # along a dim whose size the data decides
        n = min([len(rows), a + 3, 9])
        return im, rows, rows[:n] * 2.0


class StackedList(torch.nn.Module):
    """A list appended to once per pass of a loop whose count the data decides, then
    stacked (docstring at the top)."""

    def forward(self, x):  # [6, 5]
        rows = x[x[:, 0] > 0]
        res: List[torch.Tensor] = []
        for i in range(min([len(rows), 4])):
            r = rows[i]
            im = torch.zeros([3, 4])
            a = int(torch.clamp(r[1].abs() * 2.0, 0, 2).item())
            im[a : a + 1, :] = r[1:]
            res.append(im)
            im.add_(1.0)  # (after the append: the list holds im)
        if len(res) > 0:
            out = torch.stack(res)
        else:
            out = x.new_zeros([0, 3, 4])
        return out * 2.0, out.sum(0)


def hand_edit(path, forward_body):
    """Replace the body of forward in the saved code/__torch__.py with forward_body."""
    with zipfile.ZipFile(path) as z:
        entries = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for info, data in entries:
            if info.filename.endswith("/code/__torch__.py"):
                text = data.decode()
                head = text[:text.index("-> Tensor:\n") + len("-> Tensor:\n")]
                data = (head + forward_body).encode()
            z.writestr(info, data)


def cases():
    g = torch.Generator().manual_seed(7)
    r = lambda *s: torch.randn(*s, generator=g)
    return [
        ("if_relu", IfRelu, [(r(3, 4).abs(),), (-r(3, 4).abs(),)]),
        ("for_acc", ForAcc, [(r(5, 3),), (r(1, 3),)]),
        ("while_cnt", WhileCnt, [(r(2, 3).abs() + 0.1,), (torch.full((2, 3), 50.0),)]),
        ("loop_if", LoopIf, [(torch.rand(6, 4, generator=g),)]),
        ("jumps", Jumps, [(r(2, 3),), (r(4, 3) * 3,)]),
        ("rnn", Rnn, [(r(7, 2, 4),), (r(3, 2, 4),)]),
        ("greedy", Greedy, [(torch.randint(0, 16, (2, 3), generator=g),)]),
        ("functions", Functions, [(torch.tensor([[0, 3, 11, 5], [7, 0, 0, 2]]),),
                                  (torch.randint(0, 12, (3, 4), generator=g),)]),
        ("cnn_modules", CnnModules, [(r(2, 3, 8, 8),), (r(1, 3, 8, 8),)]),
        ("lists", Lists, [(r(2, 3, 4, 4),), (r(1, 3, 4, 4),)]),
        ("rnn_modules", RnnModules, [(r(2, 5, 4),), (r(3, 5, 4),)]),
        ("ranges", Ranges, [(r(5, 3),), (r(1, 3),), (r(2, 3),), (r(7, 3),)]),
        ("early_return", EarlyReturn, [(r(3, 4).abs(),), (-r(3, 4).abs() - 1.5,),
                                       (-r(3, 4).abs() * 0.1,)]),
        ("group_norm", GroupNormRaise, [(r(2, 3, 5, 5),), (r(1, 3, 5, 5),)]),
        ("defaults", Defaults, [(r(2, 4),), (r(3, 4),)]),
        ("defaults_mask", Defaults, [(r(2, 4), r(2, 3) > 0), (r(1, 4), r(1, 3) > 0.5)]),
        ("named_outputs", NamedOutputs, [(r(2, 3, 6, 6),), (r(1, 3, 6, 6),)]),
        ("dicts", Dicts, [(r(2, 3),), (r(4, 3),)]),
        ("transformer_layer", TransformerLayer, [(r(2, 5, 8),), (r(3, 5, 8),)]),
        ("loop_append", LoopAppend, [(r(2, 3),), (r(5, 3),)]),
        ("transformer_masks", TransformerMasks,
         [(r(2, 6, 8), torch.tensor([[False] * 6, [False] * 4 + [True] * 2])),
          (r(3, 6, 8), torch.tensor([[False] * 5 + [True], [False] * 6, [False] * 3 + [True] * 3]))]),
        ("list_ops", ListOps, [(r(2, 3, 4, 5),), (r(1, 3, 4, 5) + 0.5,)]),
        ("dict_iter", DictIter, [(r(2, 3),), (r(1, 3),)]),
        ("named_if", NamedIf, [(r(2, 3).abs(),), (-r(3, 3).abs(),)]),
        ("seg_dict", SegDict, [(r(2, 3, 8, 8),), (r(1, 3, 8, 8),)]),
        ("fpn", TinyFpn, [(r(2, 3, 16, 16),), (r(1, 3, 16, 16),)]),
        ("swin_blocks", SwinBlocks, [(r(2, 6, 6, 8),), (r(1, 6, 6, 8),)]),
        ("attr_set", AttrSet, [(r(2, 3),), (r(5, 3),)]),
        ("attr_set_data", AttrSetData, [(r(2, 3),)]),
        ("dict_merge", DictMerge, [(r(2, 3),), (r(4, 3),)]),
        ("list_input", ListInput, [([r(2, 3), r(2, 3), r(2, 3)],), ([r(2, 3), r(2, 3), r(2, 3)],)]),
        ("detect_ops", DetectOps, [(r(6, 5),), (r(3, 5) + 0.3,)]),
        ("detect_flow", DetectFlow, [(r(6, 5),), (r(3, 5) + 0.3,)]),
        ("body_writes", BodyWrites, [(r(3, 4).abs(),), (-r(3, 4).abs(),)]),
        ("detect_heads", DetectHeads, [([torch.rand(3, 20, 28, generator=g)], r(6, 5)),
                                       ([torch.rand(3, 20, 28, generator=g)], r(4, 5))]),
        ("rank_if", RankIf, [(r(5, 4).abs(),), (r(6, 4),)]),
        ("dict_in_list", DictInList, [(r(2, 3),), (r(4, 3),)]),
        ("slice_at", SliceAt, [(r(6, 5),), (r(6, 5) * 0.3,), (r(6, 5) + 2.0,)]),
        ("stacked_list", StackedList, [(r(6, 5),), (r(6, 5) + 3.0,), (-r(6, 5).abs(),)]),
        ("early_return_hand", EarlyReturn, [(r(3, 4).abs(),), (-r(3, 4).abs() - 1.5,),
                                            (-r(3, 4).abs() * 0.1,)]),
    ]


def write_pb(arr, name, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(arr, name=name).SerializeToString())


def emit(name, cls, inputs):
    torch.manual_seed(len(name))
    model = cls().eval()
    scripted = torch.jit.script(model)
    folder = os.path.join(HERE, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    scripted.save(os.path.join(folder, "model.pt"))
    if name == "early_return_hand":
        hand_edit(os.path.join(folder, "model.pt"), EARLY_RETURN_HAND)
    names = [a.name for a in scripted.forward.schema.arguments[1:]]
    for k, args in enumerate(inputs):
        with torch.no_grad():
            out = model(*args)
        fields = getattr(out, "_fields", None)  # a NamedTuple: its fields not None
        if isinstance(out, dict):  # a dict: outputs named after its keys
            fields, out = list(out.keys()), tuple(out.values())
        outs = out if isinstance(out, tuple) else (out,)
        onames = [f"output_{j}" for j in range(len(outs))]
        if fields:
            onames = [n for n, o in zip(fields, outs) if o is not None]
            outs = [o for o in outs if o is not None]
        if name.startswith("early_return"):  # each case ends at another return
            assert [bool(args[0].sum() > 0), bool(args[0].mean() < -1)].count(True) == \
                (0 if k == 2 else 1), (name, k)
        case = os.path.join(folder, f"test_data_set_{k}")
        os.makedirs(case)
        flat = []  # a list argument's elements as inputs NAME.0, NAME.1, ...
        for n, a in zip(names, args):
            flat += [(f"{n}.{i}", e) for i, e in enumerate(a)] if isinstance(a, list) else [(n, a)]
        for j, (n, a) in enumerate(flat):
            write_pb(a.numpy(), n, os.path.join(case, f"input_{j}.pb"))
        for j, o in enumerate(outs):
            write_pb(o.numpy(), onames[j], os.path.join(case, f"output_{j}.pb"))
    print(f"{name}: {os.path.getsize(os.path.join(folder, 'model.pt'))} bytes")


def main():
    only = sys.argv[1:]
    for name, cls, inputs in cases():
        if not only or name in only:
            emit(name, cls, inputs)


if __name__ == "__main__":
    main()
