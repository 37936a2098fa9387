#!/usr/bin/env bash
# A minimal single-node launcher in the style of torchrun, for machines without MPI:
#   scripts/launch.sh -n N PROGRAM [ARGS...]
# starts N copies of PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
# MASTER_PORT set (MASTER_PORT from the environment, default 29500; NCCL bootstraps on the port after
# it). If any rank fails, the others are stopped, so nothing is left hanging; the exit status is the
# first failure's. SIGTERM or SIGINT (Ctrl-C) to the launcher stops every rank too, and the launcher
# then exits with 128 + the signal's number.
set -uo pipefail
if [ "${1:-}" != "-n" ] || [ -z "${2:-}" ] || [ -z "${3:-}" ]; then
  echo "usage: $0 -n N PROGRAM [ARGS...]" >&2
  exit 2
fi
n=$2
shift 2
case $n in '' | *[!0-9]* | 0) echo "$0: -n needs a positive number, got '$n'" >&2; exit 2 ;; esac
export WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=${MASTER_PORT:-29500}
STOP_GRACE=${STOP_GRACE:-10}  # seconds a rank has to end after SIGTERM before it gets SIGKILL

pids=()
# Ends every rank that is still running: SIGTERM, then SIGKILL to any that outlives STOP_GRACE
# seconds. (Background jobs of a script ignore SIGINT, so the ranks always get SIGTERM.) SIGCONT
# after it: a frozen (stopped) rank gets its SIGTERM now rather than after the grace period.
stop_ranks() {
  kill -TERM "${pids[@]}" 2>/dev/null
  kill -CONT "${pids[@]}" 2>/dev/null
  for ((tenths = 0; tenths < STOP_GRACE * 10; tenths++)); do
    kill -0 "${pids[@]}" 2>/dev/null || break  # true while any rank is alive
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
}
on_signal() {
  trap '' TERM INT  # a second Ctrl-C must not interrupt the clean-up
  echo "$0: got SIG$1; stopping the ranks" >&2
  stop_ranks
  exit $((128 + $2))
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT

for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r "$@" &
  pids+=($!)
done
status=0
for ((left = n; left > 0; left--)); do
  wait -n
  rc=$?
  if [ $rc -ne 0 ] && [ $status -eq 0 ]; then
    status=$rc
    echo "$0: a rank exited with status $rc; stopping the others" >&2
    stop_ranks
    break
  fi
done
exit $status
