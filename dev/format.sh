#!/usr/bin/env bash
# Formats the C, C++ and CUDA sources with .clang-format, or checks them (CTest `format`).
#
#   dev/format.sh           rewrite every file that differs from its formatted self
#   dev/format.sh --check   list the files that differ and exit 1 (nothing is changed)
#
# The layout is clang-format 14's (Debian 12's `clang-format`); other major versions lay some lines
# out differently, so with another version --check says so and exits 77 (CTest: skipped).
# exercises/ is generated from steps/ by dev/make_exercises.py and is not checked here.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = --check ] && check=1
command -v clang-format >/dev/null || { echo "format.sh: clang-format is not installed (apt-get install clang-format)"; exit 77; }
major=$(clang-format --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [ "$major" != 14 ]; then
  echo "format.sh: clang-format $major found; the layout is clang-format 14's: not checked"
  [ $check -eq 1 ] && exit 77
fi
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.cc' '*.cu' | grep -v '^exercises/')
if [ $check -eq 0 ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format "$f" | cmp -s - "$f" || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "format.sh: ${#bad[@]} of ${#files[@]} files differ from clang-format's layout (run dev/format.sh):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "format.sh: all ${#files[@]} files match .clang-format"
