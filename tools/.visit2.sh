mkdir -p /tmp/ocl /tmp/icd && for f in .gpu/*.deb; do dpkg -x "$f" /tmp/ocl; done
echo /usr/lib/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH=$PWD/.gpu:/tmp/ocl/usr/lib/x86_64-linux-gnu KILN_CACHE_DIR=/tmp/kc
P=$(find / -name ptxas -type f 2>/dev/null | head -3); echo "ptxas: $P"
for p in $P; do $p --version | tail -1; done
PX=$(echo $P | cut -d' ' -f1)
[ -n "$PX" ] && $PX -arch=sm_90 -v .gpu/kiln_sm80.ptx -o /tmp/k.cubin 2>&1 | grep -A1 -E "kl_tc_|kl_attn_flash|kl_norm_group" | head -40
which ncu nsys cuobjdump nvdisasm 2>&1 | head
python3 tools/bench_gpu.py --kiln .gpu/kiln --out /tmp/gb --iterations 20 --gemm 8192 2>&1 | grep -E '^\||GPU|matrix' | head -20
.gpu/kiln bench /tmp/gb/bert_base_b32/model.onnx --device opencl --precision tf32 --iterations 10 --profile 2>&1 | sed -n '/profile:/,/slowest/p'
