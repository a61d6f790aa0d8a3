#!/usr/bin/env python3
"""ResNet-50's 3x3 and 1x1 convolutions as one-node models (Conv + Relu,
constant weights), timed on the GPU: alternates kiln builds (`kiln bench --device opencl
--precision tf32 --profile`: the convolution's kernel time by OpenCL events) and prints
each build's median and TFLOP/s as a Markdown table (docs/gpu.md).

    python3 tools/bench_gpu_convs.py OUT_DIR KILN[,KILN...]   (env ROUNDS=3, BATCH=32)

Needs numpy and onnx (the device machine has both)."""
import json, os, subprocess, sys, statistics
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out, builds = sys.argv[1], sys.argv[2].split(",")
rounds = int(os.environ.get("ROUNDS", "3"))
B = int(os.environ.get("BATCH", "32"))
shapes = [  # cin, cout, h(in), kernel, stride
    (64, 64, 56, 3, 1), (128, 128, 28, 3, 1), (256, 256, 14, 3, 1), (512, 512, 7, 3, 1),
    (128, 128, 56, 3, 2), (256, 256, 28, 3, 2), (512, 512, 14, 3, 2),
    (256, 512, 56, 1, 2), (512, 1024, 28, 1, 2), (1024, 2048, 14, 1, 2),
    (64, 256, 56, 1, 1), (256, 64, 56, 1, 1), (128, 512, 28, 1, 1), (512, 128, 28, 1, 1),
    (256, 1024, 14, 1, 1), (1024, 256, 14, 1, 1), (512, 2048, 7, 1, 1), (2048, 512, 7, 1, 1)]
rng = np.random.default_rng(0)
paths = []
for cin, cout, h, k, s in shapes:
    pad = k // 2
    ho = (h + 2 * pad - k) // s + 1
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, cin, h, h])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, cout, ho, ho])
    w = numpy_helper.from_array((rng.standard_normal((cout, cin, k, k)) * 0.05).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[s, s]),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "conv", [x], [y], [w, b])
    p = os.path.join(out, f"conv_{cin}_{cout}_{h}_k{k}_s{s}.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    paths.append((p, 2.0 * B * cout * cin * k * k * ho * ho))
res = {}
for r in range(rounds):
    for p, fl in paths:
        for bld in builds:
            cmd = [bld, "bench", p, "--device", "opencl", "--precision", "tf32", "--iterations", "10",
                   "--warmup", "3", "--json", "--profile"]
            q = subprocess.run(cmd, capture_output=True, text=True)
            if q.returncode:
                print("FAIL", p, bld, q.stderr[-300:], flush=True)
                continue
            j = json.loads(q.stdout)
            ops = j["profile"]["ops"]
            ms = sum(o["ms"] for o in ops if "Conv" in o["op"])
            res.setdefault((p, bld), []).append(ms)
            if r == 0 and bld == builds[-1]:
                print(os.path.basename(p), [(o["op"], o.get("kernels", "")) for o in ops][:3], flush=True)
print("| convolution (batch %d) | " % B + " | ".join(os.path.basename(b) for b in builds) + " |")
print("|---|" + "---:|" * len(builds))
for p, fl in paths:
    cells = []
    for bld in builds:
        v = res.get((p, bld), [])
        if not v:
            cells.append("failed")
            continue
        med = statistics.median(v)
        cells.append(f"{med:.3f} ms ({fl / med / 1e9:.1f} TFLOP/s)")
    print(f"| {os.path.basename(p)} | " + " | ".join(cells) + " |")
