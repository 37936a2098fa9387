#!/usr/bin/env bash
# The soak: the whole suite, several times, optionally beside busy loops, to find the tests that fail
# under load (a maintainer's tool; CI runs the suite once, through scripts/test.sh).
#
#   dev/soak.sh [--runs N] [--hog K] [CTEST ARGS...]
#     --runs N   run the suite N times (default 3)
#     --hog K    beside K busy loops (one core each), which it starts before the first run and stops,
#                by pid, when it ends, on Ctrl-C, SIGTERM or SIGHUP too (default 0)
#     CTEST ARGS are passed on, e.g. -L parity or -R step06 to soak a part
#
# It builds once (scripts/setup.sh), then runs `ctest -LE gpu` N times with scripts/test.sh's slots
# (DDP_TEST_JOBS, default twice the cores), each run's results in a JUnit file under SOAK_DIR (default
# out/soak/<date>), and prints, last: each run's counts and time, every test that failed with how many
# runs it failed in and the output of its last failure, and the retries the tests counted (a test that
# retries because of the machine itself prints a line starting `RETRY:`). Exit status 0 when every run
# passed whole, 1 otherwise. OPENBLAS_CORETYPE is never set here: set it in your shell to soak another
# kernel.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3 hog=0
while (($#)); do
  case $1 in
    --runs) runs=${2:?--runs needs a number}; shift 2 ;;
    --hog) hog=${2:?--hog needs a number}; shift 2 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "soak: --runs must be a positive integer, not '$runs'" >&2; exit 2; }
[[ $hog =~ ^[0-9]+$ ]] || { echo "soak: --hog must be a non-negative integer, not '$hog'" >&2; exit 2; }

BUILD_DIR=${BUILD_DIR:-build}
dir=${SOAK_DIR:-out/soak/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

hogs=()
stop_hogs() {
  local p
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${hogs[@]}"; do wait "$p" 2>/dev/null || true; done
  hogs=()
}
trap 'stop_hogs' EXIT
trap 'stop_hogs; exit 130' INT
trap 'stop_hogs; exit 143' TERM
trap 'stop_hogs; exit 129' HUP

scripts/setup.sh > "$dir/setup.log" 2>&1 || { echo "soak: scripts/setup.sh failed, see $dir/setup.log" >&2; exit 1; }
source scripts/mpi_env.sh
for ((k = 0; k < hog; k++)); do
  bash -c 'while :; do :; done' &
  hogs+=($!)
done
echo "soak: $runs run(s) of the suite, $hog busy loop(s) beside it (pids ${hogs[*]:-none}); logs in $dir"

jobs=${DDP_TEST_JOBS:-$((2 * $(nproc)))}
for ((i = 1; i <= runs; i++)); do
  t0=$(date +%s)
  rc=0
  # passed tests' whole output (ctest keeps 1 KiB of it by default), for the RETRY: lines
  ctest --test-dir "$BUILD_DIR" -LE gpu --no-tests=error -j "$jobs" --output-on-failure \
    --test-output-size-passed 4194304 --test-output-size-failed 4194304 \
    --output-junit "$dir/run$i.xml" "$@" > "$dir/run$i.log" 2>&1 || rc=$?
  echo "soak: run $i of $runs: exit $rc, $(($(date +%s) - t0)) s, $(grep -E '^[0-9]+% tests passed' "$dir/run$i.log" || echo 'no summary')"
done
stop_hogs

python3 dev/soak_report.py "$dir" "$runs"
