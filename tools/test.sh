#!/usr/bin/env bash
# Installs what is missing, builds kiln with gcc, clang and ASan+UBSan, and runs every
# test. Ends with one line 'N passed, N failed'; exits non-zero if anything failed.
#   tools/test.sh            everything
#   KILN_TEST_QUICK=1 tools/test.sh   the gcc build only (for a quick local loop)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

tools/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
failed_names=()

# Count the results meson wrote for one build folder.
tally() {
  local log="$1/meson-logs/testlog.json" p f
  [ -f "$log" ] || { failed=$((failed + 1)); failed_names+=("$1: no test log"); return; }
  p=$(grep -c '"result": "OK"' "$log" || true)
  f=$(grep -vc '"result": "\(OK\|SKIP\)"' "$log" || true)
  passed=$((passed + p))
  failed=$((failed + f))
  [ "$f" -gt 0 ] && failed_names+=("$1: $(grep -v '"result": "\(OK\|SKIP\)"' "$log" |
    sed -n 's/.*"name": "\([^"]*\)".*/\1/p' | tr '\n' ' ')")
}

# build DIR CC [meson options...]: configure (once), build, test.
build_and_test() {
  local dir=$1 cc=$2
  shift 2
  echo "== $dir ($cc $*)"
  if [ ! -f "$dir/build.ninja" ]; then
    CC=$cc meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 ||
      { cat "$dir.setup.log"; failed=$((failed + 1)); failed_names+=("$dir: meson setup"); return; }
  fi
  if ! ninja -C "$dir" >"$dir.build.log" 2>&1; then
    tail -50 "$dir.build.log"
    failed=$((failed + 1))
    failed_names+=("$dir: build")
    return
  fi
  meson test -C "$dir" --print-errorlogs --num-processes 2 "${MESON_TEST_ARGS[@]}"
  tally "$dir"
}

MESON_TEST_ARGS=()
build_and_test build gcc
if [ -z "${KILN_TEST_QUICK:-}" ]; then
  build_and_test build-clang clang
  # Sanitizers: every unit and model test again under ASan+UBSan (leaks included).
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  build_and_test build-asan gcc -Db_sanitize=address,undefined -Db_lundef=false
fi

echo
if [ ${#failed_names[@]} -gt 0 ]; then
  echo "failures:"
  printf '  %s\n' "${failed_names[@]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
