#!/usr/bin/env bash
# kiln's CPU checks and benchmarks on one machine, at every ISA level it has: what
# docs/benchmarks.md's per-machine tables come from. Runs from a built tree (here, or a
# build carried to another machine with its libraries, ../shared/GPU.md section 3).
#
#   tools/cpu_matrix.sh BUILD OUT [THREADS]     THREADS: comma-separated (default 1,2)
#
# BUILD is a meson build folder (BUILD/tools/kiln, BUILD/tests/test_*); OUT gets the logs:
#   info.log      lscpu, `kiln info`, the levels
#   kernels.log   test_dnnl, test_gemv, test_pool_nhwc, test_wino at every level (tests/run_levels.sh);
#                 test_isa once (it runs every level itself)
#   cap.log       KILN_ISA=avx2 caps oneDNN too: the oneDNN implementations ResNet-50 ran
#   fast.log      `kiln check --fast-only -O2` of the models below at every level: no node
#                 on a reference implementation (oneDNN's or kiln's)
#   bench.md      tools/bench_vs_ort.py at THREADS, kiln at the CPU's own level (section
#                 "machine"), and again at KILN_ISA=avx512 when the CPU has a higher level
#                 (section "avx512"); KILN_BENCH_ROUNDS rounds (default 3), none when 0;
#                 KILN_BENCH_SECTIONS names the sections to run (default "machine avx512")
# Models: the issue's set (tools/export_zoo.py exports them into OUT/zoo unless
# KILN_ZOO names a cache; BERT-base s128 comes from bench_vs_ort.py). Python: the one in
# .venv when there is one, else python3 (torch, torchvision, transformers, onnx and
# onnxruntime must import).
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD OUT [THREADS]" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd) || exit 2
out=$2
threads=${3:-1,2}
mkdir -p "$out"
out=$(cd "$out" && pwd)
kiln=$build/tools/kiln
py=$root/.venv/bin/python
[ -x "$py" ] || py=python3
zoo=${KILN_ZOO:-$out/zoo}
models="resnet50 mobilenet_v2 efficientnet_b0 squeezenet1_1 mnasnet0_5 shufflenet_v2_x0_5 regnet_y_400mf"
cd "$root"

{
  lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-400
  "$kiln" info | head -5
  echo "levels: $("$kiln" info --levels | tr '\n' ' ')"
  "$py" -c 'import onnxruntime; print("onnxruntime", onnxruntime.__version__)'
} >"$out/info.log" 2>&1
levels=$("$kiln" info --levels | tr '\n' ' ')
top=$(echo $levels | awk '{print $NF}')

{
  for t in dnnl gemv pool_nhwc wino; do tests/run_levels.sh "$kiln" "$build/tests/test_$t"; done
  "$build/tests/test_isa"
} >"$out/kernels.log" 2>&1
echo "kernels: $(grep -c 'passed at every level' "$out/kernels.log") of 4 at every level, test_isa exit $(tail -1 "$out/kernels.log" | grep -c PASSED)"

# KILN_ISA=avx2 must cap oneDNN as well: every implementation an avx2 one (or kiln's)
"$py" tools/export_zoo.py --only $(echo $models | tr ' ' ',') --out "$zoo" >"$out/export.log" 2>&1
KILN_ISA=avx2 ONEDNN_VERBOSE=1 "$kiln" bench "$zoo/resnet50/model.onnx" --iterations 1 --warmup 0 \
  2>&1 | grep -E '^isa|onednn_verbose,exec' | cut -d, -f1-5 | sort | uniq -c >"$out/cap.log"

for level in $levels; do
  [ "$level" = generic ] && continue # no oneDNN there: kiln's portable kernels
  for m in $models; do
    r=$(KILN_ISA=$level "$kiln" check --fast-only -O2 --rtol 1e-4 --atol 1e-4 "$zoo/$m" 2>&1 | tail -3 | tr '\n' ' ')
    echo "$level $m: $r"
  done
done >"$out/fast.log" 2>&1
echo "fast paths: $(grep -c '1 passed, 0 failed' "$out/fast.log") of $(wc -l <"$out/fast.log") checks pass"

bench() { # SECTION [KILN_ISA]
  KILN_ISA=${2:-} "$py" tools/bench_vs_ort.py --kiln "$kiln" --zoo "$zoo" --no-torch \
    --models "$(echo $models | tr ' ' ','),bert_base_s128:10" --threads "$threads" --rounds "$rounds" \
    --iterations 20 --doc "$out/bench.md" --section "$1" --chart "$out/bench.svg"
}
rounds=${KILN_BENCH_ROUNDS:-3}
[ "$rounds" -gt 0 ] || exit 0
[ -f "$out/bench.md" ] || echo "# kiln against onnxruntime" >"$out/bench.md"
for section in ${KILN_BENCH_SECTIONS:-machine avx512}; do
  case $section in
  machine) bench machine 2>&1 | tee -a "$out/bench.log" ;;
  avx512) case " $levels " in
    *" avx512 "*) [ "$top" != avx512 ] && bench avx512 avx512 2>&1 | tee -a "$out/bench.log" ;;
    esac ;;
  esac
done
exit 0
