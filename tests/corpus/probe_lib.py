"""What make_probe_r2.py and make_probe_r4.py share: a case list written into a scratch
folder and its probe.tsv (tests/corpus/run_probe.sh runs it)."""
import os
import struct

from onnx import helper

from make_probe import gen


def model(nodes, inputs, outputs, inits=(), opset=21, domains=(), ir=10):
    g = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = ir
    return m


def npy_header_only(path, shape, descr="<f4"):
    """An .npy of any shape with no data: an empty-but-huge tensor in ~128 bytes."""
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join(f"{d}, " for d in shape))
    hdr += " " * (63 - (len(hdr) + 10) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())


class Probe:
    """The cases of one probe: files in out, rows (name, class, expected, command)."""

    def __init__(self, out):
        import numpy as np
        self.np = np
        self.out = out
        os.makedirs(out, exist_ok=True)
        self.rows = []

    def case(self, name, cls, m, expect="err", args="", inputs=None, cmd="run"):
        path = os.path.join(self.out, name + ".onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString() if hasattr(m, "SerializeToString") else m)
        extra = ""
        for k, v in (inputs or {}).items():
            p = f"{name}.{k}.npy"
            if isinstance(v, tuple) and v and v[0] == "hdr":
                npy_header_only(os.path.join(self.out, p), v[1], v[2] if len(v) > 2 else "<f4")
            else:
                self.np.save(os.path.join(self.out, p), v)
            extra += f" --input {k}={p}"
        self.rows.append((name, cls, expect, f"{cmd} {name}.onnx{extra} {args}".strip()))

    def gen_case(self, name, cls, shape, nodes_after, outputs, extra_inits=(), expect="err",
                 args="", opset=21, value=1.0, dtype=None, domains=()):
        inits, nodes = gen(shape, "x", value, dtype if dtype is not None else self.np.float32)
        m = model(nodes + nodes_after, [], outputs, inits + list(extra_inits), opset, domains)
        self.case(name, cls, m, expect, args)

    def one(self, name, cls, node, ins, outs, inits=(), expect="err", args="", inputs=None,
            opset=21, domains=()):
        self.case(name, cls, model([node], ins, outs, inits, opset, domains), expect, args,
                  inputs)


def fill_attr(a, **fields):
    """Sets an AttributeProto's fields: lists extended, a tensor or graph copied, the rest
    assigned (so a case can write any field, of any type, whatever the name says)."""
    for k, val in fields.items():
        if k in ("ints", "floats", "strings", "tensors", "graphs"):
            getattr(a, k).extend(val)
        elif k in ("t", "g"):
            getattr(a, k).CopyFrom(val)
        else:
            setattr(a, k, val)
    return a


def lin_module():
    """A traced-model seed for the TorchScript cases: y = x + w, w a [2, 3] parameter of
    ones (torch imported here: only the rounds that make .pt files need it)."""
    import torch

    class Lin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2, 3))

        def forward(self, x):
            return x + self.w

    return Lin()
