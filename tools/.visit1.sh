set -x
mkdir -p /tmp/ocl /tmp/icd && for f in .gpu/*.deb; do dpkg -x "$f" /tmp/ocl; done
echo /usr/lib/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH=$PWD/.gpu:/tmp/ocl/usr/lib/x86_64-linux-gnu KILN_CACHE_DIR=/tmp/kc
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 .gpu/test_gpu 2>&1 | grep -E 'OK|FAIL|ERROR|PASSED' | head -30
timeout 400 python3 tools/bench_gpu.py --kiln .gpu/kiln --out /tmp/gb --iterations 20 2>&1 | tail -40
timeout 120 .gpu/kiln bench /tmp/gb/bert_base_b32/model.onnx --device opencl --precision tf32 --iterations 10 --profile 2>&1 | head -40
