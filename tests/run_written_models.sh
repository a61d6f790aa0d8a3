#!/usr/bin/env bash
# tests/run_written_models.py with the venv's python (onnx, onnxruntime, numpy; made by
# tools/setup.sh --python; KILN_VENV names another venv).
#
#   tests/run_written_models.sh KILN_BINARY        (from the source root)
set -u
[ $# -eq 1 ] || { echo "usage: $0 KILN_BINARY" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${KILN_VENV:-$root/.venv}
[ -x "$venv/bin/python" ] || { echo "$0: no python in $venv; run tools/setup.sh --python" >&2; exit 2; }
exec "$venv/bin/python" "$root/tests/run_written_models.py" "$1"
