# Sourced by tools/bench_vs_openblas.sh and tools/bench_vs_pytorch.sh: make OpenBLAS use the widest kernel this
# CPU can run, and say which one it used.
#
# Why: OpenBLAS picks its kernels from the CPU's family/model at run time, and a release older than the CPU does
# not know it. Debian 12's OpenBLAS 0.3.21 takes the Intel Xeon of family 6 model 207 (Emerald Rapids, AVX-512) for
# a "Prescott" (SSE3): its SGEMM 1024³ ran at 51-64 GFLOP/s there, and at 228-299 with OPENBLAS_CORETYPE=SkylakeX or
# Cooperlake (2026-12-03, 2 threads). A reference that slow would make any ratio against it meaningless.
#
#   openblas_pick_core PY   sets and exports OPENBLAS_CORETYPE when the user has not set it and OpenBLAS's own
#                           choice is narrower than the CPU's widest vector ISA; sets OPENBLAS_CORE_NOTE to one line
#                           saying what OpenBLAS runs with (for the script's report), with a warning (also on stderr)
#                           when a caller's OPENBLAS_CORETYPE makes it narrower than the CPU's widest.
openblas_detected_core() {  # the core OpenBLAS prints with OPENBLAS_VERBOSE=2 when it loads, or "unknown"
    local core
    core=$(OPENBLAS_VERBOSE=2 "$1" -c 'import numpy; numpy.ones((2, 2), numpy.float32) @ numpy.ones((2, 2), numpy.float32)' 2>&1 |
           sed -n 's/^Core: \([A-Za-z0-9_]*\).*/\1/p' | tail -1) || true
    echo "${core:-unknown}"
}
openblas_core_width() {  # the vector width of an OpenBLAS core name: 512, 256 or 128 (older or unknown)
    case "$1" in
        SkylakeX|Cooperlake|SapphireRapids) echo 512 ;;
        Haswell|Zen|SkylakeDesktop) echo 256 ;;
        *) echo 128 ;;
    esac
}
openblas_pick_core() {
    local py=$1 flags detected want="" width=128
    flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
    case " $flags " in
        *" avx512_bf16 "*) want=Cooperlake width=512 ;;  # SkylakeX's SGEMM kernel, and OpenBLAS knows the bf16 instructions
        *" avx512f "*) want=SkylakeX width=512 ;;
        *" avx2 "*) want=Haswell width=256 ;;
    esac
    if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
        # kept: the caller may mean it. But some machines set it in the environment (a Zen 5 of this project's pool
        # had OPENBLAS_CORETYPE=Haswell, 2026-12-04: its AVX-512 OpenBLAS then ran 256-bit kernels), so say so when
        # it is narrower than this CPU allows.
        detected=$(openblas_detected_core "$py")
        OPENBLAS_CORE_NOTE="OpenBLAS kernel: $detected (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE, set by the caller)"
        if [ "$detected" != unknown ] && [ "$(openblas_core_width "$detected")" -lt "$width" ]; then
            OPENBLAS_CORE_NOTE="$OPENBLAS_CORE_NOTE; WARNING: narrower than this CPU's widest ($want): OpenBLAS runs slower than this machine allows (env -u OPENBLAS_CORETYPE for the fair comparison)"
            echo "warning: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (set by the caller or the environment) runs OpenBLAS's $detected kernel, narrower than this CPU's $want; the comparison is against a slower OpenBLAS than this machine allows (env -u OPENBLAS_CORETYPE ... for the fair one)" >&2
        fi
        return 0
    fi
    detected=$(openblas_detected_core "$py")
    case "$detected" in
        SkylakeX|Cooperlake|SapphireRapids) want="" ;;           # already AVX-512
        Haswell|Zen|SkylakeDesktop) case "$want" in Haswell) want="" ;; esac ;;  # already AVX2 where AVX2 is the widest
    esac
    if [ -n "$want" ]; then
        export OPENBLAS_CORETYPE=$want
        OPENBLAS_CORE_NOTE="OpenBLAS kernel: $(openblas_detected_core "$py") (OPENBLAS_CORETYPE=$want set here: on its own OpenBLAS chose $detected, narrower than this CPU)"
    else
        OPENBLAS_CORE_NOTE="OpenBLAS kernel: $detected (its own choice)"
    fi
}
