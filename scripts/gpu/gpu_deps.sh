#!/usr/bin/env bash
# The build dependencies a GPU machine may lack (no root, no network, no apt), as Debian packages,
# for scripts/gpu/gpu_check.sh:
#   scripts/gpu/gpu_deps.sh            on a networked Debian/Ubuntu machine: download the .debs into
#                                  deps/debs (git-ignored; about 13 MiB) and unpack them into
#                                  deps/prefix
#   scripts/gpu/gpu_deps.sh --unpack   on the GPU machine: unpack deps/debs into deps/prefix only
# then  DDP_DEPS_PREFIX=$PWD/deps/prefix scripts/gpu/gpu_check.sh
#
# OpenBLAS (libopenblas0-pthread, libopenblas-pthread-dev, libgfortran5, libquadmath0) and GoogleTest
# (libgtest-dev) are optional for the build (without them: a plain C CPU GEMM, no unit/gpu gtest
# binaries); libdeflate is the one hard need, and the GPU machine may have none of it: its header and
# link (libdeflate-dev) and its shared library (libdeflate0), which both unpack into
# prefix/usr/lib/x86_64-linux-gnu (libdeflate.so -> libdeflate.so.0, a relative link).
# gpu_check.sh builds against them and puts that folder on LD_LIBRARY_PATH.
# DEPS_DIR chooses another folder than deps/.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEPS=${DEPS_DIR:-deps}
PACKAGES=(libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0 libdeflate-dev libdeflate0
          libgtest-dev)
if [ "${1:-}" != "--unpack" ]; then
  mkdir -p "$DEPS/debs"
  (cd "$DEPS/debs" && apt-get download "${PACKAGES[@]}")
fi
shopt -s nullglob
debs=("$DEPS"/debs/*.deb)
[ ${#debs[@]} -gt 0 ] || { echo "gpu_deps: no .debs in $DEPS/debs (run scripts/gpu/gpu_deps.sh on a networked machine)" >&2; exit 1; }
rm -rf "$DEPS/prefix"
mkdir -p "$DEPS/prefix"
for d in "${debs[@]}"; do
  if command -v dpkg-deb > /dev/null; then
    dpkg-deb -x "$d" "$DEPS/prefix"
  else  # a .deb is an ar archive holding data.tar.*
    tmp=$(mktemp -d)
    (cd "$tmp" && ar x "$OLDPWD/$d" && tar -xf data.tar.* -C "$OLDPWD/$DEPS/prefix")
    rm -rf "$tmp"
  fi
done
[ -e "$DEPS/prefix/usr/lib/x86_64-linux-gnu/libdeflate.so.0" ] ||
  { echo "gpu_deps: no libdeflate.so.0 in $DEPS/prefix (libdeflate0 missing from $DEPS/debs)" >&2; exit 1; }
echo "gpu_deps: ${#debs[@]} packages unpacked into $DEPS/prefix; use DDP_DEPS_PREFIX=$PWD/$DEPS/prefix"
