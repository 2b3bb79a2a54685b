#!/usr/bin/env bash
# Our train step vs PyTorch's on the same GPT configuration, on this machine, in one run:
#   make && tools/bench_vs_pytorch.sh [THREADS]        (BUILD=DIR: our binaries from DIR instead of build/)
# Needs Debian's python3-torch and an optimized BLAS for it (libopenblas0-pthread): with Debian's default
# reference BLAS, PyTorch 1.13 takes ~40 s per step here and the comparison means nothing. Where OpenBLAS does not
# recognise the CPU and falls back to a narrower kernel, OPENBLAS_CORETYPE is set to the widest one the CPU runs
# (tools/openblas_core.sh; set it yourself to override) and the report says which kernel OpenBLAS used.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
# shellcheck source=tools/openblas_core.sh
. tools/openblas_core.sh
openblas_pick_core "$py"
ours=$(OMP_NUM_THREADS=$threads ${BUILD:-build}/bench model --threads "$threads" --reps 7 | grep 'step: median' | sed 's/.*median \([0-9.]*\) ms.*/\1/')
theirs=$(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads $py tools/bench_pytorch.py --threads "$threads" --reps 7 | grep 'step: median' | sed 's/.*median \([0-9.]*\) ms.*/\1/')
echo "GPT L=6 C=384 NH=6 V=256 B=8 T=256, fp32, $threads threads, median of 7 steps each"
echo "  icl.cpp  train step: $ours ms"
echo "  PyTorch  train step: $theirs ms  ($($py -c 'import torch; print(torch.__version__)'))"
echo "  $OPENBLAS_CORE_NOTE"
awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "  icl.cpp is %.2fx faster\n", b / a }'
