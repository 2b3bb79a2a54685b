#!/usr/bin/env bash
# Our train step vs llm.c's CPU train step (karpathy/llm.c train_gpt2.c) on the same GPT, on this machine, in one run:
#   make && tools/bench_vs_llmc.sh LLMC_DIR [THREADS] [REPS]     (BUILD=DIR: our binaries from DIR instead of build/)
# LLMC_DIR is your checkout of https://github.com/karpathy/llm.c (this repository holds none of its code): its
# train_gpt2.c is compiled with llm.c's own Makefile flags into build/llmc_step together with tools/llmc_step.c,
# which loads a random checkpoint through llm.c's loader and times llm.c's forward + zero_grad + backward + update.
# Shape: bench model's defaults, L=6 C=384 NH=6 V=256 B=8 T=256, fp32. llm.c's step is ~10x slower than ours:
# REPS (default 5) timed steps each after one warm-up step.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
    [ $# -lt 1 ] && exit 2 || exit 0
fi
llmc=$1 threads=${2:-2} reps=${3:-5}
[ -f "$llmc/train_gpt2.c" ] || { echo "bench_vs_llmc: no train_gpt2.c in '$llmc' (give the path of an llm.c checkout)" >&2; exit 1; }
case "$threads$reps" in *[!0-9]*) echo "bench_vs_llmc: THREADS and REPS must be positive integers" >&2; exit 2;; esac
build=${BUILD:-build}
[ -x "$build/bench" ] || { echo "bench_vs_llmc: $build/bench not built (run make first)" >&2; exit 1; }
${CC:-gcc} -Ofast -march=native -fopenmp -DOMP -DTESTING -I"$llmc" tools/llmc_step.c -lm -o "$build/llmc_step"
ours=$(OMP_NUM_THREADS=$threads "$build/bench" model --threads "$threads" --reps 7 | grep 'step: median' | sed 's/.*median \([0-9.]*\) ms.*/\1/')
theirs=$(OMP_NUM_THREADS=$threads "$build/llmc_step" --reps "$reps" | grep 'step: median' | sed 's/.*median \([0-9.]*\) ms.*/\1/')
echo "GPT L=6 C=384 NH=6 V=256 B=8 T=256, fp32, $threads threads"
echo "  icl.cpp  train step: $ours ms (median of 7 steps)"
echo "  llm.c    train step: $theirs ms (median of $reps steps; $(git -C "$llmc" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout"))"
awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "  icl.cpp is %.2fx faster\n", b / a }'
