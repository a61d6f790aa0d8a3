#!/usr/bin/env bash
# Compiles kiln's joined OpenCL C kernels to PTX for NVIDIA's OpenCL, ahead of time
# (meson.build runs it; ../shared/GPU.md section 2 has the recipe):
#   build_ptx.sh CLANG LLVM_LINK OPT LLC LIBCLC_BC SM PTX_VERSION IN.cl OUT.ptx
# clang emits LLVM bitcode for nvptx64 OpenCL, llvm-link adds libclc's work-item
# builtins, opt inlines them (without it the PTX keeps calls to get_global_id), and llc
# writes PTX for sm_SM with PTX ISA PTX_VERSION. The kernels see KL_SM=SM (tc.cl's
# tensor-core kernels exist from sm_80 on).
set -euo pipefail
clang=$1 link=$2 opt=$3 llc=$4 libclc=$5 sm=$6 ptx=$7 in=$8 out=$9
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$clang" -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -finclude-default-header \
  -DKL_SM="$sm" -O3 -emit-llvm -c "$in" -o "$tmp/k.bc"
"$link" "$tmp/k.bc" "$libclc" -o "$tmp/linked.bc" 2>"$tmp/link.err" || { cat "$tmp/link.err" >&2; exit 1; }
"$opt" -O3 "$tmp/linked.bc" -o "$tmp/opt.bc"
"$llc" -O3 -mcpu="sm_$sm" -mattr="+ptx$ptx" "$tmp/opt.bc" -o "$tmp/k.ptx"
# clang does not turn reqd_work_group_size into PTX's .maxntid: without it the driver
# knows nothing of the work-group size it will run at. The tensor-core kernels (kl_tc_*,
# 256 work-items; kl_tc_mm*, 128) get .maxntid 256 (128) (measured on the H100: as fast as none, and
# .minnctapersm 2, which caps them at 128 registers, took 25% longer).
awk '/^\.entry kl_tc_mm/ { tc = 128 }
     /^\.entry kl_tc_/ && !/^\.entry kl_tc_mm/ { tc = 256 }
     { print }
     tc && /^\)/ { print ".maxntid " tc ", 1, 1"; tc = 0 }' \
  "$tmp/k.ptx" >"$out"
