#!/usr/bin/env bash
# Installs what is missing, builds kiln with gcc (a release build, as users build for
# speed: -O3), clang and ASan+UBSan, and runs every test. Ends with one line
# 'N passed, N failed'; exits non-zero if anything failed.
#   tools/test.sh            everything
#   KILN_TEST_QUICK=1 tools/test.sh   the gcc build only (for a quick local loop)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# --python: the venv with the onnx wheel whose node tests the conformance suite runs.
tools/setup.sh --python || { echo "0 passed, 1 failed"; exit 1; }

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
  elif [ $# -gt 0 ]; then # a folder from an earlier run: the options as they are now
    meson configure "$dir" "$@" >"$dir.setup.log" 2>&1 ||
      { cat "$dir.setup.log"; failed=$((failed + 1)); failed_names+=("$dir: meson configure"); return; }
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

# `meson install` plus the example built the ways a user would, each run on the held-out
# digits: with pkg-config and -lkiln (the shared library); statically (libkiln.a alone,
# the shared library taken away, its dependencies from `pkg-config --static`); and
# against the build tree, uninstalled (meson-uninstalled).
install_check() {
  local dest pcdir ok=true
  local digits=(models/digits_mlp/model.onnx models/digits_data/heldout_images.npy
                models/digits_data/heldout_labels.npy)
  dest=$(mktemp -d)
  echo "== install; the example linked shared, static and against the build tree"
  # link NAME ARGS...: build the example as $dest/NAME with ARGS, run it
  link() {
    local name=$1
    shift
    cc -Wall -Werror -o "$dest/$name" tools/classify_digits.c "$@" >>"$dest.log" 2>&1 &&
      LD_LIBRARY_PATH=$(dirname "$(find "$dest" -name 'libkiln.so' | head -1)") \
        "$dest/$name" "${digits[@]}" >>"$dest.log" 2>&1 ||
      { echo "FAIL: the example, $name" >>"$dest.log"; return 1; }
  }
  if meson install -C build --destdir "$dest" >"$dest.log" 2>&1 &&
    pcdir=$(dirname "$(find "$dest" -name kiln.pc | head -1)"); then
    local pc=(env PKG_CONFIG_SYSROOT_DIR="$dest" PKG_CONFIG_PATH="$pcdir" pkg-config)
    link shared $("${pc[@]}" --cflags --libs kiln) || ok=false
    find "$dest" -name 'libkiln.so*' -delete
    link static $("${pc[@]}" --static --cflags --libs kiln) || ok=false
    ldd "$dest/static" 2>/dev/null | grep -q libkiln && { echo "FAIL: static links libkiln.so" >>"$dest.log"; ok=false; }
    link tree $(PKG_CONFIG_PATH=build/meson-uninstalled pkg-config --cflags --libs kiln) \
      -Wl,-rpath,"$PWD/build" || ok=false
  else
    ok=false
  fi
  if $ok; then
    passed=$((passed + 1))
  else
    cat "$dest.log"
    failed=$((failed + 1))
    failed_names+=("install + the example linked shared, static, build tree")
  fi
  rm -rf "$dest" "$dest.log"
}

MESON_TEST_ARGS=()
build_and_test build gcc -Dbuildtype=release
install_check
if [ -z "${KILN_TEST_QUICK:-}" ]; then
  # The ONNX conformance suite and the model zoo (when its cache exists) run in the gcc
  # build only, to keep CI within its time limit: they are slow under the sanitizers.
  # valgrind memcheck runs in the gcc build only (it cannot run sanitized binaries).
  MESON_TEST_ARGS=(--no-suite conformance --no-suite zoo --no-suite valgrind --no-suite written)
  # These builds link the tests and the CLI against libkiln.so with its internal symbols
  # exported (-Dinternal_shared=true): one copy of kiln per build, not one per test
  # program (CI's disk once ran out on the ThreadSanitizer build).
  # debug_verify: the verifier after every pass, and oneDNN's shared workspace filled
  # with NaNs before every node (src/backends/cpu/dnnl_engine.h).
  build_and_test build-clang clang -Ddebug_verify=true -Dinternal_shared=true
  # Sanitizers: every unit and model test again under ASan+UBSan (leaks included).
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  build_and_test build-asan gcc -Db_sanitize=address,undefined -Db_lundef=false -Dinternal_shared=true
  # libFuzzer targets (docs/fuzzing.md): a short run of each, and the regression corpus.
  MESON_TEST_ARGS=(--suite fuzz)
  build_and_test build-fuzz clang -Dfuzz=true -Dtests=false -Db_sanitize=address,undefined \
    -Db_lundef=false
  # ThreadSanitizer: the shared-model threads test, and the model tests. Without oneDNN,
  # OpenMP and OpenCL (PoCL's worker threads), whose uninstrumented runtimes TSan would
  # misreport: this checks kiln's own sharing of models and sessions.
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  MESON_TEST_ARGS=(--suite threads --suite models)
  build_and_test build-tsan clang -Db_sanitize=thread -Db_lundef=false -Ddnnl=disabled \
    -Dopenmp=disabled -Dgpu=disabled -Dinternal_shared=true
fi

echo
if [ ${#failed_names[@]} -gt 0 ]; then
  echo "failures:"
  printf '  %s\n' "${failed_names[@]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
