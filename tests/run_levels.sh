#!/usr/bin/env bash
# Runs a command once at every ISA level this CPU has (`kiln info --levels`: generic,
# avx2, avx512, ...), with KILN_ISA set to it, so that an AVX-512 machine also runs what
# an AVX2 user gets (KILN_ISA caps oneDNN's ISA as well as kiln's own kernels). Fails
# when the command fails at any level; exit code 77 (a skip) counts as a pass.
#   tests/run_levels.sh KILN_BINARY COMMAND [ARGS...]
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 KILN_BINARY COMMAND [ARGS...]" >&2
  exit 2
fi
kiln=$1
shift
levels=$("$kiln" info --levels) || { echo "$0: $kiln info --levels failed" >&2; exit 1; }
failed=()
for level in $levels; do
  echo "== KILN_ISA=$level $*"
  KILN_ISA=$level "$@"
  rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || failed+=("$level (exit $rc)")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed at: ${failed[*]}"
  exit 1
fi
echo "passed at every level: $(echo $levels | tr '\n' ' ')"
