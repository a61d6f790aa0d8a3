#!/usr/bin/env bash
# A fuzzing campaign over several targets at once, on a machine with cores to spare
# (docs/fuzzing.md, "Running a long campaign"). Each target runs as W libFuzzer
# processes (-jobs=W -workers=W) sharing one corpus folder, for SECONDS each; at the
# end one line per target: executions summed over its processes, the highest coverage
# reached, and the number of findings.
#
#   tests/fuzz/run_campaign.sh BINDIR OUTDIR SECONDS TARGET:W [TARGET:W ...]
#
# BINDIR holds the fuzz binaries (copied out of build-fuzz/tests/fuzz), OUTDIR receives
# the corpora, the logs and any finding (OUTDIR/artifacts/TARGET-*); the seeds,
# regression files and dictionaries come from this checkout. Exits 1 if anything was
# found (a crash, leak, timeout or out-of-memory; inputs that were only slow, under the
# timeout, are counted apart).
set -u
if [ $# -lt 4 ]; then
  echo "usage: $0 BINDIR OUTDIR SECONDS TARGET:WORKERS..." >&2
  exit 2
fi
bindir=$(realpath "$1") || exit 2
out=$2
seconds=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/artifacts" || exit 2
out=$(realpath "$out")
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

pids=()
for spec in "$@"; do
  name=${spec%%:*}
  workers=${spec##*:}
  [ -x "$bindir/$name" ] || { echo "$bindir/$name: not an executable" >&2; exit 2; }
  mkdir -p "$out/corpus/$name" "$out/logs/$name"
  args=(-timeout=20 -rss_limit_mb=2048 -print_final_stats=1 -max_total_time="$seconds"
        -artifact_prefix="$out/artifacts/$name-" -jobs="$workers" -workers="$workers")
  [ -f "$here/$name.dict" ] && args+=(-dict="$here/$name.dict")
  dirs=("$out/corpus/$name")
  [ -d "$here/seeds/$name" ] && dirs+=("$here/seeds/$name")
  [ -d "$here/regression/$name" ] && dirs+=("$here/regression/$name")
  # -jobs writes fuzz-N.log into the working folder.
  (cd "$out/logs/$name" && "$bindir/$name" "${args[@]}" "${dirs[@]}" >driver.log 2>&1) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

found=0
for spec in "$@"; do
  name=${spec%%:*}
  workers=${spec##*:}
  execs=0
  cov=0
  for log in "$out/logs/$name"/fuzz-*.log; do
    [ -f "$log" ] || continue
    e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    execs=$((execs + ${e:-0}))
    c=$(grep -o 'cov: [0-9]*' "$log" | awk '{print $2}' | sort -n | tail -1)
    [ -n "$c" ] && [ "$c" -gt "$cov" ] && cov=$c
  done
  # crash-, leak-, timeout-, oom- files are findings; slow-unit- files (inputs slower
  # than -report_slow_units, 10 s by default, yet within -timeout) are listed apart
  n=$(find "$out/artifacts" -name "$name-*" -type f ! -name "$name-slow-unit-*" | wc -l)
  slow=$(find "$out/artifacts" -name "$name-slow-unit-*" -type f | wc -l)
  found=$((found + n))
  echo "$name: $workers processes x ${seconds} s, $execs executions, cov $cov, $n findings, $slow slow units"
done
[ "$found" -eq 0 ]
