#!/usr/bin/env bash
# Do two builds train the same bits? Runs the same short trainings from each build folder and compares what they
# print and write, timing columns and provenance lines aside:
#
#   tools/cross_build_check.sh BUILD_A BUILD_B        e.g. build build-avx2
#
#   train_cgt --preset make-run (30 steps, 64 evaluation sequences): the three variants' log.csv and table.md
#   train_gpt --preset linreg (20 steps): log.csv
#   iclca train --preset tiny: log.csv
#
# Exit 0 when every file is identical, 1 (naming the first difference) otherwise, 2 on bad arguments. CI runs it
# on the native build against the portable AVX2 build and a -mtune=sapphirerapids build (.ci/run): the numbers
# the README shows must not depend on the machine that compiled them.
set -uo pipefail
if [ $# -ne 2 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    [ $# -eq 2 ] && exit 0 || exit 2
fi
a=$1 b=$2
for d in "$a" "$b"; do
    for bin in train_cgt train_gpt iclca; do
        [ -x "$d/$bin" ] || { echo "error: $d/$bin not found (build it first: make BUILD=$d ...)"; exit 2; }
    done
done
tmp=$(mktemp -d /tmp/icl-cross.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# log.csv without its provenance comment and without the timing columns (found by name in the header)
strip_log() {
    grep -v '^#' "$1" | awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) skip[i] = ($i == "ms_per_step" || $i == "tokens_per_s") }
                                { out = ""; for (i = 1; i <= NF; i++) if (!skip[i]) out = out $i ","; print out }'
}
# table.md without the wall-time and provenance lines
strip_table() { grep -v -e '^Wall time' -e '^_icl.cpp' "$1"; }

for d in "$a" "$b"; do
    o="$tmp/$(basename "$d")"
    OMP_NUM_THREADS=2 "$d/train_cgt" --preset make-run --steps 30 --eval-every 30 --eval-seqs 64 --threads 2 --out "$o/cgt" >"$o.cgt.log" 2>&1 ||
        { echo "error: $d/train_cgt failed:"; tail -3 "$o.cgt.log"; exit 1; }
    OMP_NUM_THREADS=2 "$d/train_gpt" --preset linreg --steps 20 --eval-every 20 --threads 2 --out "$o/gpt" >"$o.gpt.log" 2>&1 ||
        { echo "error: $d/train_gpt failed:"; tail -3 "$o.gpt.log"; exit 1; }
    OMP_NUM_THREADS=2 "$d/iclca" train --preset tiny --threads 2 --out "$o/iclca" --save "$o/iclca/m.safetensors" >"$o.iclca.log" 2>&1 ||
        { echo "error: $d/iclca failed:"; tail -3 "$o.iclca.log"; exit 1; }
done
A="$tmp/$(basename "$a")" B="$tmp/$(basename "$b")"
bad=0
compare() {  # compare NAME FILE_A FILE_B (already stripped)
    if cmp -s "$2" "$3"; then
        echo "  same   $1"
    else
        echo "  DIFFER $1: first difference:"
        diff "$2" "$3" | head -4 | sed 's/^/           /'
        bad=1
    fi
}
echo "cross-build check: $a vs $b"
for f in cgt/baseline-s1/log.csv cgt/eta1-s1/log.csv cgt/aux-reg-s1/log.csv gpt/log.csv iclca/log.csv; do
    strip_log "$A/$f" >"$tmp/a" && strip_log "$B/$f" >"$tmp/b" && compare "$f" "$tmp/a" "$tmp/b"
done
strip_table "$A/cgt/table.md" >"$tmp/a" && strip_table "$B/cgt/table.md" >"$tmp/b" && compare "cgt/table.md" "$tmp/a" "$tmp/b"
if [ $bad = 0 ]; then echo "cross-build check: every file identical"; exit 0; fi
echo "cross-build check: the two builds train different numbers"
exit 1
