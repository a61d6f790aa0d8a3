#!/usr/bin/env bash
# kiln quantize end to end: usage errors and bad calibration data (clear errors, exit
# codes); the bundled digits CNN and MLP quantized (static: calibrated on the 1437
# training images of models/train/cnn/train.npz; dynamic) and run by kiln on the 360
# held-out images, whose accuracy must stay within 1 image (0.28%) of the float model's
# (entropy calibration of the CNN: 2 images, 0.56%, measured); the CNN's convolutions
# on oneDNN's int8 kernels (kiln bench --fast-only, QLinearConv); --report and
# --report-csv. Where the venv ($KILN_VENV, else .venv) has onnxruntime, it loads and
# runs every written model and must agree with kiln (tests/check_quantized_ort.py).
#
#   tests/run_quantize_cli.sh KILN_BINARY        (from the source root)
set -uo pipefail
kiln=$1
classify=$(dirname "$kiln")/classify_digits
root=$(pwd)
venv=${KILN_VENV:-$root/.venv}
data=models/train/cnn/train.npz
held=models/digits_data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect CODE TEXT -- COMMAND...: exit code CODE and TEXT in its output
expect() {
  local code=$1 text=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  [ "$rc" = "$code" ] || fail "$* exited $rc, expected $code: $out"
  [ -z "$text" ] || grep -qF -- "$text" <<<"$out" || fail "$*: no '$text' in: $out"
}

cnn=models/digits_cnn/model.onnx
mlp=models/digits_mlp/model.onnx

# ---- usage and bad input ----
expect 0 "usage: kiln quantize" -- "$kiln" quantize --help
expect 0 "quantize MODEL" -- "$kiln" --help
expect 2 "no -o OUT given" -- "$kiln" quantize $cnn --calibrate $data
expect 2 "no --calibrate DATA given" -- "$kiln" quantize $cnn -o "$tmp/q.onnx"
expect 2 "--dynamic takes no --calibrate data" -- "$kiln" quantize $mlp -o "$tmp/q.onnx" --dynamic --calibrate $data
expect 2 "--method kmeans: must be minmax, percentile or entropy" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate $data --method kmeans
expect 2 "--percentile 101: must be at most 100" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate $data --method percentile --percentile 101
expect 2 "is the model itself" -- "$kiln" quantize $cnn -o $cnn --calibrate $data
expect 2 "is the model itself" -- "$kiln" quantize $cnn -o models/digits_cnn/../digits_cnn/model.onnx --calibrate $data
expect 1 "has no array named 'input' (the model's input; --array input=NAME names another); it holds 'x', 'target'" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate $data
expect 1 "has no array named 'images' (given with --array" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate $data --array input=images
# an --array naming an input the model does not have was ignored; one naming an array
# the file does not have was replaced by its only array (issue 20, round 4)
expect 1 "--array images=x: expected NAME=ARRAY with NAME a model input (the model's inputs: input)" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate $data --array images=x
expect 1 "array 'target' is int64 [1437]; the model's input 'input' is float32 [batch, 1, 8, 8]" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate $data --array input=target
expect 1 "array 'x' is float32 [360, 64]; the model's input 'input' is float32 [batch, 1, 8, 8]" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate models/train/mlp/eval.npz --array input=x
expect 1 "no such file or folder" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate "$tmp/none.npz"
echo "not a zip" >"$tmp/bad.npz"
expect 1 "not a .npz archive" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate "$tmp/bad.npz"
mkdir "$tmp/empty"
expect 1 "a folder without input_0.pb or test_data_set_0/" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate "$tmp/empty"
# --array names a .npz's arrays; with only folders of test data it was ignored, silently
expect 1 "--array input=x: --calibrate $tmp/empty is a folder of test data sets" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate "$tmp/empty" --array input=x
expect 1 "nothing to quantize" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate $data --array input=x --exclude '/features/*,/head/*'
# a pattern that names no node (a typo; an op type) quantized the node meant kept, silently
expect 1 "exclude pattern 'Gemm' names no node of the model" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate $data --array input=x --exclude '/head/head.2/Gemm,Gemm'
expect 1 "exclude pattern '/head/head.2/Gem' names no node" -- "$kiln" quantize $mlp -o "$tmp/q.onnx" --dynamic --exclude /head/head.2/Gem
expect 1 "cannot create" -- "$kiln" quantize $cnn -o "$tmp/no/such/q.onnx" --calibrate $data --array input=x
# a .npy of one image whose pixel 5 is NaN (float32 [1, 1, 8, 8])
{
  printf '\x93NUMPY\x01\x00\x76\x00'
  printf "%-117s\n" "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 8, 8), }"
  for i in $(seq 0 63); do
    if [ "$i" = 5 ]; then printf '\x00\x00\xc0\x7f'; else printf '\x00\x00\x00\x3f'; fi
  done
} >"$tmp/nan.npy"
expect 1 "element 5 is nan (calibration data must be finite)" -- "$kiln" quantize $cnn -o "$tmp/q.onnx" --calibrate "$tmp/nan.npy"
[ -e "$tmp/q.onnx" ] && fail "a failed quantize wrote $tmp/q.onnx"

# ---- accuracy on the held-out digits ----
correct() { "$classify" "$1" $held/heldout_images.npy $held/heldout_labels.npy |
  sed -n 's/^accuracy: [0-9.]* (\([0-9]*\) of 360.*/\1/p'; }

# check NAME MODEL ALLOWED-DROP QUANTIZE-OPTIONS...: quantize, run on kiln, compare
check() {
  local name=$1 model=$2 drop=$3
  shift 3
  local out="$tmp/$name.onnx" float q
  "$kiln" quantize "$model" -o "$out" --no-progress "$@" >"$tmp/$name.log" 2>&1 ||
    { fail "$name: kiln quantize failed: $(cat "$tmp/$name.log")"; return; }
  float=$(correct "$model")
  q=$(correct "$out")
  echo "$name: $q of 360 held-out images (float: $float)"
  [ -n "$q" ] && [ -n "$float" ] && [ $((float - q)) -le "$drop" ] ||
    fail "$name: $q of 360 correct, float $float (at most $drop fewer allowed)"
}
check cnn-minmax $cnn 1 --calibrate $data --array input=x
check cnn-per-tensor $cnn 1 --calibrate $data --array input=x --per-tensor
check cnn-no-bias-correction $cnn 1 --calibrate $data --array input=x --no-bias-correction
check cnn-no-gptq $cnn 1 --calibrate $data --array input=x --no-gptq
check cnn-minmax-pc $cnn 1 --calibrate $data --array input=x --per-channel
check cnn-percentile $cnn 1 --calibrate $data --array input=x --per-channel --method percentile
check cnn-entropy $cnn 2 --calibrate $data --array input=x --per-channel --method entropy
check cnn-symmetric $cnn 1 --calibrate $data --array input=x --per-channel --symmetric
check cnn-full-range $cnn 1 --calibrate $data --array input=x --per-channel --full-range
check cnn-folders $cnn 1 --calibrate models/digits_cnn --batch-size 4
check mlp-minmax $mlp 1 --calibrate $data --array input=x --max-samples 500 --batch-size 100
check mlp-entropy $mlp 1 --calibrate $data --array input=x --method entropy
check mlp-no-gptq $mlp 1 --calibrate $data --array input=x --no-gptq
check mlp-dynamic $mlp 1 --dynamic --per-channel
check mlp-dynamic-pt $mlp 1 --dynamic
grep -qF "(static, minmax on 5 batches of 500 samples" "$tmp/mlp-minmax.log" ||
  fail "mlp-minmax: $(cat "$tmp/mlp-minmax.log")"

grep -qF "3 of 3 Conv/MatMul/Gemm nodes quantized, 3 ops between them on 8-bit codes" "$tmp/cnn-minmax-pc.log" ||
  fail "cnn-minmax-pc: $(cat "$tmp/cnn-minmax-pc.log")"
# the ops between the convolutions on the codes: MaxPool (quantized as its input),
# the pooling as QLinearGlobalAveragePool, the Flatten; one QuantizeLinear (the input's)
ins=$("$kiln" inspect "$tmp/cnn-minmax-pc.onnx")
[ "$(grep -c ' QuantizeLinear ' <<<"$ins")" = 1 ] && grep -q " QLinearGlobalAveragePool '" <<<"$ins" &&
  grep -A2 " MaxPool '/features/features.3/MaxPool'" <<<"$ins" | grep -q 'out: .*uint8' ||
  fail "the quantized CNN's MaxPool and pooling are not on the codes: $ins"

# ---- the CNN runs its convolutions in int8 on oneDNN ----
expect 0 "QLinearConv" -- "$kiln" inspect "$tmp/cnn-minmax-pc.onnx"
[ "$("$kiln" inspect "$tmp/cnn-minmax-pc.onnx" | grep -c ' QLinearConv ')" = 2 ] ||
  fail "the quantized CNN's two Conv nodes are not QLinearConv at -O2"
expect 0 "slow paths       0 nodes" -- "$kiln" bench "$tmp/cnn-minmax-pc.onnx" --fast-only --iterations 3 --warmup 1
# (a build without oneDNN, as the TSan one, runs them on the reference kernel, and says so;
# the classifier runs as MatMulIntegerToFloat on kiln's own kernel there)
# The dynamic form: MatMulInteger with its Cast, scale Mul and bias Add (one
# kiln.MatMulIntegerToFloat) on oneDNN's int8 matmul (VNNI, AMX) or kiln's own int8
# product (kiln_qgemm, without VNNI), the rest on kiln's kernels.
if "$kiln" info | grep -q "oneDNN yes" && ! "$kiln" info | grep -q "^isa: generic"; then
  expect 0 "QLinearConv                " -- "$kiln" bench "$tmp/cnn-minmax-pc.onnx" --profile --iterations 3 --warmup 1
  out=$("$kiln" bench "$tmp/cnn-minmax-pc.onnx" --profile --iterations 3 --warmup 1 2>&1)
  grep -qE "QLinearConv +[0-9.]+ +[0-9.]+% +2 +dnnl_qconv " <<<"$out" ||
    fail "the CNN's QLinearConvs did not run on oneDNN: $out"
  grep -qF "reference        0.0% of a run in 0 nodes" <<<"$out" &&
    grep -qE "kiln.MatMulIntegerToFloat +[0-9.]+ +[0-9.]+% +1 +(dnnl_matmul_u8s8s32|kiln_qgemm:)" <<<"$out" ||
    fail "the CNN's classifier (float32 logits) is not MatMulIntegerToFloat on a fast kernel: $out"
  out=$("$kiln" bench "$tmp/mlp-dynamic.onnx" --profile --iterations 3 --warmup 1 2>&1)
  grep -qF "reference        0.0% of a run in 0 nodes" <<<"$out" &&
    grep -qE "kiln.MatMulIntegerToFloat +[0-9.]+ +[0-9.]+% +2 +(dnnl_matmul_u8s8s32|kiln_qgemm:)" <<<"$out" ||
    fail "the dynamic MLP is not on the fast kernels: $out"
else
  expect 0 "of a run in 2 nodes on portable reference kernels" -- "$kiln" bench "$tmp/cnn-minmax-pc.onnx" --iterations 3 --warmup 1
fi

# ---- the report ----
expect 0 "/features/features.2/Relu        Relu                 removed" -- "$kiln" quantize $cnn -o "$tmp/r.onnx" --calibrate $data --array input=x --report --report-csv "$tmp/r.csv" --exclude /head/head.2/Gemm --no-progress
# a report that cannot be written (a full disk: /dev/full) says so, not only exit 1
[ -c /dev/full ] && expect 1 "kiln quantize: cannot write /dev/full" -- "$kiln" quantize $cnn -o "$tmp/r2.onnx" --calibrate $data --array input=x --report-csv /dev/full --no-progress
mkfifo "$tmp/fifo" # no reader: refused at once (opening it waited for one forever)
expect 1 "kiln quantize: $tmp/fifo is a FIFO that no program reads" -- timeout 10 "$kiln" quantize $cnn -o "$tmp/r3.onnx" --calibrate $data --array input=x --report-csv "$tmp/fifo" --no-progress
# a calibration folder reads only what it holds: a link planted there leading out (a
# file, a data set) is refused, as kiln check refuses it (it was read as data)
mkdir -p "$tmp/cal_link" "$tmp/cal_set_link" "$tmp/elsewhere"
ln -s /etc/hostname "$tmp/cal_link/input_0.pb"
ln -s ../elsewhere "$tmp/cal_set_link/test_data_set_0"
expect 1 "cal_link/input_0.pb leads outside the calibration folder" -- "$kiln" quantize $cnn -o "$tmp/r3.onnx" --calibrate "$tmp/cal_link" --no-progress
expect 1 "test_data_set_0 leads outside the calibration folder" -- "$kiln" quantize $cnn -o "$tmp/r3.onnx" --calibrate "$tmp/cal_set_link" --no-progress
out=$("$kiln" quantize $cnn -o "$tmp/r.onnx" --calibrate $data --array input=x --report --exclude /head/head.2/Gemm --no-progress 2>&1)
grep -qE "^  /head/head.2/Gemm +Gemm +excluded \(--exclude\)" <<<"$out" || fail "--report: no excluded Gemm in: $out"
grep -qE "^  input +act uint8 +0.00392157 +0 +\[0, 1\]" <<<"$out" || fail "--report: input's scale is not 1/255: $out"
grep -qE "^  features.0.weight_folded +weight/ch .* gptq$" <<<"$out" || fail "--report: no GPTQ-rounded weight line in: $out"
grep -qF "GPTQ rounding of 2 of 2 weights)" <<<"$out" || fail "the summary does not count GPTQ's weights: $out"
grep -qE "^  logits +relative L2 0\.0[0-9]+, SQNR [0-9.]+ dB, top-1 the same on 14[0-9][0-9] of 1437 samples" <<<"$out" ||
  fail "--report: no output comparison in: $out"
head -1 "$tmp/r.csv" | grep -qxF "value,kind,scale_min,scale_max,zero_point,lo,hi,min,max,sqnr_db,rel_l2,rounding,rounding_note" ||
  fail "--report-csv: bad header: $(head -1 "$tmp/r.csv")"
[ "$(wc -l <"$tmp/r.csv")" = 9 ] || fail "--report-csv: $(wc -l <"$tmp/r.csv") lines, expected 9"

# ---- onnxruntime ----
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import onnxruntime" 2>/dev/null; then
  for f in "$tmp"/cnn-*.onnx "$tmp"/mlp-*.onnx; do
    "$kiln" run "$f" --input input=$held/heldout_images.npy --output-dir "$tmp/out-$(basename "$f" .onnx)" >/dev/null ||
      { fail "kiln run $f"; continue; }
  done
  "$venv/bin/python" tests/check_quantized_ort.py "$tmp" $held || fail "onnxruntime disagrees"
else
  echo "note: no onnxruntime in $venv: the written models were not run on it"
fi

[ $fails = 0 ] && echo "quantize-cli: all passed" || echo "quantize-cli: $fails failed"
[ $fails = 0 ]
