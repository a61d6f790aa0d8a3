#!/usr/bin/env bash
# Run a libFuzzer target the way the test suite does (docs/fuzzing.md).
#
#   tests/fuzz/run_fuzz.sh smoke  FUZZER NAME   fuzz for $KILN_FUZZ_SECONDS (default 20) s,
#                                               starting from seeds/NAME and regression/NAME
#   tests/fuzz/run_fuzz.sh replay FUZZER NAME   run every file of regression/NAME once, and
#                                               the bad-input corpus files of its formats
#
# The working corpus of a smoke run is a temporary folder, so the repository's corpora
# stay as they are. A crash leaves its input in the folder printed at the end; minimize
# it (docs/fuzzing.md) and add it to regression/NAME with the fix.
set -u

if [ $# -ne 3 ] || { [ "$1" != smoke ] && [ "$1" != replay ]; }; then
  echo "usage: $0 smoke|replay FUZZER NAME" >&2
  exit 2
fi
mode=$1
fuzzer=$(realpath "$2") || exit 2
name=$3
here=$(cd "$(dirname "$0")" && pwd)
seeds="$here/seeds/$name"
regression="$here/regression/$name"
bad_corpus=$(cd "$here/../corpus/bad" 2>/dev/null && pwd)
case "$name" in
  fuzz_onnx) bad_types=(-name '*.onnx' -o -name '*.pt') ;;
  fuzz_tensorfile) bad_types=(-name '*.npy' -o -name '*.pb') ;;
  fuzz_torchscript) bad_types=(-name '*.pt') ;;
  *) bad_types=(-false) ;;
esac
# libFuzzer reports leaks and UBSan findings as crashes; ASan's own defaults suffice.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
# A finding exits 1: libFuzzer's own code for one is 77, which meson takes for a skip
# (a crash found in a smoke run once showed as SKIP).
common=(-timeout=20 -rss_limit_mb=2048 -print_final_stats=1 -error_exitcode=1
        -timeout_exitcode=1)
[ -f "$here/$name.dict" ] && common+=("-dict=$here/$name.dict")

if [ "$mode" = replay ]; then
  files=()
  while IFS= read -r -d '' f; do files+=("$f"); done \
    < <(find "$regression" -type f -print0 2>/dev/null | sort -z)
  n_regression=${#files[@]}
  # The hand-made hostile inputs too: the targets check more than `kiln run` does.
  while IFS= read -r -d '' f; do files+=("$f"); done \
    < <(find "$bad_corpus" -type f \( "${bad_types[@]}" \) -print0 2>/dev/null | sort -z)
  if [ ${#files[@]} -eq 0 ]; then
    echo "$name: no files to replay in $regression or $bad_corpus" >&2
    exit 1
  fi
  echo "$name: replaying $n_regression regression files and $((${#files[@]} - n_regression))" \
    "bad-corpus files"
  # Files (not folders) as arguments: libFuzzer runs each once and does not fuzz.
  exec "$fuzzer" "${common[@]}" "${files[@]}"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
artifacts="$(dirname "$fuzzer")/$name-artifacts"
mkdir -p "$work/corpus" "$artifacts"
dirs=()
[ -d "$seeds" ] && dirs+=("$seeds")
[ -d "$regression" ] && dirs+=("$regression")
"$fuzzer" "${common[@]}" -max_total_time="${KILN_FUZZ_SECONDS:-20}" \
  -artifact_prefix="$artifacts/" "$work/corpus" "${dirs[@]}"
rc=$?
[ $rc -ne 0 ] && echo "$name: the fuzzer failed (exit $rc); the input is in $artifacts/"
[ $rc -eq 0 ] || exit 1
