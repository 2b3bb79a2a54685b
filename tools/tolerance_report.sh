#!/usr/bin/env bash
# tools/tolerance_report.sh — every tolerance of the CPU test suite beside the error it actually measured.
#
# The suite is rebuilt against a copy of doctest that prints floating-point values with 17 significant digits and
# an Approx with its epsilon and scale, then run with --success (every passing assertion is reported, with its
# operands expanded). tools/tolerance_report.py reads that stream and keeps, for every comparison site
# (test case, file:line), the worst value it took against the tolerance it was held to:
#   a == Approx(b).epsilon(e).scale(s)   measured |a − b|, tolerance e·(s + max(|a|, |b|))  (doctest's rule)
#   x <= t, x < t                         measured x, tolerance t
#   x >= t, x > t                         a lower bound: the margin t / x, reported separately
# Comparisons of two integers (sizes, counts) are not tolerances and are left out.
# The result is a Markdown table (default docs/tolerances.md) with the machine, ISA path, commit and threads it was
# measured with, and the sites whose tolerance is more than 1000× the worst measured error listed first.
#
# usage: tools/tolerance_report.sh [--build DIR] [--out FILE] [--filter DOCTEST_ARGS]
#   --build DIR   the build whose libicl.a and binaries are used (default build/; `make` it first)
#   --out FILE    the report (default docs/tolerances.md)
#   --filter ARGS extra doctest arguments, e.g. '-ts=layers' (default: the whole suite)
# Takes about as long as `make test` plus one compile of tests/ (~10 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build OUT=docs/tolerances.md FILTER=""
while [ $# -gt 0 ]; do
    case "$1" in
        --build) BUILD="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --filter) FILTER="$2"; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -f "$BUILD/libicl.a" ] && [ -f "$BUILD/flags.stamp" ] || { echo "error: $BUILD/libicl.a not found (run 'make' first)" >&2; exit 1; }
# the library and binaries must be those of today's sources: tests compiled against newer headers would measure
# (or fail on) another program
newer=$(find src -newer "$BUILD/libicl.a" \( -name '*.h' -o -name '*.cpp' \) | head -1)
[ -z "$newer" ] || { echo "error: $newer is newer than $BUILD/libicl.a (run 'make' for that build first)" >&2; exit 1; }
SYS=/usr/include/doctest/doctest.h
[ -f "$SYS" ] || { echo "error: $SYS not found (make deps)" >&2; exit 1; }

WORK="$BUILD/tolerance"
mkdir -p "$WORK/include/doctest" "$WORK/obj"
# The patched doctest: 17 digits for every floating value, an Approx printed with its epsilon and scale.
python3 - "$SYS" "$WORK/include/doctest/doctest.h" <<'EOF'
import sys
src = open(sys.argv[1]).read()
a = "        std::ostream* os = tlssPush();\n        os->operator<<(t);"
b = "        std::ostream* os = tlssPush();\n        os->precision(17);\n        os->operator<<(t);"
c = 'return "Approx( " + doctest::toString(in.m_value) + " )";'
d = ('return "Approx( " + doctest::toString(in.m_value) + " ).epsilon( " + doctest::toString(in.m_epsilon)'
     ' + " ).scale( " + doctest::toString(in.m_scale) + " )";')
if a not in src or c not in src:
    sys.exit("error: this doctest version cannot be patched for the report (toStreamLit / toString(Approx) changed)")
open(sys.argv[2], "w").write(src.replace(a, b).replace(c, d))
EOF

# The compiler and flags $BUILD was built with, as its flags.stamp records them (the Makefile writes the compile command
# there), so the tests are compiled exactly as that build's own; CPU builds only (a CUDA build's tests need nvcc's link).
read -r CXX_BIN FLAGS < "$BUILD/flags.stamp" || true
[ -n "${CXX_BIN:-}" ] || { echo "error: $BUILD/flags.stamp is empty" >&2; exit 1; }
case " $FLAGS " in *" -DICL_CUDA "*) echo "error: $BUILD is a CUDA build; give a CPU build (--build build)" >&2; exit 1 ;; esac
FLAGS="-I$WORK/include $(echo "$FLAGS" | sed -e 's/ -MMD -MP//')"
LIBS="-fopenmp -lpcre2-8 -lm"
case " $FLAGS " in *" -DICL_MPI "*) LIBS="$LIBS $(mpicxx --showme:link 2>/dev/null || echo -lmpi)" ;; esac
# the vector ISA that build compiled for (not the CPU's: an AVX2 build on an AVX-512 machine is an AVX2 build)
# shellcheck disable=SC2086
if $CXX_BIN $FLAGS -dM -E -x c++ /dev/null 2>/dev/null | grep -q __AVX512F__; then ISA=AVX-512
elif $CXX_BIN $FLAGS -dM -E -x c++ /dev/null 2>/dev/null | grep -q __AVX2__; then ISA=AVX2
else ISA="no AVX2"; fi
SRCS=$(ls tests/*.cpp tests/fuzz/fuzz_targets.cpp)
# An object is reused only while its source is older and no header (tests/, src/, the patched doctest) changed.
STAMP=$( (echo "$CXX_BIN $FLAGS"; $CXX_BIN --version; cat $(find tests src -name '*.h' | sort) "$WORK/include/doctest/doctest.h") | md5sum | cut -d' ' -f1)
[ "$(cat "$WORK/obj/stamp" 2>/dev/null)" = "$STAMP" ] || { rm -f "$WORK"/obj/*.o; echo "$STAMP" > "$WORK/obj/stamp"; }
echo "compiling tests/ against the patched doctest into $WORK/obj …" >&2
printf '%s\n' $SRCS | xargs -P "$(nproc)" -I{} sh -c \
    'o='"$WORK"'/obj/$(echo {} | tr / _).o; [ "$o" -nt {} ] || '"$CXX_BIN $FLAGS"' -c {} -o "$o"'
# shellcheck disable=SC2086
OBJS=$(for f in $SRCS; do echo "$WORK/obj/$(echo "$f" | tr / _).o"; done)
# shellcheck disable=SC2086
$CXX_BIN $OBJS "$BUILD/libicl.a" -o "$WORK/test_icl" $LIBS

echo "running the suite with --success (every passing assertion reported) …" >&2
THREADS=2
st=0
# shellcheck disable=SC2086
ICL_BIN_DIR="$BUILD" OMP_NUM_THREADS=$THREADS "$WORK/test_icl" --success -r=xml --out="$WORK/success.xml" $FILTER \
    >/dev/null 2>&1 || st=$?
[ $st -eq 0 ] || echo "warning: the suite exited with $st (failed sites are marked in the report)" >&2
python3 tools/tolerance_report.py "$WORK/success.xml" --threads "$THREADS" --build "$BUILD" --isa "$ISA" --out "$OUT"
rm -f "$WORK/success.xml"
echo "wrote $OUT" >&2
