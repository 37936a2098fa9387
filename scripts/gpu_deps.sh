#!/usr/bin/env bash
# The build dependencies a GPU machine may lack (no root, no network, no apt), as Debian packages,
# for scripts/gpu_check.sh:
#   scripts/gpu_deps.sh            on a networked Debian/Ubuntu machine: download the .debs into
#                                  deps/debs (git-ignored; about 13 MiB) and unpack them into
#                                  deps/prefix
#   scripts/gpu_deps.sh --unpack   on the GPU machine: unpack deps/debs into deps/prefix only
# then  DDP_DEPS_PREFIX=$PWD/deps/prefix scripts/gpu_check.sh
#
# OpenBLAS (libopenblas0-pthread, libopenblas-pthread-dev, libgfortran5, libquadmath0) and GoogleTest
# (libgtest-dev) are optional for the build (without them: a plain C CPU GEMM, no unit/gpu gtest
# binaries); zlib's headers (zlib1g-dev) are the one hard need. The prefix's libz.so link is
# removed: it points at this machine's /lib/x86_64-linux-gnu/libz.so.1.x, which the GPU machine may
# not have; gpu_check.sh links the GPU machine's own runtime zlib instead.
# DEPS_DIR chooses another folder than deps/.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=${DEPS_DIR:-deps}
PACKAGES=(libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0 zlib1g-dev libgtest-dev)
if [ "${1:-}" != "--unpack" ]; then
  mkdir -p "$DEPS/debs"
  (cd "$DEPS/debs" && apt-get download "${PACKAGES[@]}")
fi
shopt -s nullglob
debs=("$DEPS"/debs/*.deb)
[ ${#debs[@]} -gt 0 ] || { echo "gpu_deps: no .debs in $DEPS/debs (run scripts/gpu_deps.sh on a networked machine)" >&2; exit 1; }
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
rm -f "$DEPS/prefix/usr/lib/x86_64-linux-gnu/libz.so"
echo "gpu_deps: ${#debs[@]} packages unpacked into $DEPS/prefix; use DDP_DEPS_PREFIX=$PWD/$DEPS/prefix"
