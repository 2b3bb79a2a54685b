#!/usr/bin/env bash
# Collect the build's dependencies that a machine without package access lacks (this project's lent GPU machine
# reaches no package registry): the header-only libraries (doctest, stb, nlohmann-json), PCRE2's header and its
# shared library, from this Debian machine into one folder that git ignores.
#
#   tools/gpu_deps.sh [DIR]          (default: .gpu-deps; about 3 MB)
#
# Then carry DIR to the machine and build with `make cuda DEPS_DIR=DIR` (tools/gpu_acceptance.sh --deps DIR does).
set -euo pipefail
cd "$(dirname "$0")/.."
d=${1:-.gpu-deps}
for h in /usr/include/doctest/doctest.h /usr/include/stb/stb_image_write.h /usr/include/nlohmann/json.hpp /usr/include/pcre2.h; do
    [ -f "$h" ] || { echo "error: $h is missing here (make deps installs it)" >&2; exit 1; }
done
lib=$(ls /usr/lib/*/libpcre2-8.so.0 2>/dev/null | head -1 || true)
[ -n "$lib" ] || { echo "error: libpcre2-8.so.0 not found (apt-get install libpcre2-dev)" >&2; exit 1; }
# the folder is replaced: only one this script made (its marker file) or a new one
if [ -e "$d" ] && [ ! -f "$d/.gpu-deps" ]; then echo "error: $d exists and was not made by tools/gpu_deps.sh; not replacing it" >&2; exit 2; fi
rm -rf "$d"
mkdir -p "$d/include" "$d/lib"
echo "made by tools/gpu_deps.sh" > "$d/.gpu-deps"
cp -r /usr/include/doctest /usr/include/stb /usr/include/nlohmann /usr/include/pcre2.h "$d/include/"
cp -L "$lib" "$d/lib/libpcre2-8.so.0"
ln -s libpcre2-8.so.0 "$d/lib/libpcre2-8.so"
echo "wrote $d/ ($(du -sh "$d" | cut -f1)): $(cd "$d" && find . -maxdepth 2 -mindepth 2 | sort | tr '\n' ' ')"
