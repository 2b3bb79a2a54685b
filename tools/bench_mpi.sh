#!/usr/bin/env bash
# bench_mpi.sh — what data-parallel training costs on one machine: the same train_gpt steps as 1 process × 2 threads
# with --batch 2B and as `mpirun -np 2` × 1 thread each with --batch B (equal steps, README "Several processes"),
# RUNS times each, alternating; prints the median ms/step of each (the trainer's mean over steps 2…, from each run's
# summary.json), their ratio, and the gradient bytes every step sums across the processes.
#
#   tools/bench_mpi.sh [RUNS] [STEPS]        defaults 3 runs, 20 steps; BUILD=dir for another build folder
# Shape: the GPT step of issue 15 (L6 C384 NH6, bytes of README.md, T256), global batch 8.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUNS=${1:-3}
STEPS=${2:-20}
command -v mpirun >/dev/null || { echo "bench_mpi: mpirun not found (apt-get install openmpi-bin libopenmpi-dev, then make)"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args="--task text --data README.md --layers 6 --width 384 --heads 6 --seq 256 --steps $STEPS --eval-every 0"
ms() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ms_per_step'])" "$1/summary.json"; }
one=() two=()
for r in $(seq 1 "$RUNS"); do
  OMP_NUM_THREADS=2 "$BUILD/train_gpt" $args --batch 8 --threads 2 --out "$out/one$r" >/dev/null 2>&1
  one+=("$(ms "$out/one$r")")
  OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 "$BUILD/train_gpt" $args --batch 4 --threads 1 --out "$out/two$r" \
    >"$out/two$r.log" 2>&1
  two+=("$(ms "$out/two$r")")
done
bytes=$(grep -o 'gradient ([0-9.e+]* MB)' "$out/two1.log" | head -1)
/usr/bin/python3 - "$RUNS" "${one[@]}" "${two[@]}" <<PY
import statistics, sys
n = int(sys.argv[1]); a = [float(x) for x in sys.argv[2:2 + n]]; b = [float(x) for x in sys.argv[2 + n:]]
print(f"1 process × 2 threads, --batch 8:  ms/step {' '.join(f'{x:.1f}' for x in a)}  median {statistics.median(a):.1f}")
print(f"2 processes × 1 thread, --batch 4: ms/step {' '.join(f'{x:.1f}' for x in b)}  median {statistics.median(b):.1f}")
print(f"ratio (2 processes / 1 process): {statistics.median(b) / statistics.median(a):.3f}; each step sums the $bytes across the processes")
PY
