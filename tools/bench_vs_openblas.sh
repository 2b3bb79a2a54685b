#!/usr/bin/env bash
# Our SGEMM beside OpenBLAS's (through NumPy) on this machine, in one run, alternating, medians:
#   make && tools/bench_vs_openblas.sh [THREADS] [ROUNDS]
# Needs Debian's python3-numpy with OpenBLAS behind it (apt-get install python3-numpy libopenblas0-pthread): with
# Debian's default reference BLAS the comparison means nothing, so the script refuses to run on it. Where OpenBLAS
# does not recognise the CPU and falls back to a narrower kernel, OPENBLAS_CORETYPE is set to the widest one the CPU
# runs (tools/openblas_core.sh; set it yourself to override) and the report says which kernel OpenBLAS used.
# Each round: `bench gemm` (its 1024³ NN row: the median of 7 products) and NumPy's float32 a @ b at 1024³ (the
# median of 7 after a warm-up), both at THREADS threads. Prints every round, then the medians and their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
rounds=${2:-3}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
[ -x build/bench ] || { echo "error: build/bench is missing (run make first)" >&2; exit 1; }
# shellcheck source=tools/openblas_core.sh
. tools/openblas_core.sh
openblas_pick_core "$py"
numpy_gemm() {
    OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads $py - <<'EOF'
import sys, time
try:
    import numpy as np
except ImportError:
    sys.exit("error: NumPy is missing (apt-get install python3-numpy libopenblas0-pthread)")
n = 1024
rng = np.random.default_rng(1)
a = rng.standard_normal((n, n), dtype=np.float32)
b = rng.standard_normal((n, n), dtype=np.float32)
a @ b  # warm-up, and loads the BLAS
if 'openblas' not in open('/proc/self/maps').read():
    sys.exit("error: NumPy's BLAS is not OpenBLAS here (apt-get install libopenblas0-pthread)")
times = []
for _ in range(7):
    t0 = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - t0)
times.sort()
print("%.1f" % (2.0 * n ** 3 / times[len(times) // 2] * 1e-9))
EOF
}
ours_all=() theirs_all=()
echo "SGEMM 1024^3 (fp32, NN), $threads threads, $rounds rounds alternating; GFLOP/s, each the median of 7 products"
for r in $(seq 1 "$rounds"); do
    out=$(OMP_NUM_THREADS=$threads build/bench gemm --threads "$threads" --reps 7)
    ours=$(echo "$out" | grep '^1024^3 NN' | awk '{print $8}')
    kernel=$(echo "$out" | sed -n 's/.*GEMM kernel: //p')
    peak=$(echo "$out" | sed -n 's/^\(FP32 FMA peak.*GFLOP\/s\);.*/\1/p')
    theirs=$(numpy_gemm)
    echo "  round $r: icl.cpp $ours   OpenBLAS $theirs"
    ours_all+=("$ours")
    theirs_all+=("$theirs")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
mo=$(median "${ours_all[@]}")
mt=$(median "${theirs_all[@]}")
echo "  $peak (the last round's)"
echo "  $OPENBLAS_CORE_NOTE"
echo "  median: icl.cpp $mo GFLOP/s ($kernel), OpenBLAS $mt GFLOP/s (NumPy $($py -c 'import numpy; print(numpy.__version__)'))"
awk -v a="$mo" -v b="$mt" 'BEGIN { printf "  icl.cpp / OpenBLAS = %.2f\n", a / b }'
