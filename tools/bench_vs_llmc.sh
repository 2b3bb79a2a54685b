#!/usr/bin/env bash
# Our train step vs llm.c's CPU train step (karpathy/llm.c train_gpt2.c) on the same GPT, on this machine, in one run:
#   make && tools/bench_vs_llmc.sh LLMC_DIR [THREADS] [REPS]     (BUILD=DIR: our binaries from DIR instead of build/)
# LLMC_DIR is your checkout of https://github.com/karpathy/llm.c (this repository holds none of its code): its
# train_gpt2.c is compiled with llm.c's own Makefile flags into $BUILD/llmc_step together with tools/llmc_step.c,
# which loads a random checkpoint through llm.c's loader and times llm.c's forward + zero_grad + backward + update.
# Shape: bench model's defaults, L=6 C=384 NH=6 V=256 B=8 T=256, fp32; THREADS (default 2) for both; llm.c's step
# takes seconds, so REPS (default 5) timed steps after one warm-up step.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 3 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
    case "${1:-}" in --help|-h) exit 0;; *) exit 2;; esac
fi
llmc=$1 threads=${2:-2} reps=${3:-5}
for v in "$threads" "$reps"; do
    case "$v" in ''|*[!0-9]*|0*) echo "bench_vs_llmc: THREADS and REPS must be positive integers, got '$v'" >&2; exit 2;; esac
done
# paths given relative to where the script was called from, before moving to the repository root
[ -d "$llmc" ] && llmc=$(cd "$llmc" && pwd)
build=${BUILD:-build}
[ -d "$build" ] && build=$(cd "$build" && pwd)
cd "$(dirname "$0")/.."
[ -f "$llmc/train_gpt2.c" ] || { echo "bench_vs_llmc: no train_gpt2.c in '$llmc' (give the path of an llm.c checkout)" >&2; exit 1; }
[ -x "$build/bench" ] || { echo "bench_vs_llmc: $build/bench not built (run make first)" >&2; exit 1; }
${CC:-gcc} -Ofast -march=native -fopenmp -DOMP -DTESTING -I"$llmc" tools/llmc_step.c -lm -o "$build/llmc_step"
# the median line of each, or the whole output when it is missing (llm.c prints its errors to stdout)
median() {
    local out
    out=$("$@" 2>&1) || true
    if ! grep -q 'step: median' <<< "$out"; then
        echo "bench_vs_llmc: no step time from $1:" >&2
        tail -5 <<< "$out" >&2
        exit 1
    fi
    grep 'step: median' <<< "$out" | sed 's/.*median \([0-9.]*\) ms.*/\1/'
}
ours=$(OMP_NUM_THREADS=$threads median "$build/bench" model --threads "$threads" --reps 7)
theirs=$(OMP_NUM_THREADS=$threads median "$build/llmc_step" --reps "$reps")
echo "GPT L=6 C=384 NH=6 V=256 B=8 T=256, fp32, $threads threads"
echo "  icl.cpp  train step: $ours ms (median of 7 steps)"
echo "  llm.c    train step: $theirs ms (median of $reps steps; $(git -C "$llmc" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout"))"
awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "  icl.cpp is %.2fx faster\n", b / a }'
