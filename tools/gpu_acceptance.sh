#!/usr/bin/env bash
# The GPU acceptance run (issue 14): everything to check and measure on a machine with an NVIDIA GPU, in one command,
# all output in one report file.
#
#   tools/gpu_acceptance.sh [--report FILE] [--stages LIST] [--deps DIR] [--prebuilt] [--jobs N] [--step-timeout S]
#
#   --report FILE   the report (default: out/gpu_acceptance-<date>.txt); every step's output and exit status
#   --stages LIST   comma list, in this order (default: all of them):
#     build       make cuda (nvcc for sm_80 and sm_90, -j$(nproc)); builds there, since a binary made on another
#                 machine's CPU or system libraries may not run
#     tests       every GPU test case in its own process with ICL_CUDA_SYNC=1 (a launch fault is reported at its
#                 launch) and ICL_EXPECT_GPU=1 (a skip is a failure)
#     suite       the whole test suite (CPU cases too) from the CUDA build
#     sanitizer   compute-sanitizer memcheck, racecheck and initcheck on a subset of the GPU cases (skipped, with
#                 the reason, where compute-sanitizer is missing or refuses the device)
#     gradcheck   gradcheck --devices cpu,cuda: the GPT (tokens, vectors, a wide case, GPT-2's vocabulary) and the
#                 CGT (aux pass, VAE, softmax mixing), CPU fp64 against GPU fp32, every activation and gradient
#     runs        a short --device cuda run of every binary (the ones that still refuse the GPU are listed as
#                 such), one step dumped on each device and compared with npydiff, a checkpoint trained on the GPU
#                 continued on the CPU, one process under mpirun, the gradient through a one-rank NCCL communicator
#                 (ICL_NCCL_ALWAYS=1: the same losses as without) and, with 2 GPUs and mpirun, 2 ranks on 2 GPUs
#     bench       bench --device cuda (cuBLAS fp32/TF32, bandwidth-bound kernels, GPT and CGT steps, the GPT-2 small
#                 step with TF32 off and on), then tools/bench_pytorch.py on the same GPT-2 small step (PyTorch
#                 eager, TF32 off and on) where PyTorch with CUDA is installed
#   --deps DIR      headers and libraries carried to a machine that cannot install packages (tools/gpu_deps.sh
#                   makes the folder; passed to make as DEPS_DIR)
#   --prebuilt      use the binaries already in build-cuda/ (built elsewhere, e.g. `make cuda ICL_MPI=0
#                   ARCH_FLAGS="-mavx2 -mfma"` on a machine of the same system libraries) instead of the build stage:
#                   the step 'binaries load' checks them first, and a shared library the loader cannot find is
#                   looked up in the Python CUDA wheels (site-packages/nvidia/*/lib, where PyTorch's NCCL lives)
#   --jobs N        the GPU test cases N at a time, each with OMP_NUM_THREADS = nproc / N (default 1); the report
#                   keeps each case's output whole, in the cases' order
#   --step-timeout S  every step is stopped after S seconds and counted failed (default 600): a hang cannot eat
#                   a lease
#
# Every step runs even if an earlier one failed; the report ends with a table of every step (exit status, seconds)
# and the exit status is non-zero if any step failed. On this project's lent GPU machine (the device tool: a few
# minutes of device time, a fresh machine each call) what worked on 2026-11-28 (docs/benchmarks.md, section GPU):
# build here (`make cuda ARCH_FLAGS="-mavx2 -mfma" CUDA_ARCH="-gencode arch=compute_90,code=sm_90" ICL_MPI=0`),
# `tools/gpu_deps.sh`, copy the binaries of build-cuda/ and its provenance.stamp into an ignored folder (.gpu-bin) and carry it with .gpu-deps;
# there `cp -a .gpu-bin/. build-cuda/` and, with A="tools/gpu_acceptance.sh --prebuilt --deps .gpu-deps":
#   $A --stages build --report $OUT/0.txt                  (checks that the binaries load; builds there if not)
#   $A --jobs 4 --stages tests --report $OUT/1.txt &  $A --stages suite --report $OUT/2.txt &
#   $A --stages sanitizer,gradcheck,runs --report $OUT/3.txt &  wait
#   $A --stages bench --report $OUT/4.txt                  (alone on the GPU)
# about 4 minutes on an H200 (the suite takes the longest, ~150 s).
set -uo pipefail
cd "$(dirname "$0")/.."
report="" stages="build,tests,suite,sanitizer,gradcheck,runs,bench" deps="" prebuilt=0 jobs=1 step_timeout=600
while [ $# -gt 0 ]; do
    case "$1" in
        --report) report=$2; shift 2 ;;
        --stages) stages=$2; shift 2 ;;
        --deps) deps=$2; shift 2 ;;
        --prebuilt) prebuilt=1; shift ;;
        --jobs) jobs=$2; shift 2 ;;
        --step-timeout) step_timeout=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for s in ${stages//,/ }; do
    case "$s" in build|tests|suite|sanitizer|gradcheck|runs|bench) ;; *) echo "error: --stages: unknown stage '$s'" >&2; exit 2 ;; esac
done
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "error: --jobs '$jobs': expected a positive integer" >&2; exit 2; }
[[ "$step_timeout" =~ ^[1-9][0-9]*$ ]] || { echo "error: --step-timeout '$step_timeout': expected a positive number of seconds" >&2; exit 2; }
[ -z "$deps" ] || [ -d "$deps" ] || { echo "error: --deps $deps: no such folder (make it with tools/gpu_deps.sh)" >&2; exit 2; }
report=${report:-out/gpu_acceptance-$(date +%Y%m%d-%H%M%S).txt}
mkdir -p "$(dirname "$report")" out/gpu_acceptance
exec > >(tee "$report") 2>&1
tee_pid=$!
# Every step runs under its own `timeout` (a process group of its own: at --step-timeout the step and everything it
# started are stopped). Their group ids go to $groups, so that a stop of this script (an outer `timeout`, Ctrl-C)
# stops them too.
groups=$(mktemp)
stop_steps() { while read -r g; do kill -TERM -- "-$g" 2>/dev/null; done <"$groups"; }
finish() { stop_steps; rm -f "$groups"; exec >&- 2>&-; wait "$tee_pid" 2>/dev/null; }  # the report is complete before the script returns
trap finish EXIT
trap 'exit 143' TERM INT
want() { [[ ",$stages," == *",$1,"* ]]; }
results=() failures=()
# run_limited SECONDS CMD...: CMD under `timeout` in its own process group, recorded in $groups; returns CMD's status
run_limited() {
    local limit=$1; shift
    timeout --kill-after=10 "$limit" "$@" &
    local pid=$!
    echo "$pid" >>"$groups"
    wait "$pid"
}
# step NAME CMD...: runs CMD (stopped after --step-timeout, or $STEP_LIMIT seconds where set), records its exit status
# and time
step() {
    local name=$1; shift
    local limit=${STEP_LIMIT:-$step_timeout}
    echo
    echo "=== $name: $*"
    local t0=$SECONDS
    run_limited "$limit" "$@"
    local rc=$?
    [ $rc -ne 124 ] && [ $rc -ne 137 ] || echo "=== $name: stopped after $limit s"
    echo "=== $name: exit $rc after $((SECONDS - t0)) s"
    results+=("$(printf '%-5s %5ss  %s' "$rc" "$((SECONDS - t0))" "$name")")
    [ $rc -eq 0 ] || failures+=("$name")
}
py=python3
command -v "$py" >/dev/null 2>&1 || py=/usr/bin/python3
nproc=$(nproc 2>/dev/null || echo 4)
export OMP_NUM_THREADS=$nproc
B=build-cuda
G2S="--layers 12 --width 768 --heads 12 --vocab 50257 --seq 1024 --batch 8"   # GPT-2 small, as bench --preset gpt2-small
makeargs=(-j"$nproc")
[ -z "$deps" ] || makeargs+=(DEPS_DIR="$deps")

# the tree's commit, and with --prebuilt the binaries' own (their build's provenance.stamp: commit, dirty flag, compiler
# and flags), which is the one that counts when the tree copied here is not the one they were built from
built=""
[ $prebuilt -eq 0 ] || built=", binaries: $(cat $B/provenance.stamp 2>/dev/null || echo 'no build-cuda/provenance.stamp (copy it with the binaries)')"
echo "gpu_acceptance.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname), git $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+local changes')$built, stages $stages"
step nvidia-smi nvidia-smi
step nvcc bash -c "command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version"
step cpu bash -c "grep -m1 'model name' /proc/cpuinfo; nproc"

if [ $prebuilt -eq 1 ]; then
    # binaries built elsewhere: every one must load here; a library the loader cannot find is looked up in --deps
    # DIR/lib and in the Python CUDA wheels (PyTorch's NCCL, cuBLAS), whose folders then go on LD_LIBRARY_PATH
    [ -z "$deps" ] || export LD_LIBRARY_PATH=$(cd "$deps/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    missing=$(ldd $B/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u)
    for lib in $missing; do
        dir=$($py -c 'import sys, glob, os
for p in sys.path:
    for f in glob.glob(os.path.join(p, "nvidia", "*", "lib", sys.argv[1])): print(os.path.dirname(f)); sys.exit(0)' "$lib" 2>/dev/null)
        if [ -n "$dir" ]; then echo "$lib: not found by the loader; using $dir"; export LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi
    done
    nfail=${#failures[@]}
    step "binaries load (--prebuilt)" bash -c "ls $B/test_icl >/dev/null && ! ldd $B/* 2>/dev/null | grep 'not found' && $B/test_icl --list-test-cases -ts=cuda >/dev/null"
    if [ ${#failures[@]} -gt "$nfail" ]; then
        echo "the binaries in $B do not run here: building them here instead"
        STEP_LIMIT=3600 step "make cuda (the prebuilt binaries did not run)" make cuda "${makeargs[@]}"
    fi
elif want build; then
    STEP_LIMIT=3600 step "make cuda" make cuda "${makeargs[@]}"
fi

if want tests; then
    # every GPU case alone: a fault in one cannot hide the others, and ICL_CUDA_SYNC=1 names the launch that failed
    cases=()
    mapfile -t cases < <(ICL_EXPECT_GPU=1 $B/test_icl -ts=cuda --list-test-cases 2>/dev/null | grep -v -e '^\[' -e '^=' -e '^$')
    echo "${#cases[@]} test cases in the cuda suite"
    [ ${#cases[@]} -gt 0 ] || { results+=("1         -   listing the GPU test cases: none found"); failures+=("listing the GPU test cases"); }
    # the cases J at a time (--jobs), each into its own log; the logs then go into the report whole, in order
    tdir=$(mktemp -d)
    case_threads=$(( nproc / jobs > 0 ? nproc / jobs : 1 ))
    echo "running them $jobs at a time, OMP_NUM_THREADS=$case_threads each"
    pids=()
    for i in ${cases[@]+"${!cases[@]}"}; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n 2>/dev/null || true; done
        c=${cases[$i]}
        ( t0=$SECONDS
          run_limited "$step_timeout" env OMP_NUM_THREADS=$case_threads ICL_CUDA_SYNC=1 ICL_EXPECT_GPU=1 ICL_TEST_LOG_ERRORS=1 \
              ICL_BIN_DIR=$B $B/test_icl -tc="${c//,/\\,}" >"$tdir/$i.log" 2>&1
          echo "$? $((SECONDS - t0))" >"$tdir/$i.rc" ) &
        pids+=($!)
    done
    [ ${#pids[@]} -eq 0 ] || wait "${pids[@]}"
    for i in ${cases[@]+"${!cases[@]}"}; do
        c=${cases[$i]}
        read -r rc secs <"$tdir/$i.rc" 2>/dev/null || { rc=1; secs=-; }
        echo; echo "=== test: $c"
        cat "$tdir/$i.log"
        [ "$rc" != 124 ] && [ "$rc" != 137 ] || echo "=== test: $c: stopped after --step-timeout $step_timeout s"
        echo "=== test: $c: exit $rc after $secs s"
        results+=("$(printf '%-5s %5ss  %s' "$rc" "$secs" "test: $c")")
        [ "$rc" = 0 ] || failures+=("test: $c")
    done
    # every GPU-vs-CPU comparison's measured error (ICL_TEST_LOG_ERRORS=1 above), worst first: how far each check's
    # tolerance is from what the GPU gives
    echo
    echo "=== measured errors of the GPU comparisons, worst first (each the maximum over the check's calls):"
    printf '  %11s %11s  %-16s %5s  %s\n' "max d/tol" "max |d|" "atol rtol" calls check
    cat "$tdir"/*.log 2>/dev/null | grep -h 'MESSAGE: gpu-error'$'\t' | cut -f2- |
        awk -F'\t' '{ n = $1; if (!(n in w) || $3 + 0 > w[n] + 0) w[n] = $3; if (!(n in a) || $2 + 0 > a[n] + 0) a[n] = $2
                      tol[n] = $4 " " $5; c[n]++ }
                    END { for (n in w) printf "%.6e\t  %11.3e %11.3e  %-16s %5d  %s\n", w[n], w[n], a[n], tol[n], c[n], n }' |
        sort -g -r -k1,1 | cut -f2-
    rm -rf "$tdir"
fi
if want suite; then
    step "test: whole suite (CUDA build)" env ICL_EXPECT_GPU=1 ICL_BIN_DIR=$B $B/test_icl
fi

if want sanitizer; then
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [ ! -x "$cs" ]; then
        echo; echo "=== sanitizer: skipped: compute-sanitizer not found"; results+=("skip      -   compute-sanitizer (not installed)")
    elif ! timeout 300 "$cs" --tool memcheck --error-exitcode 3 $B/test_icl -tc="cuda kernels: GELU*" >/dev/null 2>&1; then
        echo; echo "=== sanitizer: skipped: compute-sanitizer does not run here (a gVisor machine refuses the device):"
        timeout 300 "$cs" --tool memcheck $B/test_icl -tc="cuda kernels: GELU*" 2>&1 | tail -5
        results+=("skip      -   compute-sanitizer (refused here)")
    else
        subset="cuda kernels: layernorm*,cuda kernels: causal softmax attention*,cuda kernels: softmax cross-entropy*,cuda kernels: CGT weight generator*,cuda kernels: kernel attention (RoPE*"
        for tool in memcheck racecheck initcheck; do
            step "compute-sanitizer $tool" env ICL_EXPECT_GPU=1 "$cs" --tool $tool --error-exitcode 3 $B/test_icl -tc="$subset"
        done
        step "compute-sanitizer memcheck: GPT model" env ICL_EXPECT_GPU=1 "$cs" --tool memcheck --error-exitcode 3 $B/test_icl -tc="cuda models: GPT forward*"
    fi
fi

if want gradcheck; then
    step "gradcheck gpt" $B/gradcheck --devices cpu,cuda
    step "gradcheck gpt linreg" $B/gradcheck --devices cpu,cuda --task linreg --seq 41 --width 32 --heads 4
    step "gradcheck gpt wide" $B/gradcheck --devices cpu,cuda --task random --vocab 1000 --layers 2 --width 128 --heads 4 --batch 4 --seq 200
    step "gradcheck gpt vocab 50257" $B/gradcheck --devices cpu,cuda --task random --vocab 50257 --layers 2 --width 768 --heads 12 --batch 2 --seq 256 --atol 1e-4
    step "gradcheck cgt" $B/gradcheck --devices cpu,cuda --model cgt
    step "gradcheck cgt vae softmax" $B/gradcheck --devices cpu,cuda --model cgt --layers 3 --ell 1 --width 48 --heads 4 --dy 16 --seq 60 --batch 4 --vae --horizon 8 --mix softmax
    echo; echo "(gradcheck has no kernel-LM or TinT model: the kernel LM is compared in the test case 'cuda models: CGT … and the kernel LM', TinT in 'cuda models: TinT …')"
fi

if want runs; then
    o=out/gpu_acceptance
    rm -rf $o/dump_cpu $o/dump_gpu
    step "train_gpt tiny, cpu dump" $B/train_gpt --preset tiny --steps 1 --dump-npy $o/dump_cpu --out $o/run_cpu
    step "train_gpt tiny, cuda dump" $B/train_gpt --preset tiny --steps 1 --dump-npy $o/dump_gpu --out $o/run_gpu --device cuda
    step "npydiff cpu vs cuda dump" $B/npydiff $o/dump_cpu $o/dump_gpu
    step "train_gpt arith on cuda, saved" $B/train_gpt --preset arith --steps 300 --device cuda --out $o/arith_gpu --save $o/arith_gpu.safetensors
    step "…continued on the cpu" $B/train_gpt --load $o/arith_gpu.safetensors --task arith --steps 20 --out $o/arith_cpu_continued
    step "train_gpt arith on cuda --tf32 (T = 243)" $B/train_gpt --preset arith --steps 50 --device cuda --tf32 --out $o/arith_tf32
    step "train_cgt icl-mini on cuda" $B/train_cgt --preset icl-mini --steps 100 --device cuda --out $o/cgt
    step "train_gpt text on cuda" $B/train_gpt --preset bench --data data/text/notes.txt --device cuda --steps 50 --out $o/train_bench
    step "iclca e1 on cuda (fp32 relerr on the GPU, fp64 on the CPU)" $B/iclca e1 --sizes 205k,2m --trials 5 --device cuda --out $o/iclca_e1
    step "iclca e2 on cuda (trains, converts, generates)" $B/iclca e2 --preset tiny --device cuda --out $o/iclca_e2
    step "iclca e4 on cuda (ICLAA hybrid attention)" $B/iclca e4 --layers 3 --width 64 --heads 4 --trials 3 --features 16,256,4096 --device cuda --out $o/iclca_e4
    step "iclca bench on cuda" $B/iclca bench --Ms 0,256 --Ts 256,1024 --gen 32 --device cuda --out $o/iclca_bench
    step "duallens experiment on cuda" $B/duallens experiment --preset tiny --device cuda --out $o/duallens
    step "tint check on cuda (fp32 simulator on the GPU vs oracle A)" $B/tint check --device cuda --k 2 --s 1 --out $o/tint_check
    step "tint bench on cuda" $B/tint bench --device cuda --out $o/tint_bench
    step "tint fewshot tiny on cuda (the auxiliary model trained there)" $B/tint fewshot --preset tiny --device cuda --out $o/tint_fewshot
    if command -v mpirun >/dev/null 2>&1; then
        step "mpirun -np 1 train_gpt on cuda" mpirun --allow-run-as-root -np 1 $B/train_gpt --preset tiny --steps 5 --device cuda --out $o/mpi1
    else
        echo; echo "=== mpirun: skipped: not installed"; results+=("skip      -   mpirun (not installed)")
    fi
    # NCCL on one GPU: the trainer's gradient through a one-rank communicator must change nothing
    if ldd $B/train_gpt 2>/dev/null | grep -q libnccl; then
        step "train_gpt tiny on cuda (plain)" $B/train_gpt --preset tiny --steps 20 --device cuda --out $o/nccl_plain
        step "train_gpt tiny on cuda through NCCL (ICL_NCCL_ALWAYS=1)" env ICL_NCCL_ALWAYS=1 $B/train_gpt --preset tiny --steps 20 --device cuda --out $o/nccl_one
        step "NCCL run's losses = the plain run's" bash -c "diff <(grep -v '^#' $o/nccl_plain/log.csv | cut -d, -f1,2,4) <(grep -v '^#' $o/nccl_one/log.csv | cut -d, -f1,2,4)"
    else
        echo; echo "=== NCCL: skipped: this build has no NCCL (make cuda found no nccl.h/libnccl)"; results+=("skip      -   NCCL (not in this build)")
    fi
    if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] && command -v mpirun >/dev/null 2>&1; then
        step "mpirun -np 2 train_gpt on 2 GPUs (NCCL)" mpirun --allow-run-as-root -np 2 $B/train_gpt --preset tiny --steps 20 --batch 4 --device cuda --out $o/nccl2
    else
        echo; echo "=== NCCL between GPUs: skipped: needs 2 GPUs and mpirun"; results+=("skip      -   NCCL across 2 GPUs (one GPU here, or no mpirun)")
    fi
fi

if want bench; then
    step "bench gemm kernels model cgt (cuda)" $B/bench --device cuda gemm kernels model cgt
    step "bench GPT-2 small" $B/bench --device cuda kernels model --preset gpt2-small
    step "bench GPT-2 small --tf32" $B/bench --device cuda model --preset gpt2-small --tf32
    if $py -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
        step "PyTorch eager, GPT-2 small" $py tools/bench_pytorch.py --device cuda $G2S --reps 10
        step "PyTorch eager, GPT-2 small, TF32" $py tools/bench_pytorch.py --device cuda $G2S --reps 10 --tf32
    else
        echo; echo "=== PyTorch: skipped: no PyTorch with CUDA for $py"; results+=("skip      -   PyTorch comparison (no torch with CUDA)")
    fi
    step "bench GPT-2 small, fused attention (ICL_FUSED_ATTENTION=1)" env ICL_FUSED_ATTENTION=1 $B/bench --device cuda model --preset gpt2-small
    step "train_gpt arith on cuda, fused attention" env ICL_FUSED_ATTENTION=1 $B/train_gpt --preset arith --steps 300 --device cuda --out out/gpu_acceptance/arith_fused
    step "iclca bench on cuda, kernel attention chunked (the default)" $B/iclca bench --Ms 0 --Ts 1024,4096,16384 --gen 32 --device cuda --out out/gpu_acceptance/kattn_chunked
    step "iclca bench on cuda, kernel attention scanned (ICL_KATTN_FORM=scan)" env ICL_KATTN_FORM=scan $B/iclca bench --Ms 0 --Ts 1024,4096,16384 --gen 32 --device cuda --out out/gpu_acceptance/kattn_scan
    step "iclca bench on cuda, kernel attention scanned, state in shared memory (ICL_KATTN_FORM=scan-shared)" env ICL_KATTN_FORM=scan-shared $B/iclca bench --Ms 0 --Ts 1024,4096,16384 --gen 32 --device cuda --out out/gpu_acceptance/kattn_scan_shared
fi

echo
echo "gpu_acceptance.sh: every step (exit status, seconds, name):"
printf '  %s\n' "${results[@]}"
if [ ${#failures[@]} -eq 0 ]; then
    echo "gpu_acceptance.sh: every step passed; report in $report"
else
    echo "gpu_acceptance.sh: ${#failures[@]} step(s) failed:"
    printf '  %s\n' "${failures[@]}"
    echo "report in $report"
    exit 1
fi
