#!/usr/bin/env bash
# Two versions of the CPU's O(T) softmax attention side by side in one process, alternating round by round:
#   tools/attention_ab.sh [--threads N] [--rounds N] [--arch FLAGS --build DIR] [--with-gemm] [--shape B,T,C,NH]... A [B]
# A and B are commits (B defaults to the working tree). Each version's src/layers/attention.h, with the vmath.h it
# calls, is compiled into its own namespace and linked with tools/attention_ab/driver.cpp and the working tree's
# DIR/libicl.a (default build/; both versions must build against today's gemm, and the O(T) form exists from commit 36ad88e on; with --arch,
# a DIR built with the same ARCH_FLAGS, e.g. --arch "-mavx2 -mfma" --build build-avx2). --with-gemm: each version's
# matmul.h and gemm.cpp go into its namespace too (both from commit 0478500 on), to compare GEMM changes as attention
# sees them. Per shape (a and b take turns to run first): the forward's and the backward's medians, b/a, the median of
# each round's own b/a (paired), and whether the bits agree. Default shapes: the GPT's 8,256,384,6 and 2,1024,384,6.
# Exit 1 if any shape's bits differ, 2 on a usage error.
# Examples (docs/benchmarks.md):  tools/attention_ab.sh --threads 2 --rounds 15 a1b869f HEAD
#                                 tools/attention_ab.sh --threads 2 --rounds 15 --with-gemm 74a7686 eb99577
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 rounds=15 arch="-march=native" bdir=build shapes=() with_gemm=0
usage() { echo "usage: tools/attention_ab.sh [--threads N] [--rounds N] [--arch FLAGS --build DIR] [--with-gemm] [--shape B,T,C,NH]... A [B]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --threads) [ $# -ge 2 ] || usage; threads=$2; shift 2 ;;
        --rounds) [ $# -ge 2 ] || usage; rounds=$2; shift 2 ;;
        --arch) [ $# -ge 2 ] || usage; arch=$2; shift 2 ;;
        --build) [ $# -ge 2 ] || usage; bdir=$2; shift 2 ;;
        --with-gemm) with_gemm=1; shift ;;
        --shape) [ $# -ge 2 ] || usage; [[ "$2" =~ ^[0-9]+,[0-9]+,[0-9]+,[0-9]+$ ]] || { echo "error: --shape takes B,T,C,NH (whole numbers)" >&2; exit 2; }; shapes+=("$2"); shift 2 ;;
        -h|--help) sed -n 2,13p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "error: unknown flag $1" >&2; usage ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] && [ $# -le 2 ] || usage
for v in "$threads" "$rounds"; do [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -ge 1 ] || { echo "error: --threads and --rounds take whole numbers >= 1" >&2; exit 2; }; done
[ ${#shapes[@]} -gt 0 ] || shapes=(8,256,384,6 2,1024,384,6)
[ -f "$bdir/libicl.a" ] || { echo "error: $bdir/libicl.a is missing (run make first)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
show() { if [ -z "$1" ]; then cat "src/layers/$2"; else git show "$1:src/layers/$2"; fi; }
version() {  # version REV NAME: vmath.h and attention.h at REV ('' = the working tree) in namespace att_NAME, as attention_NAME.h
    local h="$work/attention_$2.h" files="vmath.h attention.h"
    [ $with_gemm = 0 ] || files="matmul.h $files"  # (and gemm.cpp, compiled alone: gemm_NAME.o)
    for f in $files; do show "$1" "$f"; done | grep -v '^#pragma once' | sed "s/^namespace icl {/namespace att_$2 { using namespace icl;/" > "$h"
    [ "$(grep -c "^namespace att_$2 {" "$h")" -eq "$(echo $files | wc -w)" ] || { echo "error: $files at ${1:-the working tree}: a file without a 'namespace icl {' line" >&2; exit 1; }
    if [ $with_gemm = 1 ]; then
        show "$1" gemm.cpp | sed "s/^namespace icl {/namespace att_$2 { using namespace icl;/" > "$work/gemm_$2.cpp"
        [ "$(grep -c "^namespace att_$2 {" "$work/gemm_$2.cpp")" -eq 1 ] || { echo "error: gemm.cpp at ${1:-the working tree} has no 'namespace icl {' line" >&2; exit 1; }
        g++ -std=c++17 -fopenmp -ffp-contract=off -O3 $arch -Isrc -c "$work/gemm_$2.cpp" -o "$work/gemm_$2.o"
        objs+=("$work/gemm_$2.o")
    fi
}
objs=()
a=$(git rev-parse --verify --quiet --short=12 "$1^{commit}") || { echo "error: $1 is not a commit" >&2; exit 2; }
if [ $# -eq 2 ]; then b=$(git rev-parse --verify --quiet --short=12 "$2^{commit}") || { echo "error: $2 is not a commit" >&2; exit 2; }; else b=""; fi
version "$a" a
version "$b" b
g++ -std=c++17 -fopenmp -ffp-contract=off -O3 $arch -Isrc -I"$work" tools/attention_ab/driver.cpp "${objs[@]}" "$bdir/libicl.a" -o "$work/driver" -lpcre2-8
echo "a = $a, b = ${b:-the working tree ($(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- src/layers/attention.h src/layers/vmath.h src/layers/matmul.h src/layers/gemm.cpp || echo ' + changes'))}; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); g++ $arch, $bdir/libicl.a$([ $with_gemm = 0 ] || echo ', each version'"'"'s gemm.cpp'); $threads threads"
rc=0
for s in "${shapes[@]}"; do
    OMP_NUM_THREADS=$threads "$work/driver" ${s//,/ } "$rounds" || rc=1
done
exit $rc
