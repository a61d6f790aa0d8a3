#!/usr/bin/env bash
# Installs what is missing, builds kiln, and classifies the held-out 8x8 digits with the
# bundled models, through the C API example and the kiln CLI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

tools/setup.sh
[ -f build/build.ninja ] || meson setup build -Dbuildtype=release >/dev/null
ninja -C build >/dev/null

data=models/digits_data
for model in digits_cnn digits_mlp; do
  echo "== $model (PyTorch's held-out accuracy: $(awk -v m=$model '$1==m {print $2}' $data/pytorch_accuracy.txt))"
  build/tools/classify_digits models/$model/model.onnx $data/heldout_images.npy $data/heldout_labels.npy
done

echo "== kiln run on a batch of 16 held-out digits"
build/tools/kiln run models/digits_cnn/model.onnx --input input=models/digits_cnn/test_data_set_0/input_0.pb
echo "== kiln check on every bundled model"
build/tools/kiln check models/digits_cnn models/digits_cnn_fused models/digits_mlp
