#!/usr/bin/env bash
# Compiles kiln's joined OpenCL C kernels to PTX for NVIDIA's OpenCL, ahead of time
# (meson.build runs it; ../shared/GPU.md section 2 has the recipe):
#   build_ptx.sh CLANG LLVM_LINK OPT LLC LIBCLC_BC SM PTX_VERSION IN.cl OUT.ptx
# clang emits LLVM bitcode for nvptx64 OpenCL, llvm-link adds libclc's work-item
# builtins, opt inlines them (without it the PTX keeps calls to get_global_id), and llc
# writes PTX for sm_SM with PTX ISA PTX_VERSION. The kernels see KL_SM=SM (tc.cl's
# tensor-core kernels exist from sm_80 on). An arch-specific target such as 90a (Hopper's
# wgmma, which runs on sm_90 only) is beyond clang 14, which writes at most sm_86 and PTX
# 7.5: its PTX is written for sm_86 and the header then names sm_90a and PTX_VERSION
# (../shared/GPU.md section 2: such PTX loads and runs); the kernels see KL_SM=90 and
# KL_SM_ARCH=1.
set -euo pipefail
clang=$1 link=$2 opt=$3 llc=$4 libclc=$5 sm=$6 ptx=$7 in=$8 out=$9
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
num=${sm%a} cpu=$sm llc_ptx=$ptx defs=()
if [ "$num" != "$sm" ]; then
  cpu=86 llc_ptx=75 defs=(-DKL_SM_ARCH=1)
fi
"$clang" -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -finclude-default-header \
  -DKL_SM="$num" "${defs[@]}" -O3 -emit-llvm -c "$in" -o "$tmp/k.bc"
"$link" "$tmp/k.bc" "$libclc" -o "$tmp/linked.bc" 2>"$tmp/link.err" || { cat "$tmp/link.err" >&2; exit 1; }
"$opt" -O3 "$tmp/linked.bc" -o "$tmp/opt.bc"
"$llc" -O3 -mcpu="sm_$cpu" -mattr="+ptx$llc_ptx" "$tmp/opt.bc" -o "$tmp/k.ptx"
if [ "$cpu" != "$sm" ]; then
  v="${ptx:0:1}.${ptx:1}"
  sed -i -e "s/^\.version .*/.version $v/" -e "s/^\.target sm_$cpu/.target sm_$sm/" "$tmp/k.ptx"
  grep -q "^\.target sm_$sm" "$tmp/k.ptx" || { echo "build_ptx.sh: no .target line to rewrite" >&2; exit 1; }
fi
# clang does not turn reqd_work_group_size into PTX's .maxntid: without it the driver
# knows nothing of the work-group size it will run at. The tensor-core kernels (kl_tc_*,
# 256 work-items; kl_tc_mm*, kl_tc_cvt*, kl_wg_mm*, kl_wg_cvt* and kl_attn_tc*, 128) get
# .maxntid 256 (128) (measured on the H100: as fast as none, and
# .minnctapersm 2, which caps them at 128 registers, took 25% longer). kl_attn_tc64 gets
# .maxnreg 128 besides (ptxas gave it 204 registers, two work-groups an SM; at 128, four,
# with 16 bytes spilled, BERT-base b32's 12 attentions took 0.76 against 0.86 ms on the
# H200).
awk '/^\.entry (kl_tc_mm|kl_tc_cvt|kl_wg_mm|kl_wg_cvt|kl_attn_tc)/ { tc = 128 }
     /^\.entry kl_tc_/ && !/^\.entry (kl_tc_mm|kl_tc_cvt)/ { tc = 256 }
     /^\.entry kl_attn_tc/ { reg = 128 }
     { print }
     tc && /^\)/ { print ".maxntid " tc ", 1, 1"; if (reg) print ".maxnreg " reg; tc = reg = 0 }' \
  "$tmp/k.ptx" >"$out"
