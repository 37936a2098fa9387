#!/usr/bin/env bash
# Fuzzes the two file readers that take untrusted input with libFuzzer (clang), each for a bounded time:
#   idx   dataset_load_idx (common/data/data.c): IDX image + label files, plain or gzip
#   ckpt  ckpt_load (common/ckpt/ckpt.c): checkpoint files
# Usage: dev/fuzz.sh [seconds per target, default 60] [target...]
# Builds into build-fuzz/ (ASan + UBSan + libFuzzer), starts from the committed seeds in
# fuzz/corpus/<target>/ and keeps what it learns in build-fuzz/corpus-<target>/ (not committed). A crash
# leaves build-fuzz/crash-<target>-*; reproduce it with build-fuzz/fuzz_<target> FILE, add it to
# fuzz/corpus/<target>/ once fixed (the fuzz_replay CTest then guards it), and the script exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(idx ckpt)
CC=${CC_FUZZ:-clang}
command -v "$CC" >/dev/null || { echo "fuzz.sh: $CC not found (apt-get install clang)" >&2; exit 2; }
out=build-fuzz
mkdir -p "$out"
flags=(-std=c11 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -Wall -Wextra -Ifuzz)
for floor in common/*/; do flags+=(-I"${floor%/}"); done  # common/'s floors (common/CMakeLists.txt)
# data.c includes the generator's source hash, which the build makes (cmake/source_hash.cmake).
cmake -DOUT="$out/generated/synthetic_source.h" -DFILES=common/data/data.c,common/base/rng.c \
  -P cmake/source_hash.cmake
flags+=(-I"$out/generated")
declare -A src=([idx]="fuzz/fuzz_idx.c common/data/data.c common/base/file.c common/base/check.c common/base/rng.c"
                [ckpt]="fuzz/fuzz_ckpt.c common/ckpt/ckpt.c common/base/file.c common/data/data.c common/base/check.c
                        common/base/rng.c")  # ckpt.c names a checkpoint's data with data.c's dataset_id_str
libs=(-ldeflate -lm)
status=0
for t in "${targets[@]}"; do
  [ -n "${src[$t]:-}" ] || { echo "fuzz.sh: unknown target '$t' (idx, ckpt)" >&2; exit 2; }
  # shellcheck disable=SC2086
  "$CC" "${flags[@]}" ${src[$t]} fuzz/fuzz_util.c "${libs[@]}" -o "$out/fuzz_$t"
  mkdir -p "$out/corpus-$t"
  echo "== fuzz_$t: ${secs}s"
  # -rss_limit_mb / -malloc_limit_mb: a header that makes the reader allocate more than 2 GiB is a
  # finding (a corrupt file must be reported, not swap the machine), as is any leak, crash or hang.
  if ! UBSAN_OPTIONS=print_stacktrace=1 "$out/fuzz_$t" -max_total_time="$secs" -timeout=10 \
        -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$out/crash-$t-" "$out/corpus-$t" "fuzz/corpus/$t" \
        2> "$out/fuzz_$t.log"; then
    status=1
    echo "fuzz_$t: FOUND A CRASH, see $out/fuzz_$t.log and $out/crash-$t-*" >&2
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^stat::new_units_added|Done [0-9]+ runs" \
    "$out/fuzz_$t.log" || true
  echo "   corpus: $(ls "$out/corpus-$t" | wc -l) inputs in $out/corpus-$t"
done
exit $status
