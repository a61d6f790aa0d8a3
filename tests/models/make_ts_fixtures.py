#!/usr/bin/env python3
"""Makes the TorchScript fixtures of tests/models/ts/ (kiln check runs them).

Each model is traced in eval mode (torch.jit.trace) and saved (torch.jit.save) as
tests/models/ts/<name>/model.pt beside test_data_set_0/input_K.pb and output_K.pb: the
example input and what PyTorch eager computes from it. The same module exported to ONNX
goes to tests/models/ts/<name>_onnx/model.onnx with the same test data, so that kiln's
optimized graphs of the two can be compared (kiln inspect -O2).

Models are hand-written (no torchvision) and tiny, so that all of them stay well under
2 MB:
  mlp          Linear, BatchNorm1d, GELU, Dropout, Linear
  cnn          conv/bn/relu, max pool, a residual block, avg pool, hardswish, adaptive
               avg pool, flatten, linear
  mobile       depthwise conv, ReLU6 (hardtanh), squeeze-excite (mean, hardsigmoid),
               SiLU, chunk, cat, a bias-free grouped conv
  transformer  torch.nn.TransformerEncoder, 2 layers, batch_first
  tiny_gpt     embedding, linear, chunk, view/transpose, causal scaled_dot_product_
               attention, layer_norm, int64 token input
  strided      non-contiguous and offset parameters (a transposed view, a slice)
  ops          a medley of ATen calls the others do not make (padding="same",
               ConvTranspose, GroupNorm, F.pad, dilated and ceil-mode pools, adaptive
               pools of sizes that do not divide, addmm, unbind/stack, clamp, rsub,
               div rounding modes, slicing with steps, reductions, two outputs); no
               ONNX twin, as the ONNX exporter has no form for some of them
  ops2         more ATen calls of real models: arange (one of the batch's length),
               argsort, sort, topk, gather, cumsum, reshape_as, view_as,
               _shape_as_tensor, _weight_norm, bilinear and nearest upsampling (sizes
               and scale factors, both align_corners), conv2d_same padding computed
               by the graph, lstm and gru; no ONNX twin
  ops3         ATen calls of issue 21's trial of real models: softmax/sum with a dtype,
               unfold (im2col), addcmul/addcdiv, diff, instance_norm, linspace,
               grid_sample, chunk of a computed dim, cat with an empty 1-D tensor, window
               reshapes (TinyViT), expand from the batch (ConvBERT); no ONNX twin
  lstm_proj    nn.LSTM with proj_size (unrolled by kiln: ONNX's LSTM has no
               projection), 2 layers bidirectional batch first, and one without biases
               given h0 and c0; no ONNX twin
  lstm_proj_seq_first  the same over a sequence-first input, whose length kiln does not
               know while building: refused (the unit test)
  views        in-place writes through views (slice fill_, copy_ into a select,
               chained slices, permute + slice, a stepped slice of a view, masked_fill_,
               index_fill_, index_put_,
               a view read after its base changed), three outputs; no ONNX twin
  views_after_writes  views made before their base is written, then read and written;
               writes into selects of the batch dim, unsqueeze, narrow; no ONNX twin
  shared       forty buffers viewing one storage, and buffers expanded with stride 0
               (in the last dim and a middle one), two outputs; no ONNX twin
  stdconv      batch statistics on purpose in eval mode: weights standardized by
               F.batch_norm(training=True) without running statistics (timm's NFNets),
               a BatchNorm2d(track_running_stats=False); no ONNX twin (torch's
               exporter cannot write the first; the ONNX node tests cover
               BatchNormalization training_mode=1)
  shared_deflated  600 buffers viewing one 75 MiB storage of zeros, the archive's
               entries deflated: loading must inflate it once, not 600 times; no ONNX
               twin (tests/run_files_cli.sh checks it within its time limit)

Run with the project's venv:  .venv/bin/python tests/models/make_ts_fixtures.py
(model names as arguments make only those: ... make_ts_fixtures.py views)

Run with Debian's torch 1.13 (tools/setup.sh --torch113), which writes its archives
differently (tests/models/ts/README.md):  /usr/bin/python3 tests/models/make_ts_fixtures.py
It writes the same models (no ONNX twins: Debian has no onnx) to tests/models/ts/t113/,
with tiny_gpt's attention spelled out, as torch 1.13 has no scaled_dot_product_attention.
"""
import math
import os
import shutil
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TORCH1 = int(torch.__version__.split(".")[0]) < 2
if not TORCH1:
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts")
if TORCH1:
    HERE = os.path.join(HERE, "t113")
OPSET = 18
TOL = 1e-4

warnings.filterwarnings("ignore")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.GELU(),
                                 nn.Dropout(0.1), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y += x
        return self.relu(y)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.block = Block(8)
        self.avg = nn.AvgPool2d(2)
        self.act = nn.Hardswish()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.pool(self.relu(self.bn(self.stem(x))))
        x = self.act(self.avg(self.block(x)))
        return self.fc(torch.flatten(self.gap(x), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.reduce = nn.Conv2d(c, c // 4, 1)
        self.expand = nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        s = F.hardsigmoid(self.expand(F.relu(self.reduce(s))))
        return x * s


class Mobile(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU6())
        self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
        self.se = SqueezeExcite(16)
        self.grouped = nn.Conv2d(8, 8, 1, groups=2, bias=False)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = self.se(F.silu(self.dw(self.stem(x))))
        a, b = torch.chunk(x, 2, dim=1)
        x = torch.cat([self.grouped(a), b], dim=1)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class TinyGPT(nn.Module):
    def __init__(self, vocab=32, d=16, heads=2, ctx=8):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(ctx, d) * 0.1)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        b, t = tokens.shape
        x = self.tok(tokens) + self.pos[:t]
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, -1).transpose(1, 2)
        k = k.view(b, t, self.heads, -1).transpose(1, 2)
        v = v.view(b, t, self.heads, -1).transpose(1, 2)
        if TORCH1:  # what scaled_dot_product_attention computes, spelled out, with
            # both spellings of a causal mask: triu(1) of the future, ~tril() of the past
            future = torch.ones(t, t, dtype=torch.bool).triu(1)
            past = torch.ones(t, t, dtype=torch.bool).tril()
            att = (q @ k.transpose(-2, -1)) * (q.size(-1) ** -0.5)
            att = att.masked_fill(future, float("-inf")).masked_fill(~past, float("-inf"))
            y = att.softmax(-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, -1)
        x = x + self.proj(y)
        return self.out(F.silu(x))


class Strided(nn.Module):
    """Parameters that are views: torch.jit.save writes their storage, offset and
    strides, which kiln must gather into row-major order."""

    def __init__(self):
        super().__init__()
        base = torch.randn(6, 8)
        self.wt = nn.Parameter(base.t())          # [8, 6], strides (1, 8)
        storage = torch.randn(40)
        self.bias = nn.Parameter(storage[10:16])  # offset 10
        self.register_buffer("scale", torch.randn(4, 6)[1:3, ::2])  # [2, 3] strided

    def forward(self, x):
        y = x @ self.wt + self.bias
        return y[:, :3] * self.scale.sum(0)


class Shared(nn.Module):
    """Forty buffers viewing one storage at forty offsets (kiln keeps a storage it reads
    a second time, rather than read it again for every view), and expanded buffers:
    stride 0 in the last dim and in a middle one (gathered a row at a time)."""

    def __init__(self):
        super().__init__()
        base = torch.randn(40, 8)
        for i in range(40):
            self.register_buffer(f"r{i}", base[i])  # [8], offset 8 i, one storage
        self.register_buffer("e_last", torch.randn(1).expand(8))            # stride (0,)
        self.register_buffer("e_mid", torch.randn(3, 1, 4).expand(3, 5, 4))  # (4, 0, 1)

    def forward(self, x):
        y = x
        for i in range(40):
            y = y + getattr(self, f"r{i}") * (i + 1)
        return y * self.e_last, self.e_mid * 2


class SharedDeflated(nn.Module):
    """600 buffers viewing one 75 MiB storage of zeros, in an archive whose entries are
    then deflated (deflated_zip below; torch.jit.save stores them): a reader that
    inflates the storage for every view does 45 GiB of work, from a 300 KB file."""

    def __init__(self):
        super().__init__()
        base = torch.zeros(600, 1 << 15)
        for i in range(600):
            self.register_buffer(f"v{i}", base[i])

    def forward(self, x):
        y = x
        for i in range(600):
            y = y + getattr(self, f"v{i}")
        return y


def deflated_zip(path):
    """Rewrites the archive at path with every entry deflated."""
    import zipfile
    with zipfile.ZipFile(path) as z:
        entries = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in entries:
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)


class Ops(nn.Module):
    def __init__(self):
        super().__init__()
        self.same = nn.Conv2d(4, 6, 3, padding="same", dilation=2)
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)
        self.gn = nn.GroupNorm(2, 4)
        self.fc = nn.Linear(36, 8)
        self.w = nn.Parameter(torch.randn(8, 8) * 0.3)
        self.b = nn.Parameter(torch.randn(8))

    def forward(self, x):                                   # [B, 4, 6, 6]
        y = self.up(F.leaky_relu(self.same(x), 0.2))        # [B, 4, 12, 12]
        y = F.pad(self.gn(F.elu(y)), (1, 2, 0, 1), value=0.5)
        y = F.max_pool2d(y, 3, stride=2, dilation=2)        # [B, 4, 5, 6]
        y = F.avg_pool2d(y, 2, padding=1, ceil_mode=True, count_include_pad=False)
        y = F.adaptive_avg_pool2d(y, (3, 3)) + F.adaptive_max_pool2d(y, 1)
        z = torch.addmm(self.b, self.fc(torch.flatten(y, 1)), self.w, beta=0.5, alpha=2.0)
        s = torch.stack(torch.unbind(z.view(-1, 2, 4), 1), dim=-1)     # [B, 4, 2]
        s = torch.clamp(s, -1.5, 2.0) + torch.rsub(s, 1.0) * F.softplus(s)
        t = torch.div(s, 0.7, rounding_mode="floor") + torch.div(s, 0.3, rounding_mode="trunc")
        u = torch.sqrt(torch.abs(s) + 1).pow(3) + t.sum(-1, keepdim=True)
        v = u[:, ::2, :].narrow(2, 1, 1).squeeze(2).unsqueeze(0).expand(3, -1, -1)
        return F.log_softmax(u.flatten(1), -1), v.amax(0) - F.relu6(v).mean(0)


class Views(nn.Module):
    """In-place writes through views, which kiln functionalizes: fill_ of a slice, copy_
    into a select, chained slices, a write through permute + slice, a stepped slice of a
    view, add_ into a select of a select, writes by a mask and by indices, and a
    view taken before later writes to its base (it must see them)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):                                   # [B, 4, 6]
        y = self.lin(x)
        y[:, 1:3].fill_(0.5)                                # slice fill_
        y[:, 0].copy_(x[:, 3] * 2)                          # copy_ into a select
        old = y[:, 2]                                       # a view read after writes
        y[:, 2:, 4:].mul_(-1.0)                             # chained slices, mul_
        z = torch.zeros(x.shape[0], 6, 4)
        z.permute(0, 2, 1)[:, 1:3].copy_(x[:, 1:3])         # permute, then slice
        w = z.view(x.shape[0], 24)
        w[:, 1::5] = 7.0                                    # a stepped slice of a view
        z[:, 2][:, 1:].add_(y[:, 0, :3])                    # select, slice, add_
        y[x > 1.0] = -3.0                                   # index_put_ by a mask
        y[:, 3][torch.tensor([0, -1])] = 9.0                # index_fill_ of a view
        y[:, 1][torch.tensor([1, 0])] = x[0, :2]            # index_put_ of a view
        return y * 2 + old.sum(), z, old


class ViewsAfterWrites(nn.Module):
    """Views made before their base is written (read and written after), writes into
    views of the batch dim (of unknown size in kiln's graph), unsqueeze and narrow."""

    def forward(self, x):                                   # [B, 5, 6]
        y = x * 1.0
        a = y.transpose(1, 2)
        b = a[:, 1]
        y.add_(1.0)                                         # a and b see this
        b.mul_(2.0)                                         # and y sees this
        c = y.unsqueeze(0)
        c[0, :, -1].zero_()
        y.narrow(2, 1, 3).sub_(x[:, :, :3])
        e = y.view(x.shape[0], 30)
        e[:, 3:9:2] = x[:, 0, :3] * 10
        y[1].relu_()                                        # a select of the batch dim
        return y, a, b, c


class Ops2(nn.Module):
    """ATen calls of real traced models that the other fixtures do not make: arange
    (known bounds, a float end computed by the graph, a length from the batch dim),
    argsort (descending, and stable ascending), sort, topk, gather along a middle dim,
    cumsum (float along dim 1, bool with a dtype), reshape_as, view_as, _shape_as_tensor,
    _weight_norm (dim 0 and the whole tensor), upsample_bilinear2d (sizes and scale
    factors, both align_corners) and upsample_nearest2d (sizes, a scale factor that is
    not an integer), timm's conv2d_same padding computed from a size that kiln's
    graph knows only when it runs (the batch dim, transposed into a spatial one), and
    lstm (2 layers, bidirectional, batch first, given h0 and c0) and gru (a sequence
    of the batch's length, h0 of zeros)."""

    def __init__(self):
        super().__init__()
        self.wn_conv = nn.utils.weight_norm(nn.Conv2d(3, 4, 3, padding=1))
        self.wn_fc = nn.utils.weight_norm(nn.Linear(7, 5), dim=None)
        self.same = nn.Conv2d(3, 4, 3, stride=2)
        self.lstm = nn.LSTM(7, 5, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(7, 4)

    def conv2d_same(self, x):                                 # timm's pad_same
        ih, iw = x.size()[-2:]
        ph = max((math.ceil(ih / 2) - 1) * 2 + 3 - ih, 0)
        pw = max((math.ceil(iw / 2) - 1) * 2 + 3 - iw, 0)
        x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2], value=0.25)
        return self.same(x)

    def forward(self, x):                                   # [B, 3, 6, 7]
        b = x.shape[0]
        r = torch.arange(b).float().view(-1, 1, 1, 1)       # a length from the batch dim
        r2 = torch.arange(1, x.shape[3], 2, dtype=torch.float32)
        r3 = torch.arange(x.shape[2] * 0.5)                 # a float end: [0, 1, 2]
        y = x + r + r2.sum() - r3.mean()
        idx = torch.argsort(y, dim=2, descending=True)
        g = torch.gather(y, 2, idx)                         # sorted along a middle dim
        i1 = torch.argsort(y, dim=1, stable=True)
        g1 = torch.gather(y, 1, i1[:, :2])
        c = torch.cumsum(g, 1) + torch.cumsum(x > 0, 2, dtype=torch.float64).float()
        sv, si = torch.sort(x, dim=3, descending=True)
        tv, ti = torch.topk(x, 2, dim=1)
        t = c.reshape_as(torch.zeros(b, 3, 42)).view_as(x.flatten(2))
        shape = torch._shape_as_tensor(x)
        w = self.wn_conv(x) * shape[1].float() + self.wn_fc(x).sum()
        u1 = F.interpolate(w, size=(11, 5), mode="bilinear", align_corners=False)
        u2 = F.interpolate(w, size=(4, 9), mode="bilinear", align_corners=True)
        u3 = F.interpolate(x, scale_factor=1.7, mode="bilinear", align_corners=True)
        u4 = F.interpolate(x, scale_factor=0.6, mode="bilinear", align_corners=False)
        u5 = F.interpolate(x, scale_factor=1.7, mode="nearest")
        u6 = F.interpolate(x, size=(5, 11), mode="nearest")
        u7 = F.interpolate(x, scale_factor=2, mode="nearest")
        s = self.conv2d_same(x.transpose(0, 2)).transpose(0, 2)  # pads from B
        h0 = torch.tanh(x[:, 2, :4, :5]).permute(1, 0, 2).contiguous()  # [4, B, 5]
        lo, (hn, cn) = self.lstm(x[:, 0], (h0, h0 * 0.5))    # batch first
        go, gh = self.gru(x[:, 1])                          # [seq B, batch 6, 7]
        return (g, g1, t, sv + si.float(), tv * ti.float(), idx.float(), u1, u2, u3, u4,
                u5 + u7[:, :, :10, :11], u6, s, lo, hn + cn, go, gh)


class Ops3(nn.Module):
    """ATen calls of real traced models (issue 21's trial of timm, transformers and
    torchvision): softmax, log_softmax and sum with a dtype (transformers' attention),
    multiply/subtract/divide, F.unfold (im2col: ConvBERT), addcmul and addcdiv (ResMLP's
    Affine), diff with prepend and append (Whisper), instance_norm (with and without
    affine; running statistics in eval), linspace and grid_sample (RAFT: bilinear zeros
    align_corners, nearest border, bicubic reflection), torch.sqrt of an int tensor,
    chunk of a dim the graph computes (cat of two batches), cat with an empty 1-D tensor
    (transformers' cache), a reshape to B * n windows whose size(0) and a -1 feed a split
    (TinyViT), and an expand to a size read from the batch (ConvBERT's token types)."""

    def __init__(self):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(3, affine=True)
        self.inorm2 = nn.InstanceNorm2d(3)
        self.inorm3 = nn.InstanceNorm2d(3, track_running_stats=True)
        with torch.no_grad():
            self.inorm.weight.uniform_(0.5, 1.5)
            self.inorm.bias.uniform_(-0.5, 0.5)
            self.inorm3.running_mean.uniform_(-0.5, 0.5)
            self.inorm3.running_var.uniform_(0.5, 1.5)
        self.grid = nn.Conv2d(3, 2, 3, padding=1)
        self.register_buffer("tt", torch.arange(7).view(1, 7) % 3)
        self.emb = nn.Embedding(3, 6)

    def forward(self, x):                                   # [B, 3, 6, 7]
        b, ch = x.shape[0], x.shape[1]
        p1 = torch.softmax(x, dim=-1, dtype=torch.float32)
        p2 = torch.log_softmax(x, dim=2, dtype=torch.float64).float()
        s1 = torch.sum(x, dim=1, dtype=torch.float64).float()
        m = torch.divide(torch.subtract(torch.multiply(x, 1.5), x), 0.75)
        u1 = F.unfold(x, (3, 2), dilation=(1, 2), padding=(1, 0), stride=(2, 1))
        u2 = F.unfold(x[:, :2], 2)
        u3 = F.unfold(x[0], (2, 3), stride=2)              # unbatched [C, H, W]
        ac = torch.addcmul(x, p1, m, value=0.5) + torch.addcdiv(x, m, p1 + 1)
        d = torch.diff(x, n=2, dim=-1, prepend=x[..., :1], append=x[..., -2:])
        d2 = torch.diff(x, dim=1)
        n1 = self.inorm(x) + self.inorm2(x * 2) + self.inorm3(x)
        ls = torch.linspace(-3, 3, 7) + torch.linspace(0, 1, 5, dtype=torch.float64).sum().float()
        gr = torch.tanh(self.grid(x)).permute(0, 2, 3, 1) * 1.2   # some outside [-1, 1]
        g1 = F.grid_sample(x, gr, mode="bilinear", padding_mode="zeros", align_corners=True)
        g2 = F.grid_sample(x, gr, mode="nearest", padding_mode="border", align_corners=False)
        g3 = F.grid_sample(x, gr, mode="bicubic", padding_mode="reflection", align_corners=False)
        sq = x / torch.sqrt(torch.tensor(ch))
        f1, f2 = torch.cat([x, x * 2]).chunk(2)
        kv = torch.cat([torch.tensor([]), x], dim=-2)
        nh = x.shape[2] // 3
        w = x.view(b, 3, nh, 3, 7).transpose(1, 2).reshape(b * nh, 3 * 3, 7)
        n = w.shape[0]
        q, k, v = w.view(n, 9, 1, -1).split([2, 2, 3], 3)
        win = (q * k).sum(-1) + v.mean(-1)
        t = self.tt[:, :7].expand(b, 7)
        e = (self.emb(t) + x.mean(1).transpose(1, 2)).reshape(b, -1, 6)
        e1, e2 = e.split([3, 4], 1)
        return (p1, p2, s1, m, u1, u2, u3, ac, d, d2, n1, ls, g1, g2, g3, sq, f1 + f2, kv, win,
                e1.sum(1) + e2.sum(1))


class LstmProj(nn.Module):
    """nn.LSTM with proj_size (h = (o * tanh(c)) W_hr^T; ONNX's LSTM has none: kiln
    unrolls it): 2 layers, bidirectional, batch first, with biases; a second one
    forward, without biases, given h0 and c0."""

    def __init__(self):
        super().__init__()
        self.a = nn.LSTM(6, 8, num_layers=2, proj_size=3, bidirectional=True, batch_first=True)
        self.b = nn.LSTM(6, 5, proj_size=2, bias=False)

    def forward(self, x):                                   # [B 2, T 5, 6]
        y, (hn, cn) = self.a(x)
        h0 = torch.tanh(x[:1, :2, :2])                      # [1, B, 2]
        z, (hb, cb) = self.b(x.transpose(0, 1), (h0, torch.ones(1, 2, 5) * 0.5))
        return y, hn, cn, z, hb, cb


class LstmProjSeqFirst(nn.Module):
    """An LSTM with proj_size over a sequence-first input: its length is the trace's
    dim 0, which kiln takes as the batch (unknown while building): refused (unit test)."""

    def __init__(self):
        super().__init__()
        self.a = nn.LSTM(4, 6, proj_size=2)

    def forward(self, x):                                   # [T 5, B 2, 4]
        return self.a(x)[0]


class Bicubic(nn.Module):
    """upsample_bicubic2d: to sizes and by scale factors, up and down, align_corners
    both ways (torch's cubic: coefficient -0.75, coordinates not clamped, the taps past
    an edge reading the edge)."""

    def forward(self, x):                                   # [B, 3, 6, 7]
        a = F.interpolate(x, size=(11, 5), mode="bicubic", align_corners=False)
        b = F.interpolate(x, size=(4, 9), mode="bicubic", align_corners=True)
        c = F.interpolate(x, scale_factor=1.7, mode="bicubic", align_corners=False)
        d = F.interpolate(x, scale_factor=0.6, mode="bicubic", align_corners=True)
        return a, b, c, d


class SdpaMasked(nn.Module):
    """scaled_dot_product_attention with a boolean mask in which some queries see no
    key (torch gives those rows 0, not NaN) and a float mask of -inf rows, and an
    unmasked causal one."""

    def forward(self, x):                                   # [B, 2, 5, 8]
        q, k, v = x, x.flip(2) * 0.5, torch.tanh(x)
        keep = torch.ones(x.shape[0], 1, 5, 5, dtype=torch.bool)
        keep[:, :, 1] = False                               # query 1 sees no key
        keep[:, :, 3, :2] = False
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        fmask = torch.zeros(5, 5)
        fmask[4] = float("-inf")                            # query 4 sees no key
        b = F.scaled_dot_product_attention(q, k, v, attn_mask=fmask, scale=0.3)
        c = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return a, b, c


class StdConv(nn.Module):
    """timm's NFNet stem: ScaledStdConv2d standardizes its weights with
    F.batch_norm(training=True) and no running statistics, in eval mode too; and a
    BatchNorm2d with track_running_stats=False, which always uses the batch's."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 3, 3, 3) * 0.5 + 0.2)
        self.gain = nn.Parameter(torch.rand(6, 1, 1, 1) + 0.5)
        self.bn = nn.BatchNorm2d(6, track_running_stats=False)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        w = F.batch_norm(self.w.reshape(1, 6, -1), None, None, weight=(self.gain * 0.3).view(-1),
                         training=True, momentum=0.0, eps=1e-6).reshape_as(self.w)
        return self.bn(F.relu(F.conv2d(x, w, padding=1)))


def transformer():
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


MODELS = [
    ("mlp", MLP, lambda: torch.randn(4, 8), {}),
    ("cnn", CNN, lambda: torch.randn(2, 3, 16, 16), {}),
    ("mobile", Mobile, lambda: torch.randn(2, 3, 16, 16), {}),
    ("transformer", transformer, lambda: torch.randn(2, 5, 16), {"check_trace": False}),
    ("tiny_gpt", TinyGPT, lambda: torch.randint(0, 32, (2, 6)), {}),
    ("strided", Strided, lambda: torch.randn(3, 8), {}),
    ("ops", Ops, lambda: torch.randn(2, 4, 6, 6), {}),
    ("ops2", Ops2, lambda: torch.randn(2, 3, 6, 7), {}),
    ("ops3", Ops3, lambda: torch.randn(2, 3, 6, 7), {}),
    ("bicubic", Bicubic, lambda: torch.randn(2, 3, 6, 7), {}),
    ("lstm_proj", LstmProj, lambda: torch.randn(2, 5, 6), {}),
    ("lstm_proj_seq_first", LstmProjSeqFirst, lambda: torch.randn(5, 2, 4), {}),
    ("sdpa_masked", SdpaMasked, lambda: torch.randn(2, 2, 5, 8), {}),
    ("views", Views, lambda: torch.randn(2, 4, 6), {}),
    ("views_after_writes", ViewsAfterWrites, lambda: torch.randn(2, 5, 6), {}),
    ("shared", Shared, lambda: torch.randn(3, 8), {}),
    ("shared_deflated", SharedDeflated, lambda: torch.randn(1 << 15), {}),
    ("stdconv", StdConv, lambda: torch.randn(2, 3, 7, 9), {}),
]
NO_ONNX = {"ops", "ops2", "ops3", "bicubic", "lstm_proj", "lstm_proj_seq_first", "sdpa_masked", "views", "views_after_writes", "shared", "shared_deflated",
           "stdconv"}


def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tensor_proto(arr, name):
    """onnx.TensorProto (dims, data_type, name, raw_data) written by hand, for the torch
    1.13 run, where Debian has no onnx package."""
    types = {np.dtype(np.float32): 1, np.dtype(np.int64): 7}
    arr = np.ascontiguousarray(arr)
    out = bytearray()
    for d in arr.shape:
        out += b"\x08" + varint(d)
    out += b"\x10" + varint(types[arr.dtype])
    raw, nm = arr.astype(arr.dtype.newbyteorder("<")).tobytes(), name.encode()
    out += b"\x42" + varint(len(nm)) + nm + b"\x4a" + varint(len(raw)) + raw
    return bytes(out)


def write_pb(arr, name, path):
    with open(path, "wb") as f:
        if TORCH1:
            f.write(tensor_proto(arr, name))
        else:
            f.write(numpy_helper.from_array(arr, name=name).SerializeToString())


def write_case(folder, in_names, inputs, outputs):
    case = os.path.join(folder, "test_data_set_0")
    os.makedirs(case, exist_ok=True)
    for k, (name, x) in enumerate(zip(in_names, inputs)):
        write_pb(x, name, os.path.join(case, f"input_{k}.pb"))
    for k, y in enumerate(outputs):
        write_pb(y, f"output_{k}", os.path.join(case, f"output_{k}.pb"))


def export_onnx(model, x, in_name, path):
    """Exports with dim 0 dynamic ("batch"), as kiln declares the .pt's inputs."""
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=OPSET,
                      input_names=[in_name], output_names=["output_0"],
                      dynamic_axes={in_name: {0: "batch"}, "output_0": {0: "batch"}})
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    m.producer_version = ""
    onnx.save(m, path)
    return m


def check_ort(m, in_name, x, want, name):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {in_name: x})[0]
    err = float(np.max(np.abs(got - want)))
    if got.shape != want.shape or err > TOL:
        sys.exit(f"{name}: onnxruntime differs from PyTorch by {err}")


def emit(name, make, example, trace_kw):
    torch.manual_seed(len(name))
    model = make().eval()
    x = example()
    with torch.no_grad():
        out = model(x)
    outs = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
    traced = torch.jit.trace(model, (x,), **trace_kw)
    folder = os.path.join(HERE, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    traced.save(os.path.join(folder, "model.pt"))
    if name == "shared_deflated":
        deflated_zip(os.path.join(folder, "model.pt"))
    with torch.no_grad():  # the saved trace must compute what eager does
        again = traced(x)
    again = again if isinstance(again, tuple) else (again,)
    err = max(float(np.max(np.abs(a.numpy() - w))) for a, w in zip(again, outs))
    if err > TOL:
        sys.exit(f"{name}: the trace differs from eager PyTorch by {err}")
    in_name = traced.forward.schema.arguments[1].name
    write_case(folder, [in_name], [x.numpy()], outs)
    size = os.path.getsize(os.path.join(folder, "model.pt"))
    print(f"{name}: {size} bytes, outputs {[list(o.shape) for o in outs]}")
    if name in NO_ONNX or TORCH1:
        return
    want = outs[0]
    onnx_folder = folder + "_onnx"
    shutil.rmtree(onnx_folder, ignore_errors=True)
    os.makedirs(onnx_folder)
    m = export_onnx(model, x, in_name, os.path.join(onnx_folder, "model.onnx"))
    check_ort(m, in_name, x.numpy(), want, name)
    write_case(onnx_folder, [in_name], [x.numpy()], [want])


def main():
    os.makedirs(HERE, exist_ok=True)
    torch.set_grad_enabled(True)  # TransformerEncoder's fast path only runs without grad
    only = sys.argv[1:]  # model names: make only those
    for name, make, example, trace_kw in MODELS:
        if not only or name in only:
            emit(name, make, example, trace_kw)
    with open(os.path.join(HERE, "VERSIONS.txt"), "w") as f:
        if TORCH1:
            f.write(f"torch {torch.__version__} (Debian python3-torch {deb_version()})\n"
                    f"numpy {np.__version__}\n")
        else:
            f.write(f"torch {torch.__version__}\nonnx {onnx.__version__}\nopset {OPSET}\n")


def deb_version():
    import subprocess
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", "python3-torch"],
                          capture_output=True, text=True, check=True).stdout


if __name__ == "__main__":
    main()
