#!/usr/bin/env bash
# libkiln.so exports the public API and nothing else: its defined dynamic symbols are
# exactly the functions include/kiln.h declares KILN_API, but the names gcc gives
# OpenMP's named critical sections (.gomp_critical_user_NAME: common symbols, exported
# by every library that has one).
# Usage: run_exports.sh LIBKILN_SO KILN_H
set -uo pipefail
lib=$1 header=$2
api=$(sed -n 's/^KILN_API.*[^a-z0-9_]\(kiln_[a-z0-9_]*\)(.*/\1/p' "$header" | sort -u)
[ -n "$api" ] || { echo "FAIL: no KILN_API functions found in $header"; exit 1; }
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^\.gomp_critical_user_' | sort -u) ||
  { echo "FAIL: nm -D $lib"; exit 1; }
missing=$(comm -23 <(printf '%s\n' "$api") <(printf '%s\n' "$syms"))
extra=$(comm -13 <(printf '%s\n' "$api") <(printf '%s\n' "$syms"))
[ -z "$missing" ] || { echo "FAIL: declared KILN_API in $header, not exported by $lib:"; echo "$missing"; }
[ -z "$extra" ] || { echo "FAIL: exported by $lib, not declared KILN_API in $header:"; echo "$extra" | head -20; }
[ -z "$missing$extra" ] || exit 1
echo "ok: $(printf '%s\n' "$api" | wc -l) API functions exported, nothing else"
