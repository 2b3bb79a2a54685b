#!/usr/bin/env bash
# Everything worth running on a machine with an NVIDIA GPU, in one command, with all output in one file:
#
#   tools/bench_gpu.sh [OUT_FILE]          (default: out/bench_gpu-<date>.txt)
#
#  1. the machine (nvidia-smi, nvcc, git revision) and `make cuda`
#  2. the CUDA test suite (every kernel against the CPU reference, whole models, checkpoints across devices),
#     then the whole test suite from the CUDA build
#  3. gradcheck --devices cpu,cuda: the GPT (tokens, vectors, a wide random-token case) and the CGT (VAE, aux pass)
#  4. one step dumped on each device and compared with npydiff; a checkpoint trained on the GPU continued on the CPU
#  5. bench --device cuda: cuBLAS TFLOP/s (fp32 and TF32), bandwidth-bound kernels vs copy bandwidth, GPT and CGT
#     steps; the GPT-2 small shape with TF32 off and on
#  6. tools/bench_pytorch.py --device cuda on the same GPT-2 small shape (PyTorch eager, TF32 off and on)
#
# Every step runs even if an earlier one failed; the last lines list the failures and the exit status is
# non-zero if there were any. Needs: nvcc + cuBLAS, a GPU, and (for step 6) Python with PyTorch built for CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/bench_gpu-$(date +%Y%m%d-%H%M%S).txt}
mkdir -p "$(dirname "$out")" out/bench_gpu
exec > >(tee "$out") 2>&1
failures=()
step() {
    echo
    echo "=== $* ==="
    local t0=$SECONDS
    "$@"
    local rc=$?
    echo "=== exit $rc after $((SECONDS - t0)) s: $*"
    [ $rc -eq 0 ] || failures+=("$*")
}
py=python3
command -v "$py" >/dev/null 2>&1 || py=/usr/bin/python3
nproc=$(nproc 2>/dev/null || echo 4)
export OMP_NUM_THREADS=$nproc
B=build-cuda
G2S="--layers 12 --width 768 --heads 12 --vocab 50257 --seq 1024 --batch 8"   # GPT-2 small, as bench --preset gpt2-small

echo "bench_gpu.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname), git $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+local changes')"
step nvidia-smi
step bash -c "command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version"

# 1. build
step make cuda -j"$nproc"

# 2. tests
step env ICL_BIN_DIR=$B $B/test_icl -ts=cuda
step env ICL_BIN_DIR=$B $B/test_icl

# 3. CPU fp64 vs GPU fp32, every activation and gradient (TF32 always off here)
step $B/gradcheck --devices cpu,cuda
step $B/gradcheck --devices cpu,cuda --task linreg --seq 41 --width 32 --heads 4
step $B/gradcheck --devices cpu,cuda --task random --vocab 1000 --layers 2 --width 128 --heads 4 --batch 4 --seq 200
step $B/gradcheck --devices cpu,cuda --task random --vocab 50257 --layers 2 --width 768 --heads 12 --batch 2 --seq 256 --atol 1e-4
step $B/gradcheck --devices cpu,cuda --model cgt
step $B/gradcheck --devices cpu,cuda --model cgt --layers 3 --ell 1 --width 48 --heads 4 --dy 16 --seq 60 --batch 4 --vae --horizon 8 --mix softmax

# 4. dumps and checkpoints across devices
rm -rf out/bench_gpu/dump_cpu out/bench_gpu/dump_gpu
step $B/train_gpt --preset tiny --steps 1 --dump-npy out/bench_gpu/dump_cpu --out out/bench_gpu/run_cpu
step $B/train_gpt --preset tiny --steps 1 --dump-npy out/bench_gpu/dump_gpu --out out/bench_gpu/run_gpu --device cuda
step $B/npydiff out/bench_gpu/dump_cpu out/bench_gpu/dump_gpu
step $B/train_gpt --preset arith --steps 300 --device cuda --out out/bench_gpu/arith_gpu --save out/bench_gpu/arith_gpu.safetensors
step $B/train_gpt --load out/bench_gpu/arith_gpu.safetensors --task arith --steps 20 --out out/bench_gpu/arith_cpu_continued

# 5. benchmarks on the GPU
step $B/bench --device cuda gemm kernels model cgt
step $B/bench --device cuda kernels model --preset gpt2-small
step $B/bench --device cuda model --preset gpt2-small --tf32
step $B/train_gpt --preset bench --data data/text/notes.txt --device cuda --steps 50 --out out/bench_gpu/train_bench

# 6. PyTorch eager on the same GPT-2 small step (a reference only; never used by the engine)
step $py tools/bench_pytorch.py --device cuda $G2S --reps 10
step $py tools/bench_pytorch.py --device cuda $G2S --reps 10 --tf32

echo
if [ ${#failures[@]} -eq 0 ]; then
    echo "bench_gpu.sh: every step passed; output in $out"
else
    echo "bench_gpu.sh: ${#failures[@]} step(s) failed:"
    for f in "${failures[@]}"; do echo "  $f"; done
    echo "output in $out"
    exit 1
fi
