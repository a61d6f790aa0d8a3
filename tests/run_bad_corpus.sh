#!/usr/bin/env bash
# Run `kiln run` on every case of tests/corpus/bad/MANIFEST.tsv and check that kiln
# refuses it cleanly: the expected exit code (not a crash, a timeout or a sanitizer
# report), and exactly one line on stderr that contains the manifest's substring.
#
#   tests/run_bad_corpus.sh KILN_BINARY
#
# Each case runs with a 10 s timeout and, where the binary can start under it, a 2 GB
# cap on virtual memory (AddressSanitizer reserves terabytes of address space, so an
# ASan build runs without the cap). Prints a line per failure and "N passed, N failed";
# exits 1 if any case failed.
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 KILN_BINARY" >&2
  exit 2
fi
kiln=$(realpath "$1") || exit 2
corpus=$(cd "$(dirname "$0")/corpus/bad" && pwd) || exit 2
manifest="$corpus/MANIFEST.tsv"
[ -x "$kiln" ] || { echo "$0: $1 is not an executable" >&2; exit 2; }
[ -f "$manifest" ] || { echo "$0: no $manifest" >&2; exit 2; }

limit_kb=2097152
vm_cap="ulimit -v $limit_kb;"
if ! { (ulimit -v $limit_kb; "$kiln" --version) >/dev/null 2>&1; } 2>/dev/null; then
  echo "note: $kiln does not start under ulimit -v (a sanitizer build?); running uncapped"
  vm_cap=""
fi

# Sanitizers report through stderr; make them end the process with a code we notice.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}"

err=$(mktemp)
trap 'rm -f "$err"' EXIT
cd "$corpus" || exit 2
passed=0
failed=0
while IFS=$'\t' read -r file inputs want_rc want_msg what; do
  case "$file" in '#'* | '') continue ;; esac
  args=(run "$file")
  if [ "$inputs" != "-" ]; then
    IFS=';' read -r -a pairs <<<"$inputs"
    for p in "${pairs[@]}"; do args+=(--input "$p"); done
  fi
  timeout -k 5 10 bash -c "$vm_cap"' exec "$0" "$@"' "$kiln" "${args[@]}" >/dev/null 2>"$err"
  rc=$?
  lines=$(wc -l <"$err")
  why=""
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    why="timed out (10 s)"
  elif [ $rc -ge 128 ]; then
    why="crashed with signal $((rc - 128))"
  elif grep -qE 'Sanitizer|runtime error:' "$err"; then
    why="sanitizer report"
  elif [ "$rc" != "$want_rc" ]; then
    why="exit code $rc, expected $want_rc"
  elif [ "$lines" -ne 1 ]; then
    why="$lines lines on stderr, expected 1"
  elif ! grep -qF -- "$want_msg" "$err"; then
    why="stderr lacks \"$want_msg\""
  fi
  if [ -z "$why" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    label=$file
    [ "$inputs" = "-" ] || label="$file --input ${inputs//;/ --input }"
    echo "FAIL $label ($what): $why"
    sed -n '1,20s/^/    /p' "$err"
  fi
done <"$manifest"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
