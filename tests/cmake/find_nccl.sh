#!/usr/bin/env bash
# cmake/FindNCCL.cmake takes nccl.h and libnccl from one root: fake roots in a temporary folder.
#   wheel/    include/nccl.h (2.30.7) + lib/libnccl.so.2 only, as pip's nvidia-nccl wheels ship it
#   header/   include/nccl.h only: must NOT be paired with another install's library
#   lib64/    include/nccl.h + lib64/libnccl.so
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
header() {  # root major minor patch
  mkdir -p "$1/include"
  printf '#define NCCL_MAJOR %s\n#define NCCL_MINOR %s\n#define NCCL_PATCH %s\n' "$2" "$3" "$4" > "$1/include/nccl.h"
}
header "$tmp/wheel" 2 30 7; mkdir -p "$tmp/wheel/lib"; touch "$tmp/wheel/lib/libnccl.so.2"
header "$tmp/header" 2 30 7
header "$tmp/lib64" 2 21 5; mkdir -p "$tmp/lib64/lib64"; touch "$tmp/lib64/lib64/libnccl.so"
status=0
check() {  # name, NCCL_ROOT, expected result line (a regex)
  local out
  out=$(NCCL_ROOT="$2" cmake -S "$here/find_nccl" -B "$tmp/build_$1" 2>&1 | grep 'result:')
  if [[ "$out" =~ $3 ]]; then
    echo "ok   $1: $out"
  else
    echo "FAIL $1: got '$out', expected /$3/"
    status=1
  fi
}
check wheel "$tmp/wheel" "found=TRUE include=$tmp/wheel/include library=$tmp/wheel/lib/libnccl.so.2 version=2.30.7"
check header_only "$tmp/header" "found=FALSE include=(NCCL_INCLUDE_DIR-NOTFOUND)? library=(NCCL_LIBRARY-NOTFOUND)? "
check lib64 "$tmp/lib64" "found=TRUE include=$tmp/lib64/include library=$tmp/lib64/lib64/libnccl.so version=2.21.5"
# A build folder configured against one root, then pointed at another, takes both from the new one.
NCCL_ROOT="$tmp/wheel" cmake -S "$here/find_nccl" -B "$tmp/build_switch" > /dev/null 2>&1
check switch "$tmp/lib64" "found=TRUE include=$tmp/lib64/include library=$tmp/lib64/lib64/libnccl.so"
exit $status
