#!/usr/bin/env bash
# Installs kiln's build and test dependencies from Debian, only what is missing.
# Idempotent; needs root or sudo. Usage: tools/setup.sh [--python] [--torch113]
#   --python    also create .venv with the PyPI packages the test/export scripts use
#   --torch113  also install Debian's python3-torch (1.13) and python3-numpy, for
#               regenerating the torch 1.13 fixtures (tests/models/make_ts_fixtures.py)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

pkgs=(
  build-essential meson ninja-build pkg-config clang llvm lld libclang-rt-14-dev
  protobuf-c-compiler libprotobuf-c-dev libonnx-dev
  libcmocka-dev libdnnl-dev libomp-dev libzip-dev
  python3 python3-venv python3-pip valgrind
  ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd clinfo libclc-14 llvm-spirv-14 spirv-tools
  libze-dev
)

want_python=0
for arg in "$@"; do
  case "$arg" in
    --python) want_python=1 ;;
    --torch113) pkgs+=(python3-torch python3-numpy) ;;
    *) echo "setup.sh: unknown option $arg (known: --python --torch113)" >&2; exit 2 ;;
  esac
done

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install packages" >&2; exit 1; }
  sudo_cmd=(sudo)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$want_python" -eq 1 ]; then
  venv="$here/.venv"
  # A venv made while python3-venv was missing has no pip; make it again.
  if [ ! -x "$venv/bin/python" ] || [ ! -x "$venv/bin/pip" ]; then python3 -m venv --clear "$venv"; fi
  # The pinned onnx release, not any: the conformance list is for its node tests.
  onnx_pin=$(sed -n 's/^onnx==//p' "$here/tools/requirements-test.txt")
  "$venv/bin/python" -c "import onnx, numpy, onnxruntime, skimage, sys; sys.exit(onnx.__version__ != '$onnx_pin')" \
    2>/dev/null || "$venv/bin/pip" install -q -r "$here/tools/requirements-test.txt"
fi
