#!/usr/bin/env bash
# Run a libFuzzer target the way the test suite does (docs/fuzzing.md).
#
#   tests/fuzz/run_fuzz.sh smoke  FUZZER NAME   fuzz for $KILN_FUZZ_SECONDS (default 25) s,
#                                               starting from seeds/NAME and regression/NAME
#   tests/fuzz/run_fuzz.sh replay FUZZER NAME   run every file of regression/NAME once
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
# libFuzzer reports leaks and UBSan findings as crashes; ASan's own defaults suffice.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
common=(-timeout=20 -rss_limit_mb=2048 -print_final_stats=1)
[ -f "$here/$name.dict" ] && common+=("-dict=$here/$name.dict")

if [ "$mode" = replay ]; then
  files=()
  [ -d "$regression" ] && while IFS= read -r -d '' f; do files+=("$f"); done \
    < <(find "$regression" -type f -print0 | sort -z)
  if [ ${#files[@]} -eq 0 ]; then
    echo "$name: no regression files in $regression"
    exit 0
  fi
  echo "$name: replaying ${#files[@]} regression files"
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
"$fuzzer" "${common[@]}" -max_total_time="${KILN_FUZZ_SECONDS:-25}" \
  -artifact_prefix="$artifacts/" "$work/corpus" "${dirs[@]}"
rc=$?
[ $rc -ne 0 ] && echo "$name: the fuzzer failed (exit $rc); the input is in $artifacts/"
exit $rc
