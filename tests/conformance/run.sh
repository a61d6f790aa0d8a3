#!/usr/bin/env bash
# ONNX backend node-test conformance: run `kiln check` on every node test folder that
# the pinned onnx wheel ships (onnx/backend/test/data/node/test_*), and compare the
# outcome with tests/conformance/expected_failures.txt.
#
#   tests/conformance/run.sh KILN_BINARY            check against the list
#   tests/conformance/run.sh KILN_BINARY --update   rewrite the list from this run
#
# Each test runs at -O0; those that pass run again at -O2 and at -O3 with --verify, because the
# optimizer must not change a result. Tolerances are the ONNX runner's (rtol 1e-3, atol
# 1e-7; the node folders carry no data.json that would change them), given explicitly:
# kiln check's default atol is 1e-5. The suite fails when a test that is not listed fails, when a
# listed test passes (so the list stays true) and when a listed test does not exist.
# It ends with 'N passed, N failed', failed counting those three kinds.
#
# The data is found through the venv's python (tools/setup.sh --python makes .venv in
# the source root); KILN_VENV names another venv, KILN_ONNX_NODE_TESTS a data folder.
# KILN_CONFORMANCE_JOBS sets the parallelism (default: the number of cores).
# KILN_CONFORMANCE_DEVICE=D runs every check with --device D (the GPU backend: nodes
# with a GPU kernel run on the device) against the same list: a device must pass what
# the CPU passes.
set -uo pipefail

usage() {
  echo "usage: $0 KILN_BINARY [--update]" >&2
  exit 2
}
if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
update=0
if [ $# -eq 2 ]; then
  [ "$2" = "--update" ] || usage
  update=1
fi
kiln=$(realpath "$1" 2>/dev/null) || kiln=$1
if [ ! -f "$kiln" ] || [ ! -x "$kiln" ]; then
  echo "$0: $1 is not an executable" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
expect="$here/expected_failures.txt"
jobs=${KILN_CONFORMANCE_JOBS:-$(nproc 2>/dev/null || echo 2)}
batch_size=25
batch_timeout=${KILN_CONFORMANCE_BATCH_TIMEOUT:-300} # s, for one `kiln check` over a batch of folders
case_timeout=${KILN_CONFORMANCE_CASE_TIMEOUT:-60}   # s, for one folder re-run alone after its batch died

# Setup problems are one failure with a clear line, not a silent skip: CI must run this.
die() {
  echo "conformance: $*"
  echo "0 passed, 1 failed"
  exit 1
}

# The node-test folder of the onnx wheel pinned in tools/requirements-test.txt.
find_data() {
  if [ -n "${KILN_ONNX_NODE_TESTS:-}" ]; then
    data=$KILN_ONNX_NODE_TESTS
    return
  fi
  local venv=${KILN_VENV:-$root/.venv} want got
  [ -x "$venv/bin/python" ] || die "no python in $venv; run tools/setup.sh --python"
  want=$(sed -n 's/^onnx==//p' "$root/tools/requirements-test.txt")
  got=$("$venv/bin/python" -c 'import onnx, os; print(onnx.__version__, os.path.dirname(onnx.__file__))' 2>&1) ||
    die "cannot import onnx in $venv ($got); run tools/setup.sh --python"
  [ "${got%% *}" = "$want" ] ||
    die "$venv has onnx ${got%% *}, expected $want (the list is for that release's tests); run tools/setup.sh --python"
  data="${got#* }/backend/test/data/node"
}

find_data
[ -d "$data" ] || die "no node-test folder $data"
work=$(mktemp -d) || die "cannot make a temporary folder"
trap 'rm -rf "$work"' EXIT
cd "$data" || die "cannot enter $data"
start=$SECONDS

# run_level LEVEL LIST OUT [flags...]: `kiln check` over the folders named in LIST,
# batched over $jobs processes; writes 'name<TAB>pass|fail<TAB>why' lines to OUT.
# A folder whose batch crashed or hung before reporting it runs again alone, so one
# crash costs one result, not a batch.
run_level() {
  local level=$1 list=$2 out=$3
  shift 3
  local dir="$work/$level"
  mkdir -p "$dir"
  [ -s "$list" ] || { : >"$out"; return; }
  # The batch shell always exits 0: xargs stops starting batches once one dies by a signal.
  # shellcheck disable=SC2016 # $1... expand in the batch shell, not here
  xargs -d '\n' -n "$batch_size" -P "$jobs" bash -c '
    f=$(mktemp "$5/batch.XXXXXX")
    timeout -k 10 "$1" "$2" check "$3" --threads 1 --rtol 1e-3 --atol 1e-7 "${@:6:$4}" "${@:$(($4 + 6))}" \
      >"$f" 2>"$f.err"
    exit 0' _ "$batch_timeout" "$kiln" "$level" "$#" "$dir" "$@" <"$list" 2>/dev/null
  cat "$dir"/batch.?????? >"$dir/all.out" 2>/dev/null
  cat "$dir"/batch.*.err >"$dir/all.err" 2>/dev/null
  parse_lines "$dir/all.out" "$dir/all.err" >"$out"
  local name rc why
  cut -f1 "$out" | sort >"$dir/seen"
  sort "$list" | comm -23 - "$dir/seen" | while read -r name; do
    # In a subshell, so that bash's "Segmentation fault" notice goes to /dev/null.
    rc=$( (timeout -k 5 "$case_timeout" "$kiln" check "$level" --threads 1 --rtol 1e-3 \
      --atol 1e-7 "$@" "$name" \
      >"$dir/one.out" 2>"$dir/one.err"
      echo $?) 2>/dev/null)
    if parse_lines "$dir/one.out" "$dir/one.err" | grep -q .; then
      parse_lines "$dir/one.out" "$dir/one.err"
      continue
    fi
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      why="timed out after $case_timeout s"
    elif [ "$rc" -ge 128 ]; then
      why="crashed with signal $((rc - 128))"
    else
      why="exited $rc without a result line"
    fi
    [ -s "$dir/one.err" ] && why="$why; stderr: $(tail -3 "$dir/one.err" | tr '\t\n' '  ' | cut -c1-300)"
    printf '%s\tfail\t%s\n' "$name" "$why"
  done >>"$out"
}

# parse_lines OUT ERR: kiln check's result lines ('pass NAME (...)' and 'FAIL NAME', its
# stdout in OUT) and the failures' reasons ('kiln check: NAME: why', its stderr in ERR)
# to 'name<TAB>pass|fail<TAB>why'.
parse_lines() {
  awk -v OFS='\t' -v errs="$2" '
    BEGIN {
      while ((getline line < errs) > 0)
        if (sub(/^kiln check: /, "", line) && (i = index(line, ": ")) > 0)
          why[substr(line, 1, i - 1)] = substr(line, i + 2)
    }
    /^pass [^ ]+ \(/ { print $2, "pass", "" }
    /^FAIL [^ ]+$/ { print $2, "fail", why[$2] }' "$1"
}

for d in test_*/; do [ -d "$d" ] && echo "${d%/}"; done >"$work/all"
[ -s "$work/all" ] || die "no test_* folders in $data"

device=()
[ -n "${KILN_CONFORMANCE_DEVICE:-}" ] && device=(--device "$KILN_CONFORMANCE_DEVICE")
run_level -O0 "$work/all" "$work/o0" "${device[@]}"
awk -F'\t' '$2 == "pass" { print $1 }' "$work/o0" >"$work/o0_pass"
run_level -O2 "$work/o0_pass" "$work/o2" --verify "${device[@]}"
run_level -O3 "$work/o0_pass" "$work/o3" --verify "${device[@]}"

# One line per test: name, pass|fail, category, text.
awk -F'\t' -v OFS='\t' '
  function clean(m) {
    # Drop what repeats the test: the data set and the model path.
    sub(/^test_data_set_[0-9]+: /, "", m)
    gsub(/[^ ]*\/model\.onnx: /, "", m)
    sub(/^unsupported: /, "", m)
    gsub(/\t/, " ", m)
    return m
  }
  function category(m) {
    if (m ~ /crashed with signal|timed out after|without a result line|Sanitizer/) return "crash"
    if (m ~ /domain .ai\.onnx\.preview\.training./) return "training-op"
    if (m ~ /domain .[^ ]+. is not supported/) return "other-domain"
    if (m ~ /op not supported/) return "op-not-implemented"
    if (m ~ /opset [0-9]+ is (newer|older) than/) return "opset-not-supported"
    if (m ~ /[Tt]raining/) return "training-op"
    if (m ~ /is an? (sequence|optional|map)|non-tensor/) return "non-tensor-type"
    if (m ~ /dtype|element type|[a-z0-9]+ takes |is not a supported type/) return "dtype-not-supported"
    if (m ~ /out of tolerance/) return "numeric-difference"
    return "bug"
  }
  function text(m, c) {
    # "node #0 (op X, domain Y, opset N): op not supported" -> "X (opset N)".
    if (c == "op-not-implemented" && match(m, /op .[^ ]+., domain .[^ ]*., opset [0-9]+/)) {
      s = substr(m, RSTART, RLENGTH)
      split(s, p, /[ ,]+/)
      gsub(/'\''/, "", p[2])
      return p[2] " (opset " p[6] ") not implemented"
    }
    return substr(m, 1, 240)
  }
  FILENAME ~ /o2$/ { if ($2 == "fail") o2[$1] = $3; next }
  FILENAME ~ /o3$/ { if ($2 == "fail") o3[$1] = $3; next }
  { r[$1] = $2; why[$1] = $3; order[++n] = $1 }
  END {
    for (i = 1; i <= n; i++) {
      t = order[i]
      if (r[t] == "pass" && !(t in o2) && !(t in o3)) { print t, "pass", "", ""; continue }
      if (r[t] == "pass" && (t in o2)) { print t, "fail", "optimizer", "passes at -O0, fails at -O2: " text(clean(o2[t]), "") ; continue }
      if (r[t] == "pass") { print t, "fail", "optimizer", "passes at -O0, fails at -O3: " text(clean(o3[t]), "") ; continue }
      m = clean(why[t]); c = category(m)
      print t, "fail", c, text(m, c)
    }
  }' "$work/o2" "$work/o3" "$work/o0" | sort >"$work/results"

# The list: name<TAB>category<TAB>text, '#' comments and blank lines ignored.
list_entries() {
  [ -f "$expect" ] && grep -v '^[[:space:]]*\(#\|$\)' "$expect"
}

if [ $update -eq 1 ]; then
  # A listed test that still fails in the same category keeps its line as written.
  {
    cat <<'EOF'
# ONNX backend node tests (onnx 1.22.0) that kiln does not pass, one per line:
#   test_name<TAB>category<TAB>text
# Categories: op-not-implemented, dtype-not-supported, non-tensor-type, training-op,
# other-domain, opset-not-supported, numeric-difference, optimizer (passes at -O0,
# not at -O2 or -O3), crash, bug. Regenerate with:
#   tests/conformance/run.sh build/tools/kiln --update
# A line whose test still fails in the same category is kept as written, so text
# edited by hand survives; see tests/conformance/README.md.
EOF
    list_entries >"$work/old"
    awk -F'\t' -v OFS='\t' '
      FILENAME ~ /old$/ { old[$1] = $0; oldc[$1] = $2; next }
      $2 == "fail" { print (($1 in old) && oldc[$1] == $3) ? old[$1] : $1 OFS $3 OFS $4 }
    ' "$work/old" "$work/results"
  } >"$work/new_expect"
  cp "$work/new_expect" "$expect" || die "cannot write $expect"
  echo "conformance: rewrote $expect"
fi

list_entries >"$work/listed"
awk -F'\t' -v OFS='\t' -v elapsed=$((SECONDS - start)) '
  FILENAME ~ /listed$/ { listed[$1] = $2; next }
  {
    seen[$1] = 1
    if ($2 == "pass") {
      passed++
      if ($1 in listed) unexp_pass[++nup] = $1
      next
    }
    if ($3 == "op-not-implemented") { split($4, w, " "); ops[w[1]]++ }
    if (!($1 in listed)) { unexp_fail[++nuf] = $1 ": " $3 ": " $4; next }
    expected++; bycat[listed[$1]]++
    if (listed[$1] != $3) drift[++nd] = $1 ": listed " listed[$1] ", now " $3
  }
  END {
    for (t in listed) if (!(t in seen)) stale[++ns] = t
    total = passed + expected + nuf
    printf "conformance: %d node tests, %d passed at -O0, -O2 and -O3, %d s\n", total, passed, elapsed
    printf "expected failures: %d\n", expected
    ncat = 0
    for (c in bycat) cats[++ncat] = sprintf("%6d  %s", bycat[c], c)
    sort_desc(cats, ncat)
    for (i = 1; i <= ncat; i++) print cats[i]
    nop = 0
    for (o in ops) opl[++nop] = sprintf("%s %d", o, ops[o])
    if (nop) {
      sort_by_count(opl, nop)
      line = "first missing op (tests it blocks):"
      for (i = 1; i <= nop && i <= 25; i++) line = line (i > 1 ? ", " : " ") opl[i]
      if (nop > 25) line = line ", ... (" nop " ops in all)"
      print line
    }
    report("unexpected failures (not in the list)", unexp_fail, nuf)
    report("unexpectedly passing (listed; remove them or run --update)", unexp_pass, nup)
    report("listed but not a test of this onnx release", stale, ns)
    if (nd) printf "note: %d listed tests now fail in another category (run --update)\n", nd
    for (i = 1; i <= nd && i <= 10; i++) print "  " drift[i]
    printf "%d passed, %d failed\n", passed, nuf + nup + ns
    exit (nuf + nup + ns > 0)
  }
  function report(title, a, n,   i) {
    if (!n) return
    printf "%s: %d\n", title, n
    for (i = 1; i <= n; i++) print "  " a[i]
  }
  function sort_desc(a, n,   i, j, x) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j] > a[j - 1]; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
  }
  function sort_by_count(a, n,   i, j, x, cj, cp) {
    for (i = 2; i <= n; i++)
      for (j = i; j > 1; j--) {
        cj = a[j]; sub(/.* /, "", cj); cp = a[j - 1]; sub(/.* /, "", cp)
        if (cj + 0 <= cp + 0) break
        x = a[j]; a[j] = a[j - 1]; a[j - 1] = x
      }
  }' "$work/listed" "$work/results"
