#!/usr/bin/env bash
# Two versions of the fp32 GEMM (src/layers/gemm.cpp) side by side in one process, alternating call by call:
#   tools/gemm_ab.sh [--threads N] [--calls N] [--flush-mb N] [--arch FLAGS] A [B]
# A and B are commits (B defaults to the working tree). Each version's gemm.cpp is compiled into its own namespace
# with the Makefile's flags (ARCH default -march=native), linked with tools/gemm_ab/driver.cpp and build/libicl.a,
# and run on `bench model`'s GPT products and 1024³: per-case medians, b/a, whether the bits agree, and the sum over
# one training step's products. Exit 1 if any product's bits differ, 2 on a usage error.
# Example (the thread-grid change, docs/benchmarks.md 2026-12-04):  tools/gemm_ab.sh --threads 2 --calls 21 a502852 c65d3f5
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 calls=31 flush=64 arch="-march=native"
usage() { echo "usage: tools/gemm_ab.sh [--threads N] [--calls N] [--flush-mb N] [--arch FLAGS] A [B]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --threads) [ $# -ge 2 ] || usage; threads=$2; shift 2 ;;
        --calls) [ $# -ge 2 ] || usage; calls=$2; shift 2 ;;
        --flush-mb) [ $# -ge 2 ] || usage; flush=$2; shift 2 ;;
        --arch) [ $# -ge 2 ] || usage; arch=$2; shift 2 ;;
        -h|--help) sed -n 2,8p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "error: unknown flag $1" >&2; usage ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] && [ $# -le 2 ] || usage
for v in "$threads" "$calls" "$flush"; do [[ "$v" =~ ^[0-9]+$ ]] || { echo "error: --threads, --calls and --flush-mb take whole numbers" >&2; exit 2; }; done
[ "$threads" -ge 1 ] && [ "$calls" -ge 1 ] || { echo "error: --threads and --calls must be at least 1" >&2; exit 2; }
[ -f build/libicl.a ] || { echo "error: build/libicl.a is missing (run make first)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-std=c++17 -fopenmp -ffp-contract=off -O3 $arch -Isrc)
version() {  # version REV NAMESPACE: gemm.cpp at REV ('' = the working tree) compiled into NAMESPACE
    local src="$work/$2.cpp"
    if [ -z "$1" ]; then cat src/layers/gemm.cpp; else git show "$1:src/layers/gemm.cpp"; fi |
        sed "s/^namespace icl {/namespace $2 { using namespace icl;/" > "$src"
    grep -q "^namespace $2 {" "$src" || { echo "error: $2: no 'namespace icl {' line in gemm.cpp at ${1:-the working tree}" >&2; exit 1; }
    g++ "${flags[@]}" -c "$src" -o "$work/$2.o"
}
a=$(git rev-parse --verify --quiet --short=12 "$1^{commit}") || { echo "error: $1 is not a commit" >&2; exit 2; }
if [ $# -eq 2 ]; then b=$(git rev-parse --verify --quiet --short=12 "$2^{commit}") || { echo "error: $2 is not a commit" >&2; exit 2; }; else b=""; fi
version "$a" gemm_a
version "$b" gemm_b
g++ "${flags[@]}" tools/gemm_ab/driver.cpp "$work/gemm_a.o" "$work/gemm_b.o" build/libicl.a -o "$work/driver" -lpcre2-8
echo "a = $a, b = ${b:-the working tree ($(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- src/layers/gemm.cpp || echo ' + changes'))}; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); g++ $arch"
OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} "$work/driver" "$calls" "$flush"
