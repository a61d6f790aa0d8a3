#!/usr/bin/env bash
# The model zoo: run `kiln check` on every model that tools/export_zoo.py exported, each
# with its tolerance from the table below, and end with 'N passed, N failed'.
#
#   tests/zoo/run.sh KILN_BINARY [CACHE]      CACHE defaults to $KILN_ZOO, then
#                                             ~/.cache/kiln-zoo
#
# Without a cache it prints 'zoo cache not found, skipped' and exits 77, which meson
# counts as a skip: the zoo is exported on demand (about 25 minutes and 4.6 GB, see
# docs/zoo.md), so tools/test.sh runs it only where someone made it. A model of the
# table that is missing from an existing cache counts as a failure, so a half-made
# zoo does not pass quietly (a cache with none of them, only the detection models of
# tools/export_detection.py in detect/, checks just those). Folders NAME-dynamo (the same model from the torch.export
# exporter, tools/export_zoo.py --exporter dynamo) are checked too when present, with
# NAME's tolerance. Folders NAME-pt (a torchvision model traced with torch.jit.trace,
# model.pt, whose expected outputs are PyTorch eager's: tools/export_zoo.py writes them,
# --pt-only for models already cached) are checked too when present, with NAME's
# tolerance unless pt_tolerances below says otherwise. KILN_ZOO_TIMEOUT caps one model's
# check (default 3600 s). Each folder is checked at -O2 (kiln's default) and at -O3 (the
# layout pass too); KILN_ZOO_LEVELS names other levels ('-O2' alone halves the time).
# Every check runs with --fast-only: a convolution, matrix product or pooling node that
# would run on a reference implementation (oneDNN's or kiln's) fails its model.
# KILN_ZOO_ISA names ISA levels to run each check at (KILN_ISA, for example
# "avx2 avx512"; `kiln info --levels` lists the CPU's), by default only the CPU's own.
# KILN_ZOO_DEVICE=D checks every model with --device D (the GPU backend: the nodes it has
# kernels for run on the device, with the same tolerances, so at --precision fp32:
# KILN_ZOO_PRECISION, default fp32, names another; TF32's error is not these tolerances').
set -uo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 KILN_BINARY [CACHE]" >&2
  exit 2
fi
kiln=$(realpath "$1" 2>/dev/null) || kiln=$1
if [ ! -f "$kiln" ] || [ ! -x "$kiln" ]; then
  echo "$0: $1 is not an executable" >&2
  exit 2
fi
cache=${2:-${KILN_ZOO:-$HOME/.cache/kiln-zoo}}
if [ ! -d "$cache" ]; then
  echo "zoo cache not found, skipped ($cache; make it with tools/export_zoo.py)"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
limit=${KILN_ZOO_TIMEOUT:-3600}
read -r -a levels <<<"${KILN_ZOO_LEVELS:--O2 -O3}"
read -r -a isas <<<"${KILN_ZOO_ISA:-}"
[ ${#isas[@]} -gt 0 ] || isas=("")

# name rtol atol. The target is rtol 1e-4 with atol 1e-5 against onnxruntime. A looser
# line must say why, with numbers: the difference has to be float32 rounding, which
# the float64 outputs of the export tell from a bug (tools/export_zoo.py --report).
#
# ResNet-50, ResNeXt-50, Wide-ResNet-50 (atol 1e-4): onnxruntime itself is 3.0e-5 to
# 3.4e-5 away from the float64 result (PyTorch 3.0e-5 to 3.5e-5, kiln 2.9e-5 to 4.9e-5)
# on logits up to 2.6, so two float32 runtimes differ by up to twice that: 4e-5 to
# 5.6e-5 between kiln and onnxruntime, 4.2e-5 to 5.5e-5 between PyTorch and
# onnxruntime. Logits near zero fail rtol 1e-4 with atol 1e-5 whoever computes them.
# Inception v3 (atol 1e-3): onnxruntime is 2.4e-4 from float64, PyTorch 3.0e-4, kiln
# 4.4e-4, on logits up to 12.7 (3.5e-5 of the largest); PyTorch and onnxruntime differ
# by 3.3e-4 and kiln and onnxruntime by 4.2e-4.
# GoogLeNet (atol 3e-5): in the dynamo export onnxruntime is 1.05e-5 from float64 and
# 1.83e-5 from PyTorch on logits up to 1.4; kiln is 1.69e-5 from onnxruntime, on 2 of
# the 1000 logits (float32 summation order in the fast kernels), less than PyTorch is.
# EfficientNetV2-S (atol 3e-5): on logits up to 3.86 onnxruntime is 9.6e-6 (dynamo
# export 1.16e-5) from float64; kiln 1.18e-5 (2.15e-5) with oneDNN's SiLU and Sigmoid
# post-ops, 2.03e-5 (1.59e-5) with kiln's own (dnnl.c, act_after_of), 1.4e-5 (1.6e-5)
# with kiln's Silu as x / (1 + e^-x) (2.3 ulp at most on [-20, 20] against oneDNN's
# 2.7): float32 rounding that moves with the kernels, up to 2.4e-5 between kiln and
# onnxruntime on 3 of the 1000 logits.
tolerances='
resnet18            1e-4 1e-5
resnet50            1e-4 1e-4
resnext50_32x4d     1e-4 1e-4
wide_resnet50_2     1e-4 1e-4
mobilenet_v2        1e-4 1e-5
mobilenet_v3_small  1e-4 1e-5
mobilenet_v3_large  1e-4 1e-5
efficientnet_b0     1e-4 1e-5
efficientnet_v2_s   1e-4 3e-5
shufflenet_v2_x1_0  1e-4 1e-5
shufflenet_v2_x0_5  1e-4 1e-5
squeezenet1_0       1e-4 1e-5
squeezenet1_1       1e-4 1e-5
densenet121         1e-4 1e-5
regnet_y_400mf      1e-4 1e-5
mnasnet1_0          1e-4 1e-5
mnasnet0_5          1e-4 1e-5
googlenet           1e-4 3e-5
inception_v3        1e-4 1e-3
vgg11               1e-4 1e-5
vgg16               1e-4 1e-5
alexnet             1e-4 1e-5
convnext_tiny       1e-4 1e-5
vit_b_16            1e-4 1e-5
swin_t              1e-4 1e-5
bert_base           1e-4 1e-5
distilbert          1e-4 1e-5
roberta_base        1e-4 1e-5
gpt2                1e-4 1e-5
t5_encoder          1e-4 1e-5
'

# NAME-pt folders whose tolerance is not NAME's. Their expected outputs are PyTorch's,
# which can be further from the float64 result than onnxruntime's.
# EfficientNetV2-S (atol 3e-5): PyTorch is 1.12e-5 from float64 (onnxruntime 8.8e-6) on
# logits up to 3.86, kiln from the .pt 1.3e-5; so kiln and PyTorch differ by up to
# 2.0e-5 (1.86e-5 at -O0), on 2 of the 1000 logits.
pt_tolerances='
efficientnet_v2_s-pt 1e-4 3e-5
'

# Detection models (tools/export_detection.py, into CACHE/detect/NAME), checked when
# exported: If and Loop around their NonMaxSuppression and mask pasting. Boxes are pixel
# coordinates up to 800, masks probabilities.
# Faster R-CNN (atol 3e-3): one box coordinate (of 36, about 90 px) is 1.9e-3 to 2.3e-3
# from onnxruntime's at -O2/-O3, where PyTorch and onnxruntime themselves differ by 2e-3
# (the helper's export report: the RoI head's float32 sums).
# Mask R-CNN (atol 5e-4): 21 to 25 of its 2.56M mask values are 1.4e-4 to 1.8e-4 from
# onnxruntime's (4.6e-4 at -O0), PyTorch and onnxruntime differ by 4.8e-4: the pasted
# masks are bilinear resamplings of 28x28 logits through a sigmoid, in float32.
detect_tolerances='
ssdlite320_mobilenet_v3_large         1e-4 1e-5
fasterrcnn_mobilenet_v3_large_320_fpn 1e-4 3e-3
retinanet_resnet50_fpn                1e-4 1e-5
maskrcnn_resnet50_fpn                 1e-4 5e-4
'

# The table must name exactly the exporter's models (not its extra ones, exported only
# when named); python3 without torch can list them.
if command -v python3 >/dev/null && listed=$(python3 "$root/tools/export_zoo.py" --list 2>/dev/null); then
  want=$(awk 'NF {print $1}' <<<"$tolerances" | sort)
  have=$(awk 'NF && $NF != "(extra)" {print $1}' <<<"$listed" | sort)
  if [ "$want" != "$have" ]; then
    echo "tests/zoo/run.sh: the tolerance table and tools/export_zoo.py --list differ:"
    diff <(echo "$want") <(echo "$have") | sed -n 's/^[<>]/  &/p'
    echo "0 passed, 1 failed"
    exit 1
  fi
fi

passed=0
failed=0
failures=()

# check_one FOLDER_NAME RTOL ATOL: one `kiln check` per ISA and optimization level, one
# line each, and the tally.
check_one() {
  local name=$1 rtol=$2 atol=$3 dir=$cache/$1 isa level what t0 out rc line
  for isa in "${isas[@]}"; do
    for level in "${levels[@]}"; do
      what="$level${isa:+ KILN_ISA=$isa}${KILN_ZOO_DEVICE:+ --device $KILN_ZOO_DEVICE}"
      t0=$SECONDS
      out=$(KILN_ISA=$isa timeout "$limit" "$kiln" check --fast-only "$level" --rtol "$rtol" \
        --atol "$atol" ${KILN_ZOO_DEVICE:+--device "$KILN_ZOO_DEVICE" --precision "${KILN_ZOO_PRECISION:-fp32}"} "$dir" 2>&1)
      rc=$?
      line=$(grep -F "kiln check: $dir: " <<<"$out" | head -1) # a failure's reason
      if [ $rc -eq 0 ]; then
        echo "pass $name $what (rtol $rtol, atol $atol, $((SECONDS - t0)) s)"
        passed=$((passed + 1))
        continue
      fi
      [ $rc -eq 124 ] && line="timed out after $limit s"
      [ -n "$line" ] || line="exit $rc: $(tail -1 <<<"$out")"
      echo "FAIL $name $what (rtol $rtol, atol $atol): ${line#kiln check: $dir: }"
      failed=$((failed + 1))
      failures+=("$name $what")
    done
  done
}

# A cache holding none of the table's models (only detect/, which
# tools/export_detection.py makes there by default, or only extra models) is not a
# half-made zoo: its table models are not counted missing, and what it holds is checked.
vision=0
while read -r name _; do
  [ -n "$name" ] && [ -f "$cache/$name/model.onnx" ] && vision=1
done <<<"$tolerances"
[ $vision -eq 1 ] || echo "no model of the zoo's table in $cache: checking only what it holds"

start=$SECONDS
while read -r name rtol atol; do
  [ -n "$name" ] || continue
  [ $vision -eq 1 ] || [ -f "$cache/$name/model.onnx" ] || continue
  if [ ! -f "$cache/$name/model.onnx" ]; then
    echo "FAIL $name: not in the cache (tools/export_zoo.py --only $name --out $cache)"
    failed=$((failed + 1))
    failures+=("$name")
    continue
  fi
  check_one "$name" "$rtol" "$atol"
  # The same model from the torch.export-based exporter (--exporter dynamo), if made.
  if [ -f "$cache/$name-dynamo/model.onnx" ]; then
    check_one "$name-dynamo" "$rtol" "$atol"
  fi
  # The torchvision model traced to TorchScript (NAME-pt/model.pt), if made. Its expected
  # outputs are PyTorch's, not onnxruntime's; NAME's tolerance, or its line in
  # pt_tolerances (kiln's errors on each: docs/torchscript.md).
  if [ -f "$cache/$name-pt/model.pt" ]; then
    pt_rtol='' pt_atol=''
    read -r _ pt_rtol pt_atol < <(awk -v n="$name-pt" '$1 == n' <<<"$pt_tolerances")
    check_one "$name-pt" "${pt_rtol:-$rtol}" "${pt_atol:-$atol}"
  fi
done <<<"$tolerances"
while read -r name rtol atol; do
  [ -n "$name" ] && [ -f "$cache/detect/$name/model.onnx" ] || continue
  check_one "detect/$name" "$rtol" "$atol"
done <<<"$detect_tolerances"

echo "zoo: $((SECONDS - start)) s${failures:+, failed: ${failures[*]}}"
echo "$passed passed, $failed failed"
if [ $((passed + failed)) -eq 0 ]; then
  echo "no model in $cache, skipped"
  exit 77
fi
[ "$failed" -eq 0 ]
