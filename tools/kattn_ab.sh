#!/usr/bin/env bash
# Two versions of the CPU's kernel attention (the parallel, chunked form) side by side in one process, alternating
# round by round:
#   tools/kattn_ab.sh [--threads N] [--rounds N] [--flush MIB] [--arch FLAGS --build DIR] [--shape B,T,C,NH]... A [B]
# A and B are commits (B defaults to the working tree). Each version's src/layers/kernel_attention.h, with the
# tile_mm.h, vmath.h, rope.h and simd.h it calls, is compiled into its own namespace and linked with
# tools/kattn_ab/driver.cpp and the working tree's DIR/libicl.a (default build/; with --arch, a DIR built with the same
# ARCH_FLAGS, e.g. --arch "-mavx2 -mfma" --build build-avx2). --flush: MiB written between calls (default 0: the
# operands stay in cache, as in the kernel LM's step at these sizes, where qkv comes straight from its matmul). Per
# shape: the forward's and the backward's medians, b/a, b's GFLOP/s in `iclca bench`'s causal count, and whether the
# bits agree. Default: 1 thread (as `iclca bench --threads 1`) and the shapes of `iclca bench --Ts 1024 --width 64|256
# --heads 4` (B=1, T=1024, heads of 16 and of 64). Exit 1 if any shape's bits differ, 2 on a usage error.
# Example (docs/benchmarks.md):  tools/kattn_ab.sh --rounds 21 5ea9f68
set -euo pipefail
cd "$(dirname "$0")/.."
threads=1 rounds=15 flush=0 arch="-march=native" bdir=build shapes=()
usage() { echo "usage: tools/kattn_ab.sh [--threads N] [--rounds N] [--flush MIB] [--arch FLAGS --build DIR] [--shape B,T,C,NH]... A [B]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --threads) [ $# -ge 2 ] || usage; threads=$2; shift 2 ;;
        --rounds) [ $# -ge 2 ] || usage; rounds=$2; shift 2 ;;
        --flush) [ $# -ge 2 ] || usage; flush=$2; shift 2 ;;
        --arch) [ $# -ge 2 ] || usage; arch=$2; shift 2 ;;
        --build) [ $# -ge 2 ] || usage; bdir=$2; shift 2 ;;
        --shape) [ $# -ge 2 ] || usage; [[ "$2" =~ ^[0-9]+,[0-9]+,[0-9]+,[0-9]+$ ]] || { echo "error: --shape takes B,T,C,NH (whole numbers)" >&2; exit 2; }; shapes+=("$2"); shift 2 ;;
        -h|--help) sed -n 2,13p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "error: unknown flag $1" >&2; usage ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] && [ $# -le 2 ] || usage
for v in "$threads" "$rounds"; do [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -ge 1 ] || { echo "error: --threads and --rounds take whole numbers >= 1" >&2; exit 2; }; done
[[ "$flush" =~ ^[0-9]+$ ]] || { echo "error: --flush takes a whole number of MiB" >&2; exit 2; }
[ ${#shapes[@]} -gt 0 ] || shapes=(1,1024,64,4 1,1024,256,4)
[ -f "$bdir/libicl.a" ] || { echo "error: $bdir/libicl.a is missing (run make first)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
show() { if [ -z "$1" ]; then cat "src/layers/$2"; else git show "$1:src/layers/$2"; fi; }
files="simd.h vmath.h rope.h tile_mm.h kernel_attention.h"
version() {  # version REV NAME: the files at REV ('' = the working tree) in namespace ka_NAME, as kattn_NAME.h
    local h="$work/kattn_$2.h"
    for f in $files; do show "$1" "$f"; done | grep -v '^#pragma once' | sed "s/^namespace icl {/namespace ka_$2 { using namespace icl;/" > "$h"
    [ "$(grep -c "^namespace ka_$2 {" "$h")" -ge "$(echo $files | wc -w)" ] || { echo "error: $files at ${1:-the working tree}: a file without a 'namespace icl {' line" >&2; exit 1; }
}
a=$(git rev-parse --verify --quiet --short=12 "$1^{commit}") || { echo "error: $1 is not a commit" >&2; exit 2; }
if [ $# -eq 2 ]; then b=$(git rev-parse --verify --quiet --short=12 "$2^{commit}") || { echo "error: $2 is not a commit" >&2; exit 2; }; else b=""; fi
version "$a" a
version "$b" b
g++ -std=c++17 -fopenmp -ffp-contract=off -O3 $arch -Isrc -I"$work" tools/kattn_ab/driver.cpp "$bdir/libicl.a" -o "$work/driver" -lpcre2-8
echo "a = $a, b = ${b:-the working tree ($(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- $(for f in $files; do echo src/layers/$f; done) || echo ' + changes'))}; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); g++ $arch, $bdir/libicl.a; $threads threads, flush $flush MiB"
rc=0
for s in "${shapes[@]}"; do
    OMP_NUM_THREADS=$threads "$work/driver" ${s//,/ } "$rounds" "$flush" || rc=1
done
exit $rc
