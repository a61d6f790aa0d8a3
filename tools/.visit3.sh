mkdir -p /tmp/ocl /tmp/icd && for f in .gpu/*.deb; do dpkg -x "$f" /tmp/ocl; done
echo /usr/lib/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH=$PWD/.gpu:/tmp/ocl/usr/lib/x86_64-linux-gnu KILN_CACHE_DIR=/tmp/kc
/usr/local/cuda-13.0/bin/ptxas -arch=sm_90 -v .gpu/kiln_sm80.ptx -o /tmp/k.cubin 2>&1 | grep -A2 -E "entry function '(kl_tc_matmul128|kl_norm_rows|kl_attn_flash64)'" | grep -v '^--'
python3 - <<'PY'
import onnx
from onnx import TensorProto, helper
n=8192
vi=[helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in "aby"]
g=helper.make_graph([helper.make_node("MatMul", ["a","b"], ["y"])], "mm", vi[:2], vi[2:])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "/tmp/mm.onnx")
PY
timeout 200 /usr/local/cuda/bin/ncu --launch-count 1 -k regex:kl_tc --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats .gpu/kiln bench /tmp/mm.onnx --device opencl --precision tf32 --iterations 1 --warmup 0 2>&1 | tail -80
python3 - <<'PY' 2>/dev/null
import torch
from transformers import BertConfig, BertModel
cfg = BertConfig(attn_implementation="eager")
class Hidden(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.bert = BertModel(cfg)
    def forward(self, ids, mask):
        return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
m = Hidden().eval()
ids = torch.randint(0, cfg.vocab_size, (32, 128)); mask = torch.ones(32, 128, dtype=torch.long)
torch.onnx.export(m, (ids, mask), "/tmp/bert.onnx", input_names=["input_ids", "attention_mask"], output_names=["h"], opset_version=17, dynamo=False)
PY
.gpu/kiln bench /tmp/bert.onnx --device opencl --precision tf32 --iterations 10 --profile 2>&1 | sed -n '/^latency/p;/profile:/,/slowest/p'
