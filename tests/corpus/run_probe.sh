#!/usr/bin/env bash
# Run the cases of make_probe.py: tests/corpus/run_probe.sh KILN DIR [CAP_KB]
# Prints one line per case: name, class, expectation, exit code, seconds, verdict, stderr.
# With CAP_KB, each run is under `ulimit -v CAP_KB` (for a build without ASan).
set -u
kiln=$(realpath "$1"); dir=$2; cap=${3:-}
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}"
cd "$dir" || exit 2
filter=${FILTER:-.}
while IFS=$'\t' read -r name cls expect args; do
  [[ $name =~ $filter ]] || continue
  rm -rf "$name.out"
  start=$(date +%s.%N)
  if [ -n "$cap" ]; then
    eval "timeout -k 2 10 bash -c 'ulimit -v $cap; exec \"\$0\" \"\$@\"' \"$kiln\" $args" >/dev/null 2>"$name.err"
  else
    eval "timeout -k 2 10 \"$kiln\" $args" >/dev/null 2>"$name.err"
  fi
  rc=$?
  t=$(echo "$(date +%s.%N) - $start" | bc)
  lines=$(wc -l <"$name.err")
  v=ok
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then v=TIMEOUT
  elif grep -aqE 'Sanitizer|runtime error:' "$name.err"; then v=SANITIZER
  elif [ $rc -ge 128 ]; then v=SIGNAL$((rc - 128))
  elif [ $rc -gt 2 ]; then v=RC$rc
  elif grep -aq 'internal error\|kiln bug\|KILN_ERR_INTERNAL' "$name.err"; then v=INTERNAL
  else case $expect in
    err) [ $rc -eq 1 ] || [ $rc -eq 2 ] || v=SILENT_OK ;;
    usage) [ $rc -eq 2 ] || [ $rc -eq 1 ] || v=ACCEPTED ;;
    ok) [ $rc -eq 0 ] || v=REFUSED ;;
    cmp:*) [ $rc -eq 0 ] || v=REFUSED ;;
  esac; fi
  printf '%s\t%s\t%s\trc=%s\t%.1fs\t%s\t%s\n' "$name" "$cls" "$expect" "$rc" "$t" "$v" \
    "$(grep -av '^ *$' "$name.err" | grep -a -m3 -E 'runtime error|ERROR: AddressSanitizer|.' | head -c 400 | tr '\n\t' '| ')"
done <probe.tsv
